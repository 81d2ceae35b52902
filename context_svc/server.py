"""context_svc's gRPC surface: maps protobuf to the context domain (engine.py) and back.

The only module of context_svc that touches grpc or protobuf: it turns requests into domain calls
and domain results into responses; the AgentmeshErrors it raises become rich statuses at the RPC
edge (docs/design.md §11). It also implements the summarizer's `SummaryModel` over gRPC to
provider_svc (an outgoing mapping of the same kind).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import grpc.aio
from opentelemetry import trace

from agentmesh.callctx import remaining_time
from agentmesh.chat import DEFAULT_MAX_JSON_DEPTH, Role, json_depth_exceeds
from agentmesh.config import ConfigError
from agentmesh.errors import InvalidRequestError
from agentmesh.rpc import codec
from agentmesh.rpc.channels import ServiceClients
from agentmesh.rpc.host import ServiceHost, ServiceSpec
from agentmesh.rpc.status import checked_from_detail, from_rpc_error, to_detail
from agentmesh.v1 import common_pb2, context_pb2, context_pb2_grpc, provider_pb2
from context_svc.appends import validate_client_message_id
from context_svc.engine import BudgetRequest, ContextEngine
from context_svc.handoff_model import Brief, Citation, Demotion, FactKind, Hop
from context_svc.handoff_model import Fact as HandoffFact
from context_svc.model import (
    BlockKind,
    ContextView,
    Message,
    PendingInfo,
    Session,
    Summary,
    ToolOutcome,
)
from context_svc.server_memory import MemoryRpcs, caller
from context_svc.tokens import UnknownEncodingError

__all__ = ["SERVICE_NAME", "SPEC", "ContextServicer", "ProviderSummaryModel"]

log = logging.getLogger("context_svc")

SERVICE_NAME = context_pb2.DESCRIPTOR.services_by_name["ContextService"].full_name

_BLOCK_TO_PB = {
    BlockKind.SYSTEM: context_pb2.CONTEXT_BLOCK_KIND_SYSTEM,
    BlockKind.SUMMARY: context_pb2.CONTEXT_BLOCK_KIND_SUMMARY,
    BlockKind.RECENT: context_pb2.CONTEXT_BLOCK_KIND_RECENT,
    BlockKind.OBSERVATIONS: context_pb2.CONTEXT_BLOCK_KIND_OBSERVATIONS,
}


def message_domain(message: common_pb2.Message, *, max_json_depth: int = DEFAULT_MAX_JSON_DEPTH) -> Message:
    """The domain message of an AppendMessage; InvalidRequestError naming the bad field.

    Tool-call arguments stay the model's raw text (not JSON is fine: the tool answers that in-band),
    but text nesting deeper than `max_json_depth` (`server.max_json_depth`) is refused before the
    fact extraction parses it."""
    for i, call in enumerate(message.tool_calls):
        if json_depth_exceeds(call.arguments_json, max_json_depth):
            raise InvalidRequestError(
                f"message.tool_calls[{i}].arguments_json",
                f"nests arrays/objects deeper than {max_json_depth} levels (server.max_json_depth)",
            )
    return Message(
        role=codec.role_from_pb(message.role, "message.role"),
        content=message.content,
        tool_calls=tuple(codec.tool_call_from_pb(c) for c in message.tool_calls),
        tool_call_id=message.tool_call_id,
        name=message.name,
        create_time=codec.seconds(message.create_time, "message.create_time")
        if message.HasField("create_time")
        else 0.0,
    )


def message_pb(message: Message) -> common_pb2.Message:
    return common_pb2.Message(
        role=codec.role_to_pb(message.role),
        content=message.content,
        tool_calls=[codec.tool_call_to_pb(c) for c in message.tool_calls],
        tool_call_id=message.tool_call_id,
        name=message.name,
        token_count=message.token_count,
        create_time=codec.timestamp(message.create_time),
        tool_error=to_detail(message.error) if message.error is not None else None,
        correction=codec.correction_to_pb(message.correction) if message.correction is not None else None,
    )


def session_pb(session: Session) -> context_pb2.Session:
    b = session.budget
    return context_pb2.Session(
        session_id=session.session_id,
        agent_id=session.agent_id,
        goal=session.goal,
        sub_goals=list(session.sub_goals),
        system_prompt=session.system_prompt,
        budget=context_pb2.BudgetSettings(
            max_context_tokens=b.max_context_tokens,
            reserve_system_prompt_tokens=b.reserve_system_prompt_tokens,
            summary_trigger_tokens=b.summary_trigger_tokens,
            keep_recent_messages=b.keep_recent_messages,
            encoding=b.encoding,
        ),
        message_count=session.message_count,
        total_tokens=session.total_tokens,
        summary_count=session.summary_count,
        create_time=codec.timestamp(session.create_time),
        newest_task_id=session.newest_task_id or session.session_id,
    )


def summary_pb(summary: Summary) -> context_pb2.Summary:
    return context_pb2.Summary(
        user_intent=summary.user_intent,
        key_data=list(summary.key_data),
        open_questions=list(summary.open_questions),
        actions_taken=list(summary.actions_taken),
        first_index=summary.first_index,
        last_index=summary.last_index,
        summarizer=summary.summarizer,
        token_count=summary.token_count,
    )


class _MessageCache:
    """Protobuf forms of log messages (immutable, and most of a view is the same window again)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._data: OrderedDict[Message, common_pb2.Message] = OrderedDict()

    def pb(self, message: Message) -> common_pb2.Message:
        if message.index < 0:  # assembled for this view (system block, summary)
            return message_pb(message)
        found = self._data.get(message)
        if found is None:
            found = self._data[message] = message_pb(message)
            if len(self._data) > self.size:
                self._data.popitem(last=False)
        else:
            self._data.move_to_end(message)
        return found


def view_pb(view: ContextView, messages: _MessageCache) -> context_pb2.ContextView:
    return context_pb2.ContextView(
        messages=[messages.pb(m) for m in view.messages],
        blocks=[
            context_pb2.ContextBlock(
                kind=_BLOCK_TO_PB[b.kind],
                tokens=b.tokens,
                budget_tokens=b.budget_tokens,
                message_count=b.message_count,
                text=b.text,
            )
            for b in view.blocks
        ],
        total_tokens=view.total_tokens,
        budget_tokens=view.budget_tokens,
        summarized_messages=view.summarized_messages,
        dropped_messages=view.dropped_messages,
        compacted=view.compacted,
        debug_text=view.debug_text,
    )


def tool_outcome_domain(result: common_pb2.ToolResult) -> ToolOutcome:
    kind = result.WhichOneof("outcome")
    base: dict[str, Any] = {"tool_call_id": result.tool_call_id, "tool_name": result.tool_name}
    if kind == "output":
        output = result.output
        structured = {
            common_pb2.RESULT_TYPE_STRUCTURED: True,
            common_pb2.RESULT_TYPE_TEXT: False,
        }.get(output.result_type)
        content = output.WhichOneof("content")
        if content == "ref":
            return ToolOutcome(
                **base,
                ref=codec.payload_ref_from_pb(output.ref, "result.output.ref"),
                digest=output.digest,
                structured=structured,
                redacted=output.redacted,
            )
        return ToolOutcome(**base, inline=output.inline, structured=structured, redacted=output.redacted)
    if kind == "error":
        return ToolOutcome(
            **base,
            error=checked_from_detail(result.error, "result.error"),
            correction=codec.correction_from_pb(result.correction, "result.correction"),
        )
    if kind == "pending_approval":
        pending = result.pending_approval
        return ToolOutcome(
            **base,
            pending=PendingInfo(
                approval_id=pending.approval_id,
                impact=pending.impact,
                expire_at=codec.seconds(pending.expire_time, "result.pending_approval.expire_time")
                if pending.HasField("expire_time")
                else 0.0,
            ),
        )
    raise InvalidRequestError("result.outcome", "one of output, error or pending_approval is required")


def tool_outcome_pb(outcome: ToolOutcome) -> common_pb2.ToolResult:
    """A result read back from the log (GetToolResult) as a ToolResult."""
    pb = common_pb2.ToolResult(tool_call_id=outcome.tool_call_id, tool_name=outcome.tool_name)
    if outcome.error is not None:
        pb.error.CopyFrom(to_detail(outcome.error))
        if outcome.correction is not None:
            pb.correction.CopyFrom(codec.correction_to_pb(outcome.correction))
    elif outcome.pending is not None:
        pending = outcome.pending
        pb.pending_approval.approval_id = pending.approval_id
        pb.pending_approval.impact = pending.impact
        if pending.expire_at:
            pb.pending_approval.expire_time.CopyFrom(codec.timestamp(pending.expire_at))
    else:
        result_type = {True: common_pb2.RESULT_TYPE_STRUCTURED, False: common_pb2.RESULT_TYPE_TEXT}
        pb.output.result_type = result_type.get(outcome.structured, common_pb2.RESULT_TYPE_UNSPECIFIED)  # type: ignore[arg-type]
        pb.output.redacted = outcome.redacted
        if outcome.ref is not None:
            pb.output.ref.CopyFrom(codec.payload_ref_to_pb(outcome.ref))
            pb.output.digest = outcome.digest
        else:
            pb.output.inline = outcome.inline or ""
    return pb


def _range(message: context_pb2.LineRange | context_pb2.ByteRange) -> tuple[int, int]:
    return int(message.start), int(message.end)


_DEMOTION_TO_PB = {
    Demotion.CITATION_NOT_FOUND: context_pb2.HANDOFF_DEMOTION_REASON_CITATION_NOT_FOUND,
    Demotion.VALUE_NOT_IN_SOURCE: context_pb2.HANDOFF_DEMOTION_REASON_VALUE_NOT_IN_SOURCE,
    Demotion.NO_ACCESS: context_pb2.HANDOFF_DEMOTION_REASON_NO_ACCESS,
    Demotion.MALFORMED: context_pb2.HANDOFF_DEMOTION_REASON_MALFORMED,
}
_FACT_KIND_TO_PB = {
    FactKind.CONFIRMED: context_pb2.HANDOFF_FACT_KIND_CONFIRMED,
    FactKind.INFERRED: context_pb2.HANDOFF_FACT_KIND_INFERRED,
}


def citation_domain(citation: context_pb2.HandoffCitation) -> Citation:
    source, selector = citation.WhichOneof("source"), citation.WhichOneof("selector")
    return Citation(
        ref_id=citation.ref_id if source == "ref_id" else None,
        message_index=int(citation.message_index) if source == "message_index" else None,
        json_path=citation.json_path if selector == "json_path" else None,
        line_range=_range(citation.line_range) if selector == "line_range" else None,
    )


def brief_domain(brief: context_pb2.HandoffBrief) -> Brief:
    facts = []
    for fact in brief.facts:
        support = fact.WhichOneof("support")
        facts.append(
            HandoffFact(
                statement=fact.statement,
                value=fact.value,
                citation=citation_domain(fact.citation) if support == "citation" else None,
                basis=fact.basis if support == "basis" else None,
            )
        )
    return Brief(
        summary=brief.summary,
        facts=tuple(facts),
        open_questions=tuple(brief.open_questions),
        risks=tuple(brief.risks),
        artifacts=tuple(brief.artifacts),
    )


def hop_pb(hop: Hop, request: context_pb2.BuildHandoffRequest) -> context_pb2.BuildHandoffResponse:
    return context_pb2.BuildHandoffResponse(
        text=hop.text,
        token_count=hop.token_count,
        facts=[
            context_pb2.CheckedHandoffFact(
                fact=given,
                kind=_FACT_KIND_TO_PB[checked.kind],
                demotion_reason=_DEMOTION_TO_PB[checked.reason] if checked.reason is not None else None,
                detail=checked.detail,
                shown=checked.shown,
            )
            for given, checked in zip(request.brief.facts, hop.facts, strict=True)
        ],
        confirmed_count=hop.confirmed,
        inferred_count=hop.inferred,
        demoted_count=hop.demoted,
        record_ref_id=hop.record_ref_id,
        user_constraints=list(hop.user_constraints),
        granted_ref_ids=list(hop.granted_ref_ids),
        missing_artifacts=list(hop.missing_artifacts),
        omitted_count=hop.omitted,
        summary_clipped=hop.summary_clipped,
    )


def _build_budget(
    request: context_pb2.AppendMessageRequest | context_pb2.AppendToolResultRequest | context_pb2.CreateSessionRequest,
) -> int | None:
    """An append's `build_budget_tokens` (None: no view asked for), checked before anything is appended."""
    if not request.HasField("build_budget_tokens"):
        return None
    if request.build_budget_tokens < 0:
        got = request.build_budget_tokens
        raise InvalidRequestError("build_budget_tokens", f"must be >= 0 (0: the session's budget), got {got}")
    return request.build_budget_tokens


class ContextServicer(MemoryRpcs, context_pb2_grpc.ContextServiceServicer):
    """The ContextService servicer: one domain call per RPC (the memory RPCs in server_memory.py)."""

    engine: ContextEngine

    def __init__(
        self,
        engine: ContextEngine,
        *,
        max_json_depth: int = DEFAULT_MAX_JSON_DEPTH,
        message_cache_entries: int = 50_000,
    ) -> None:
        self.engine = engine
        self.max_json_depth = max_json_depth
        # Bounded (context.message_cache_entries): one per servicer, never a process-wide global.
        self.messages = _MessageCache(message_cache_entries)

    async def CreateSession(
        self, request: context_pb2.CreateSessionRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> context_pb2.CreateSessionResponse:
        budget = None
        if request.HasField("budget"):
            b = request.budget
            budget = BudgetRequest(
                max_context_tokens=b.max_context_tokens,
                reserve_system_prompt_tokens=b.reserve_system_prompt_tokens,
                summary_trigger_tokens=b.summary_trigger_tokens,
                keep_recent_messages=b.keep_recent_messages,
                encoding=b.encoding,
            )
        build = _build_budget(request)
        if request.goal_message_id:
            validate_client_message_id(request.goal_message_id, "goal_message_id")  # before anything is written
        elif build is not None:
            raise InvalidRequestError(
                "build_budget_tokens", "needs goal_message_id: the view follows the goal's append"
            )
        session, _ = await self.engine.create_session(
            caller(),
            session_id=request.session_id,
            agent_id=request.agent_id,
            goal=request.goal,
            sub_goals=list(request.sub_goals),
            system_prompt=request.system_prompt,
            budget=budget,
        )
        response = context_pb2.CreateSessionResponse(session=session_pb(session))
        if request.goal_message_id:
            # The dispatcher's first append, in this call (issue 45): one round trip fewer per task.
            appended = await self.engine.append_message_once(
                caller(),
                session.session_id,
                Message(role=Role.USER, content=request.goal),
                client_message_id=request.goal_message_id,
            )
            goal = response.goal_message
            goal.index, goal.token_count, goal.already_appended = appended.index, appended.token_count, appended.already
            if build is not None:
                goal.view.CopyFrom(await self._view_after(session.session_id, build))
        return response

    async def GetSession(
        self, request: context_pb2.GetSessionRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> context_pb2.GetSessionResponse:
        session, entities = await self.engine.get_session(caller(), request.session_id)
        return context_pb2.GetSessionResponse(session=session_pb(session), entities=entities)

    async def AppendMessage(
        self, request: context_pb2.AppendMessageRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> context_pb2.AppendMessageResponse:
        if not request.HasField("message"):
            raise InvalidRequestError("message", "required")
        message = message_domain(request.message, max_json_depth=self.max_json_depth)
        build = _build_budget(request)
        appended = await self.engine.append_message_once(
            caller(), request.session_id, message, client_message_id=request.client_message_id
        )
        response = context_pb2.AppendMessageResponse(
            index=appended.index, token_count=appended.token_count, already_appended=appended.already
        )
        if build is not None:
            response.view.CopyFrom(await self._view_after(request.session_id, build))
        return response

    async def AppendToolResult(
        self, request: context_pb2.AppendToolResultRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> context_pb2.AppendToolResultResponse:
        if not request.HasField("result"):
            raise InvalidRequestError("result", "required")
        build = _build_budget(request)
        appended = await self.engine.append_tool_result_once(
            caller(), request.session_id, tool_outcome_domain(request.result)
        )
        response = context_pb2.AppendToolResultResponse(
            index=appended.index, token_count=appended.token_count, already_appended=appended.already
        )
        if appended.ref is not None:
            response.ref.CopyFrom(codec.payload_ref_to_pb(appended.ref))
        if build is not None:
            response.view.CopyFrom(await self._view_after(request.session_id, build))
        return response

    async def _view_after(self, session_id: str, budget_tokens: int) -> context_pb2.ContextView:
        """The view an append's `build_budget_tokens` asked for (0: the session's budget): BuildContext's,
        built after the append, so the caller's next step needs no BuildContext call of its own (issue 45)."""
        view = await self.engine.build_context(caller(), session_id, budget_tokens=budget_tokens or None)
        return view_pb(view, self.messages)

    async def GetToolResult(
        self, request: context_pb2.GetToolResultRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> context_pb2.GetToolResultResponse:
        outcome, existing = await self.engine.tool_result(caller(), request.session_id, request.tool_call_id)
        return context_pb2.GetToolResultResponse(
            result=tool_outcome_pb(outcome), index=existing.index, token_count=existing.message.token_count
        )

    async def BuildContext(
        self, request: context_pb2.BuildContextRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> context_pb2.BuildContextResponse:
        view = await self.engine.build_context(
            caller(),
            request.session_id,
            budget_tokens=request.budget_tokens if request.HasField("budget_tokens") else None,
            debug=request.debug,
        )
        return context_pb2.BuildContextResponse(view=view_pb(view, self.messages))

    async def GetPayload(
        self, request: context_pb2.GetPayloadRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> context_pb2.GetPayloadResponse:
        selector = request.WhichOneof("selector")
        ref, content, partial = await self.engine.get_payload(
            caller(),
            request.session_id,
            request.ref_id,
            json_path=request.json_path if selector == "json_path" else None,
            line_range=_range(request.line_range) if selector == "line_range" else None,
            byte_range=_range(request.byte_range) if selector == "byte_range" else None,
        )
        return context_pb2.GetPayloadResponse(ref=codec.payload_ref_to_pb(ref), content=content, partial=partial)

    async def Compact(
        self, request: context_pb2.CompactRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> context_pb2.CompactResponse:
        count, summary = await self.engine.compact(caller(), request.session_id)
        response = context_pb2.CompactResponse(summarized_messages=count)
        if summary is not None:
            response.summary.CopyFrom(summary_pb(summary))
        return response

    async def AttachTask(
        self, request: context_pb2.AttachTaskRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> context_pb2.AttachTaskResponse:
        attached = await self.engine.attach_task(
            caller(),
            request.session_id,
            request.task_id,
            request.agent_id,
            expected_task_id=request.expected_task_id,
            expected_generation=request.expected_generation,
        )
        return context_pb2.AttachTaskResponse(
            attached=attached.attached,
            newest_task_id=attached.newest_task_id,
            generation=attached.generation,
            newest_age=codec.duration(attached.newest_age_s),
        )

    async def BuildHandoff(
        self, request: context_pb2.BuildHandoffRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> context_pb2.BuildHandoffResponse:
        if not request.HasField("brief"):
            raise InvalidRequestError("brief", "required")
        hop = await self.engine.handoffs.build(
            caller(),
            request.session_id,
            brief_domain(request.brief),
            child_session_id=request.child_session_id,
            max_tokens=request.max_tokens if request.HasField("max_tokens") else None,
        )
        # The check's outcome on the RPC's span: a trace shows what each hop confirmed and demoted.
        trace.get_current_span().set_attributes(
            {
                "agentmesh.handoff.confirmed": hop.confirmed,
                "agentmesh.handoff.inferred": hop.inferred,
                "agentmesh.handoff.demoted": hop.demoted,
                "agentmesh.handoff.tokens": hop.token_count,
                "agentmesh.handoff.omitted": hop.omitted,
            }
        )
        return hop_pb(hop, request)

    async def DeleteSession(
        self, request: context_pb2.DeleteSessionRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> context_pb2.DeleteSessionResponse:
        deleted = await self.engine.delete_session(caller(), request.session_id)
        return context_pb2.DeleteSessionResponse(deleted=deleted)


class ProviderSummaryModel:
    """The LLM summarizer's model: Generate on provider_svc (the caller's identity is forwarded)."""

    def __init__(self, clients: ServiceClients) -> None:
        self.clients = clients

    async def complete(self, *, model: str, system: str, user: str, agent_id: str, timeout_s: float) -> str:
        request = provider_pb2.GenerateRequest(
            model=model,
            task_tag="summarize",
            messages=[
                common_pb2.Message(role=codec.role_to_pb(Role.SYSTEM), content=system),
                common_pb2.Message(role=codec.role_to_pb(Role.USER), content=user),
            ],
            sampling=provider_pb2.SamplingParams(temperature=0.0),
            agent_id=agent_id,
        )
        remaining = remaining_time()
        if remaining is not None:
            # Leave the caller half of its time: a slow model must not make BuildContext itself late
            # (on a timeout the extractive summary is used and the build still answers).
            timeout_s = max(0.05, min(timeout_s, remaining / 2))
        try:
            response = await self.clients.provider().Generate(request, timeout=timeout_s)
        except grpc.aio.AioRpcError as exc:
            raise from_rpc_error(exc) from exc
        content: str = response.message.content
        return content


async def setup(host: ServiceHost) -> Callable[[], Awaitable[None]] | None:
    """Registers ContextService on the host; an unusable `context:` configuration stops start-up."""
    if host.store is None:
        raise ConfigError("context_svc needs a Redis store")
    clients = ServiceClients(host.settings, telemetry=host.telemetry)
    try:
        engine = ContextEngine(host.settings.context, host.store, summary_model=ProviderSummaryModel(clients))
    except UnknownEncodingError as exc:
        await clients.close()
        raise ConfigError(f"context.encoding: {exc}") from exc
    servicer = ContextServicer(
        engine,
        max_json_depth=host.settings.server.max_json_depth,
        message_cache_entries=host.settings.context.message_cache_entries,
    )
    host.add_servicer(SERVICE_NAME, context_pb2_grpc.add_ContextServiceServicer_to_server, servicer)

    async def cleanup() -> None:
        await clients.close()

    return cleanup


SPEC = ServiceSpec(name="context", setup=setup)
