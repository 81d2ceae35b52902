"""The loop's ports over gRPC: `agentmesh.rpc.channels.ServiceClients` stubs (their protobuf mappings are codec.py).

Every downstream call carries the task's identity token and request id explicitly (the worker
runs outside any incoming call) and a timeout; a failed RPC becomes the AgentmeshError its rich
status carries. ResolveApproval/GetApproval carry no explicit identity: the client interceptor
forwards the incoming caller's (the operator's) verified token, so tool_svc sees who approves.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, TypeVar

import grpc
import grpc.aio
from google.protobuf import json_format

from agentmesh.callctx import IDENTITY_HEADER, REQUEST_ID_HEADER
from agentmesh.chat import ToolCall
from agentmesh.errors import AgentmeshError, ErrorCode
from agentmesh.rpc import codec
from agentmesh.rpc.channels import ServiceClients
from agentmesh.rpc.status import from_rpc_error
from agentmesh.v1 import common_pb2, context_pb2, provider_pb2, tool_pb2
from dispatcher_svc.codec import (
    SETTLEMENT_PB,
    approval,
    context_view,
    message_pb,
    model_reply,
    session_info,
    tool_info,
    tool_result,
    tool_result_pb,
)
from dispatcher_svc.model import (
    ApprovalRecord,
    ModelReply,
    ToolOutcome,
)
from dispatcher_svc.ports import (
    Appended,
    Attachment,
    CallOptions,
    ContextView,
    HopSummary,
    Ports,
    SessionInfo,
    SessionSpec,
    StoredResult,
    ToolInfo,
)
from dispatcher_svc.routing import ModelState

T = TypeVar("T")


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


def _appended(reply: context_pb2.AppendMessageResponse | context_pb2.AppendToolResultResponse) -> Appended:
    # No view: none was asked for, or a context_svc of an earlier release ignored the request for one.
    view = context_view(reply.view) if reply.HasField("view") else None
    following: tuple[Appended, ...] = ()
    if isinstance(reply, context_pb2.AppendMessageResponse):
        following = tuple(_appended(result) for result in reply.results)
    return Appended(
        index=reply.index, token_count=reply.token_count, already=reply.already_appended, view=view, following=following
    )


class GrpcContext:
    def __init__(self, clients: ServiceClients) -> None:
        self.clients = clients

    async def create_session(
        self, spec: SessionSpec, opts: CallOptions, *, goal_message_id: str = "", build_tokens: int | None = None
    ) -> SessionInfo:
        request = context_pb2.CreateSessionRequest(
            session_id=spec.session_id,
            agent_id=spec.agent_id,
            goal=spec.goal,
            sub_goals=list(spec.sub_goals),
            system_prompt=spec.system_prompt,
            budget=context_pb2.BudgetSettings(max_context_tokens=spec.max_context_tokens),
            goal_message_id=goal_message_id,
            build_budget_tokens=build_tokens if goal_message_id else None,
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
        info = session_info(reply.session)
        # No goal_message: a context_svc of an earlier release, which ignores goal_message_id.
        if goal_message_id and reply.HasField("goal_message"):
            info = SessionInfo(info.message_count, info.total_tokens, goal=_appended(reply.goal_message))
        return info

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
        build_tokens: int | None = None,
        following: Sequence[ToolOutcome] = (),
    ) -> Appended:
        request = context_pb2.AppendMessageRequest(
            session_id=session_id,
            message=message_pb(role, content, list(tool_calls)),
            client_message_id=client_message_id,
            build_budget_tokens=build_tokens,
            following_results=[tool_result_pb(outcome) for outcome in following],
        )
        reply = await _rpc(
            self.clients.context().AppendMessage(request, metadata=_metadata(opts), timeout=opts.timeout_s)
        )
        return _appended(reply)

    async def append_tool_result(
        self, session_id: str, outcome: ToolOutcome, opts: CallOptions, *, build_tokens: int | None = None
    ) -> Appended:
        request = context_pb2.AppendToolResultRequest(
            session_id=session_id, result=tool_result_pb(outcome), build_budget_tokens=build_tokens
        )
        reply = await _rpc(
            self.clients.context().AppendToolResult(request, metadata=_metadata(opts), timeout=opts.timeout_s)
        )
        return _appended(reply)

    async def tool_result(self, session_id: str, tool_call_id: str, opts: CallOptions) -> StoredResult | None:
        request = context_pb2.GetToolResultRequest(session_id=session_id, tool_call_id=tool_call_id)
        try:
            reply = await _rpc(
                self.clients.context().GetToolResult(request, metadata=_metadata(opts), timeout=opts.timeout_s)
            )
        except AgentmeshError as err:
            # NOT_FOUND: nothing appended for the call. UNIMPLEMENTED: a context_svc of an earlier
            # release (a rolling upgrade), which cannot say; the call is then sent again, as before.
            if err.code == ErrorCode.NOT_FOUND or err.metadata.get("grpc_status") == "UNIMPLEMENTED":
                return None
            raise
        return StoredResult(tool_result(reply.result), index=reply.index, token_count=reply.token_count)

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

    async def build_handoff(
        self, session_id: str, child_session_id: str, brief: Mapping[str, Any], opts: CallOptions
    ) -> HopSummary:
        request = context_pb2.BuildHandoffRequest(session_id=session_id, child_session_id=child_session_id)
        json_format.ParseDict(dict(brief), request.brief)
        reply = await _rpc(
            self.clients.context().BuildHandoff(request, metadata=_metadata(opts), timeout=opts.timeout_s)
        )
        return HopSummary(
            text=reply.text,
            token_count=reply.token_count,
            confirmed=reply.confirmed_count,
            inferred=reply.inferred_count,
            demoted=reply.demoted_count,
            record_ref_id=reply.record_ref_id,
            granted=len(reply.granted_ref_ids),
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
        specs = [
            t.spec
            if isinstance(t.spec, common_pb2.ToolSpec)
            # A tool of the dispatcher's own (a handoff): no registry spec, its schema is ours.
            else common_pb2.ToolSpec(name=t.name, description=t.description, input_schema_json=t.input_schema_json)
            for t in tools
            if isinstance(t.spec, common_pb2.ToolSpec) or t.input_schema_json
        ]
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


_LIST_MODELS_TIMEOUT_S = 2.0
"""Capability routing waits this long for ListModels at most (then routes without the model check)."""


class GrpcModels:
    """provider_svc's ListModels for capability routing (routing.ModelCatalog)."""

    def __init__(self, clients: ServiceClients) -> None:
        self.clients = clients

    async def models(self, identity_token: str) -> ModelState:
        metadata = ((IDENTITY_HEADER, identity_token),) if identity_token else ()
        reply = await _rpc(
            self.clients.provider().ListModels(
                provider_pb2.ListModelsRequest(), metadata=metadata, timeout=_LIST_MODELS_TIMEOUT_S
            )
        )
        available: set[str] = set()
        unavailable: dict[str, str] = {}
        for model in reply.models:
            for name in (model.name, *model.aliases):
                if model.unavailable:
                    unavailable[name] = model.unavailable_reason or "unavailable"
                else:
                    available.add(name)
        return ModelState(available=frozenset(available), unavailable=unavailable, routes=dict(reply.routes))


def grpc_ports(clients: ServiceClients) -> Ports:
    return Ports(
        context=GrpcContext(clients),
        tools=GrpcTools(clients),
        provider=GrpcProvider(clients),
        models=GrpcModels(clients),
    )
