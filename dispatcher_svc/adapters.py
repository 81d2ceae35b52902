"""The loop's ports over gRPC: `agentmesh.rpc.channels.ServiceClients` stubs, and their protobuf mappings.

Every downstream call carries the task's identity token and request id explicitly (the worker
runs outside any incoming call) and a timeout; a failed RPC becomes the AgentmeshError its rich
status carries. ResolveApproval/GetApproval carry no explicit identity: the client interceptor
forwards the incoming caller's (the operator's) verified token, so tool_svc sees who approves.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import TypeVar

import grpc
import grpc.aio

from agentmesh.callctx import IDENTITY_HEADER, REQUEST_ID_HEADER
from agentmesh.chat import Role, ToolCall
from agentmesh.errors import AgentmeshError, ErrorCode
from agentmesh.rpc import codec
from agentmesh.rpc.channels import ServiceClients
from agentmesh.rpc.status import checked_from_detail, from_rpc_error, to_detail
from agentmesh.v1 import common_pb2, context_pb2, provider_pb2, tool_pb2
from dispatcher_svc.model import (
    ApprovalRecord,
    ExecStats,
    ModelReply,
    PayloadRef,
    PendingApproval,
    SentPrompt,
    ToolOutcome,
    ToolOutput,
)
from dispatcher_svc.ports import (
    Appended,
    Attachment,
    CallOptions,
    ContextBlockInfo,
    ContextView,
    Ports,
    SessionInfo,
    SessionSpec,
    ToolInfo,
)

T = TypeVar("T")

_RESULT_TYPES = {"structured": common_pb2.RESULT_TYPE_STRUCTURED, "text": common_pb2.RESULT_TYPE_TEXT}
_RESULT_NAMES = {v: k for k, v in _RESULT_TYPES.items()}


# --- protobuf mappings of the calls to the other services (server.py uses the shared ones) ------


def message_pb(role: str, content: str, tool_calls: tuple[ToolCall, ...] | list[ToolCall] = ()) -> common_pb2.Message:
    return common_pb2.Message(
        role=codec.role_to_pb(Role(role)), content=content, tool_calls=[codec.tool_call_to_pb(c) for c in tool_calls]
    )


def payload_ref_pb(ref: PayloadRef) -> common_pb2.PayloadRef:
    pb = common_pb2.PayloadRef(
        ref_id=ref.ref_id,
        session_id=ref.session_id,
        size_bytes=ref.size_bytes,
        media_type=ref.media_type,
        sha256=ref.sha256,
    )
    if ref.expire_time_ms:
        pb.expire_time.CopyFrom(codec.timestamp_ms(ref.expire_time_ms))
    return pb


def payload_ref(pb: common_pb2.PayloadRef) -> PayloadRef:
    return PayloadRef(
        ref_id=pb.ref_id,
        session_id=pb.session_id,
        size_bytes=pb.size_bytes,
        media_type=pb.media_type,
        sha256=pb.sha256,
        expire_time_ms=codec.millis(pb.expire_time, "expire_time") if pb.HasField("expire_time") else 0,
    )


# --- tools ----------------------------------------------------------------------------------------


def pending_pb(pending: PendingApproval) -> common_pb2.PendingApproval:
    pb = common_pb2.PendingApproval(
        approval_id=pending.approval_id,
        plan=codec.tool_call_to_pb(pending.plan),
        impact=pending.impact,
        arguments_sha256=pending.arguments_sha256,
        requested_by=pending.requested_by,
        kind=_KIND_PB.get(pending.kind, common_pb2.APPROVAL_KIND_CALL),
    )
    if pending.expire_time_ms:
        pb.expire_time.CopyFrom(codec.timestamp_ms(pending.expire_time_ms))
    return pb


def pending(pb: common_pb2.PendingApproval) -> PendingApproval:
    return PendingApproval(
        approval_id=pb.approval_id,
        plan=codec.tool_call_from_pb(pb.plan),
        impact=pb.impact,
        arguments_sha256=pb.arguments_sha256,
        expire_time_ms=codec.millis(pb.expire_time, "expire_time") if pb.HasField("expire_time") else 0,
        requested_by=pb.requested_by,
        kind=_KIND_FROM_PB.get(pb.kind, "call"),
    )


_KIND_PB = {
    "call": common_pb2.APPROVAL_KIND_CALL,
    "register_tool": common_pb2.APPROVAL_KIND_REGISTER_TOOL,
    "settlement": common_pb2.APPROVAL_KIND_SETTLEMENT,
}
_KIND_FROM_PB = {v: k for k, v in _KIND_PB.items()}
SETTLEMENT_PB = {"ran": common_pb2.SETTLEMENT_OUTCOME_RAN, "not_ran": common_pb2.SETTLEMENT_OUTCOME_NOT_RAN}
_SETTLEMENT_FROM_PB = {v: k for k, v in SETTLEMENT_PB.items()}


def tool_result_pb(outcome: ToolOutcome) -> common_pb2.ToolResult:
    pb = common_pb2.ToolResult(tool_call_id=outcome.tool_call_id, tool_name=outcome.tool_name)
    if outcome.output is not None:
        out = outcome.output
        output = common_pb2.ToolOutput(
            digest=out.digest,
            result_type=_RESULT_TYPES.get(out.result_type, common_pb2.RESULT_TYPE_UNSPECIFIED),
            redacted=out.redacted,
        )
        if out.ref is not None:
            output.ref.CopyFrom(payload_ref_pb(out.ref))
        elif out.inline is not None:
            output.inline = out.inline
        pb.output.CopyFrom(output)
    elif outcome.error is not None:
        pb.error.CopyFrom(to_detail(outcome.error))
    elif outcome.pending is not None:
        pb.pending_approval.CopyFrom(pending_pb(outcome.pending))
    if outcome.correction is not None:
        pb.correction.CopyFrom(codec.correction_to_pb(outcome.correction))
    s = outcome.stats
    pb.stats.attempts = s.attempts
    pb.stats.duration.CopyFrom(codec.duration(s.duration_ms / 1000))
    pb.stats.replayed = s.replayed
    pb.stats.output_bytes = s.output_bytes
    return pb


def tool_result(pb: common_pb2.ToolResult) -> ToolOutcome:
    which = pb.WhichOneof("outcome")
    output = error = pend = None
    if which == "output":
        o = pb.output
        content = o.WhichOneof("content")
        output = ToolOutput(
            inline=o.inline if content == "inline" else None,
            ref=payload_ref(o.ref) if content == "ref" else None,
            digest=o.digest,
            result_type=_RESULT_NAMES.get(o.result_type, ""),
            redacted=o.redacted,
        )
    elif which == "error":
        error = checked_from_detail(pb.error, "result.error")
    elif which == "pending_approval":
        pend = pending(pb.pending_approval)
    else:
        error = AgentmeshError(  # a ToolResult without an outcome is tool_svc's bug, typed as such
            ErrorCode.INTERNAL, f"tool_svc answered {pb.tool_name or 'a call'} without an outcome"
        )
    stats = ExecStats(
        attempts=pb.stats.attempts,
        duration_ms=codec.duration_seconds(pb.stats.duration, "result.stats.duration") * 1000,
        replayed=pb.stats.replayed,
        output_bytes=pb.stats.output_bytes,
    )
    return ToolOutcome(pb.tool_call_id, pb.tool_name, output=output, error=error, pending=pend, stats=stats)


def tool_info(spec: common_pb2.ToolSpec) -> ToolInfo:
    return ToolInfo(
        name=spec.name,
        group=spec.permission.group,
        description=spec.description,
        fallback_tool=spec.fallback_tool,
        spec=spec,
        write=spec.permission.access == common_pb2.ACCESS_MODE_WRITE,
    )


def approval(pb: common_pb2.Approval) -> ApprovalRecord:
    state = common_pb2.ApprovalState.Name(pb.state).removeprefix("APPROVAL_STATE_")
    return ApprovalRecord(
        request=pending(pb.request) if pb.HasField("request") else None,
        state=state,
        resolved_by=pb.resolved_by,
        reason=pb.reason,
        resolve_time_ms=codec.millis(pb.resolve_time, "resolve_time") if pb.HasField("resolve_time") else 0,
        settlement=_SETTLEMENT_FROM_PB.get(pb.settlement, ""),
    )


# --- context and provider -------------------------------------------------------------------------


def session_info(pb: context_pb2.Session) -> SessionInfo:
    return SessionInfo(message_count=pb.message_count, total_tokens=pb.total_tokens)


def context_view(pb: context_pb2.ContextView) -> ContextView:
    return ContextView(
        messages=list(pb.messages),
        total_tokens=pb.total_tokens,
        budget_tokens=pb.budget_tokens,
        blocks=[
            ContextBlockInfo(
                kind=context_pb2.ContextBlockKind.Name(b.kind).removeprefix("CONTEXT_BLOCK_KIND_"),
                tokens=b.tokens,
                budget_tokens=b.budget_tokens,
                message_count=b.message_count,
            )
            for b in pb.blocks
        ],
        summarized_messages=pb.summarized_messages,
        dropped_messages=pb.dropped_messages,
        compacted=pb.compacted,
    )


def model_reply(pb: provider_pb2.GenerateResponse) -> ModelReply:
    sent = None
    if pb.request_json:
        sent = SentPrompt(format=pb.request_format, request_json=pb.request_json, redacted=pb.request_redacted)
    return ModelReply(
        text=pb.message.content,
        tool_calls=tuple(codec.tool_call_from_pb(c) for c in pb.message.tool_calls),
        usage=codec.usage_from_pb(pb.usage),
        model=pb.model,
        finish_reason=provider_pb2.FinishReason.Name(pb.finish_reason).removeprefix("FINISH_REASON_"),
        cost_usd=pb.cost_usd,
        sent=sent,
    )


def _metadata(opts: CallOptions) -> tuple[tuple[str, str], ...]:
    # Without a token of its own, the call forwards the incoming caller's (the client interceptor).
    if not opts.identity_token:
        return ((REQUEST_ID_HEADER, opts.request_id),)
    return ((IDENTITY_HEADER, opts.identity_token), (REQUEST_ID_HEADER, opts.request_id))


async def _rpc(call: Awaitable[T]) -> T:
    try:
        return await call
    except grpc.aio.AioRpcError as exc:
        raise from_rpc_error(exc) from None


class GrpcContext:
    def __init__(self, clients: ServiceClients) -> None:
        self.clients = clients

    async def create_session(self, spec: SessionSpec, opts: CallOptions) -> SessionInfo:
        request = context_pb2.CreateSessionRequest(
            session_id=spec.session_id,
            agent_id=spec.agent_id,
            goal=spec.goal,
            sub_goals=list(spec.sub_goals),
            system_prompt=spec.system_prompt,
            budget=context_pb2.BudgetSettings(max_context_tokens=spec.max_context_tokens),
        )
        try:
            reply = await _rpc(
                self.clients.context().CreateSession(request, metadata=_metadata(opts), timeout=opts.timeout_s)
            )
        except AgentmeshError as err:
            # A resumed task: the session exists already.
            if err.code in (ErrorCode.FAILED_PRECONDITION, ErrorCode.IDEMPOTENCY_CONFLICT):
                return await self.get_session(spec.session_id, opts)
            raise
        return session_info(reply.session)

    async def get_session(self, session_id: str, opts: CallOptions) -> SessionInfo:
        reply = await _rpc(
            self.clients.context().GetSession(
                context_pb2.GetSessionRequest(session_id=session_id), metadata=_metadata(opts), timeout=opts.timeout_s
            )
        )
        return session_info(reply.session)

    async def append_message(
        self,
        session_id: str,
        role: str,
        content: str,
        tool_calls: Sequence[ToolCall],
        opts: CallOptions,
        *,
        client_message_id: str = "",
    ) -> Appended:
        request = context_pb2.AppendMessageRequest(
            session_id=session_id,
            message=message_pb(role, content, list(tool_calls)),
            client_message_id=client_message_id,
        )
        reply = await _rpc(
            self.clients.context().AppendMessage(request, metadata=_metadata(opts), timeout=opts.timeout_s)
        )
        return Appended(index=reply.index, token_count=reply.token_count, already=reply.already_appended)

    async def append_tool_result(self, session_id: str, outcome: ToolOutcome, opts: CallOptions) -> Appended:
        request = context_pb2.AppendToolResultRequest(session_id=session_id, result=tool_result_pb(outcome))
        reply = await _rpc(
            self.clients.context().AppendToolResult(request, metadata=_metadata(opts), timeout=opts.timeout_s)
        )
        return Appended(index=reply.index, token_count=reply.token_count, already=reply.already_appended)

    async def build_context(self, session_id: str, budget_tokens: int, opts: CallOptions) -> ContextView:
        request = context_pb2.BuildContextRequest(session_id=session_id)
        if budget_tokens > 0:  # 0: the session's own max_context_tokens
            request.budget_tokens = budget_tokens
        reply = await _rpc(
            self.clients.context().BuildContext(request, metadata=_metadata(opts), timeout=opts.timeout_s)
        )
        return context_view(reply.view)

    async def attach_task(
        self,
        session_id: str,
        task_id: str,
        agent_id: str,
        opts: CallOptions,
        *,
        expected_task_id: str = "",
        expected_generation: int = 0,
    ) -> Attachment:
        request = context_pb2.AttachTaskRequest(
            session_id=session_id,
            task_id=task_id,
            agent_id=agent_id,
            expected_task_id=expected_task_id,
            expected_generation=expected_generation,
        )
        reply = await _rpc(self.clients.context().AttachTask(request, metadata=_metadata(opts), timeout=opts.timeout_s))
        return Attachment(
            attached=reply.attached,
            newest_task_id=reply.newest_task_id,
            generation=reply.generation,
            newest_age_s=codec.duration_seconds(reply.newest_age, "newest_age"),
        )


class GrpcTools:
    def __init__(self, clients: ServiceClients) -> None:
        self.clients = clients

    async def discover(self, goal: str, k: int, opts: CallOptions) -> list[ToolInfo]:
        request = tool_pb2.DiscoverToolsRequest(goal=goal, k=k, permitted_only=True)
        reply = await _rpc(self.clients.tool().DiscoverTools(request, metadata=_metadata(opts), timeout=opts.timeout_s))
        return [tool_info(scored.tool) for scored in reply.tools]

    async def list_tools(self, opts: CallOptions) -> list[ToolInfo]:
        reply = await _rpc(
            self.clients.tool().ListTools(tool_pb2.ListToolsRequest(), metadata=_metadata(opts), timeout=opts.timeout_s)
        )
        return [tool_info(spec) for spec in reply.tools]

    async def execute(
        self, call: ToolCall, *, session_id: str, idempotency_key: str, goal: str, opts: CallOptions
    ) -> ToolOutcome:
        request = tool_pb2.ExecuteToolRequest(
            call=codec.tool_call_to_pb(call), session_id=session_id, idempotency_key=idempotency_key, goal=goal
        )
        reply = await _rpc(self.clients.tool().ExecuteTool(request, metadata=_metadata(opts), timeout=opts.timeout_s))
        return tool_result(reply.result)

    async def resolve_approval(
        self,
        approval_id: str,
        approve: bool,
        reason: str,
        arguments_sha256: str,
        timeout_s: float,
        settlement: str = "",
    ) -> tuple[ApprovalRecord, ToolOutcome | None]:
        request = tool_pb2.ResolveApprovalRequest(
            approval_id=approval_id,
            approve=approve,
            reason=reason,
            arguments_sha256=arguments_sha256,
            settlement=SETTLEMENT_PB.get(settlement, common_pb2.SETTLEMENT_OUTCOME_UNSPECIFIED),
        )
        reply = await _rpc(self.clients.tool().ResolveApproval(request, timeout=timeout_s))
        outcome = tool_result(reply.result) if reply.HasField("result") else None
        return approval(reply.approval), outcome

    async def get_approval(self, approval_id: str, timeout_s: float, opts: CallOptions | None = None) -> ApprovalRecord:
        request = tool_pb2.GetApprovalRequest(approval_id=approval_id)
        metadata = _metadata(opts) if opts is not None else None
        reply = await _rpc(self.clients.tool().GetApproval(request, timeout=timeout_s, metadata=metadata))
        return approval(reply.approval)


class GrpcProvider:
    def __init__(self, clients: ServiceClients) -> None:
        self.clients = clients

    async def generate(
        self,
        *,
        model: str,
        task_tag: str,
        messages: Sequence[object],
        tools: Sequence[ToolInfo],
        temperature: float | None,
        max_tokens: int,
        agent_id: str,
        opts: CallOptions,
        include_request: bool = False,
        response_schema: str = "",
    ) -> ModelReply:
        sampling = provider_pb2.SamplingParams(max_tokens=max_tokens)
        if temperature is not None:
            sampling.temperature = temperature
        specs = [t.spec for t in tools if isinstance(t.spec, common_pb2.ToolSpec)]
        request = provider_pb2.GenerateRequest(
            model=model,
            task_tag=task_tag,
            messages=[m for m in messages if isinstance(m, common_pb2.Message)],
            tools=specs,
            sampling=sampling,
            agent_id=agent_id,
            include_request=include_request,
            response_schema_json=response_schema,
        )
        reply = await _rpc(self.clients.provider().Generate(request, metadata=_metadata(opts), timeout=opts.timeout_s))
        return model_reply(reply)


def grpc_ports(clients: ServiceClients) -> Ports:
    return Ports(context=GrpcContext(clients), tools=GrpcTools(clients), provider=GrpcProvider(clients))
