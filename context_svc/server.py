"""context_svc's gRPC surface: maps protobuf to the context domain (engine.py) and back.

The only module of context_svc that touches grpc or protobuf: it turns requests into domain calls,
domain results into responses, and AgentmeshErrors into rich statuses. It also implements the
summarizer's `SummaryModel` over gRPC to provider_svc (an outgoing mapping of the same kind).
"""

from __future__ import annotations

import functools
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import grpc
import grpc.aio
from google.protobuf import timestamp_pb2
from google.protobuf.message import DecodeError

from agentmesh.auth import require_identity
from agentmesh.callctx import remaining_time
from agentmesh.client import ServiceClients
from agentmesh.config import ConfigError
from agentmesh.errors import AgentmeshError, ErrorCode, InvalidRequestError, model_text
from agentmesh.payloads import StoredPayload
from agentmesh.rpcstatus import abort, from_detail, from_rpc_error
from agentmesh.server import ServiceHost, ServiceSpec
from agentmesh.v1 import common_pb2, context_pb2, context_pb2_grpc, provider_pb2, tool_pb2
from context_svc.engine import BudgetRequest, ContextEngine
from context_svc.model import (
    BlockKind,
    Caller,
    ContextView,
    Message,
    PendingInfo,
    Role,
    Session,
    Summary,
    ToolCallRecord,
    ToolOutcome,
)
from context_svc.tokens import UnknownEncodingError

__all__ = ["SERVICE_NAME", "SPEC", "ContextServicer", "ProviderSummaryModel"]

log = logging.getLogger("context_svc")

SERVICE_NAME = context_pb2.DESCRIPTOR.services_by_name["ContextService"].full_name

_ROLE_TO_DOMAIN = {
    common_pb2.ROLE_SYSTEM: Role.SYSTEM,
    common_pb2.ROLE_USER: Role.USER,
    common_pb2.ROLE_ASSISTANT: Role.ASSISTANT,
    common_pb2.ROLE_TOOL: Role.TOOL,
}
_ROLE_TO_PB = {role: pb for pb, role in _ROLE_TO_DOMAIN.items()}
_BLOCK_TO_PB = {
    BlockKind.SYSTEM: context_pb2.CONTEXT_BLOCK_KIND_SYSTEM,
    BlockKind.SUMMARY: context_pb2.CONTEXT_BLOCK_KIND_SUMMARY,
    BlockKind.RECENT: context_pb2.CONTEXT_BLOCK_KIND_RECENT,
    BlockKind.OBSERVATIONS: context_pb2.CONTEXT_BLOCK_KIND_OBSERVATIONS,
}

Req = TypeVar("Req")
Resp = TypeVar("Resp")
Handler = Callable[[Any, Req, grpc.aio.ServicerContext[Any, Any]], Coroutine[Any, Any, Resp]]


class _Undecodable:
    """A request whose bytes are not a valid message (e.g. a string field with bad UTF-8)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _lenient(deserialize: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        try:
            return deserialize(data)
        except DecodeError as exc:
            # grpc would answer UNKNOWN "Unexpected DecodeError"; the method answers INVALID_ARGUMENT.
            return _Undecodable(str(exc))

    return parse


class _CaptureHandlers:
    """Stands in for a server to collect the generated method handlers."""

    def __init__(self) -> None:
        self.service = ""
        self.handlers: dict[str, Any] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        self.service, self.handlers = service, handlers


def add_to_server(servicer: ContextServicer, server: grpc.aio.Server) -> None:
    """`add_ContextServiceServicer_to_server`, with request parsing that reports malformed bytes
    (invalid UTF-8 in a string field, truncated messages) as INVALID_ARGUMENT."""
    capture = _CaptureHandlers()
    context_pb2_grpc.add_ContextServiceServicer_to_server(servicer, capture)  # type: ignore[no-untyped-call]
    handlers = {
        name: handler._replace(request_deserializer=_lenient(handler.request_deserializer))
        for name, handler in capture.handlers.items()
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(capture.service, handlers),))
    server.add_registered_method_handlers(capture.service, handlers)  # type: ignore[attr-defined]


def _rpc(method: Handler[Req, Resp]) -> Handler[Req, Resp]:
    """AgentmeshErrors become rich statuses; anything unexpected is INTERNAL (logged, no traceback
    to the caller)."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Req, context: grpc.aio.ServicerContext[Any, Any]) -> Resp:
        try:
            if isinstance(request, _Undecodable):
                raise InvalidRequestError("request", f"not a valid {method.__name__}Request: {request.reason}")
            return await method(self, request, context)
        except AgentmeshError as exc:
            await abort(context, exc)
        except Exception:
            log.exception("context_svc: %s failed", method.__name__)
            await abort(context, AgentmeshError(ErrorCode.INTERNAL, f"{method.__name__} failed inside context_svc"))

    return wrapper


def _caller() -> Caller:
    identity = require_identity()
    return Caller(subject=identity.subject, agent_id=identity.agent_id, is_operator=identity.has_role("operator"))


def _timestamp(seconds: float) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromNanoseconds(int(seconds * 1e9))
    return stamp


def _seconds(stamp: timestamp_pb2.Timestamp) -> float:
    return float(stamp.ToNanoseconds()) / 1e9


def payload_ref_pb(ref: StoredPayload) -> common_pb2.PayloadRef:
    return common_pb2.PayloadRef(
        ref_id=ref.ref_id,
        session_id=ref.session_id,
        size_bytes=ref.size_bytes,
        media_type=ref.media_type,
        sha256=ref.sha256,
        expire_time=_timestamp(ref.expire_at),
    )


def payload_ref_domain(ref: common_pb2.PayloadRef) -> StoredPayload:
    return StoredPayload(
        ref_id=ref.ref_id,
        session_id=ref.session_id,
        size_bytes=ref.size_bytes,
        media_type=ref.media_type,
        sha256=ref.sha256,
        expire_at=_seconds(ref.expire_time) if ref.HasField("expire_time") else 0.0,
    )


def message_domain(message: common_pb2.Message) -> Message:
    role = _ROLE_TO_DOMAIN.get(message.role)
    if role is None:
        raise InvalidRequestError("message.role", "must be ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT or ROLE_TOOL")
    return Message(
        role=role,
        content=message.content,
        tool_calls=tuple(ToolCallRecord(c.id, c.name, c.arguments_json) for c in message.tool_calls),
        tool_call_id=message.tool_call_id,
        name=message.name,
        create_time=_seconds(message.create_time) if message.HasField("create_time") else 0.0,
    )


def message_pb(message: Message) -> common_pb2.Message:
    return common_pb2.Message(
        role=_ROLE_TO_PB[message.role],
        content=message.content,
        tool_calls=[
            common_pb2.ToolCall(id=c.id, name=c.name, arguments_json=c.arguments_json) for c in message.tool_calls
        ],
        tool_call_id=message.tool_call_id,
        name=message.name,
        token_count=message.token_count,
        create_time=_timestamp(message.create_time),
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
        create_time=_timestamp(session.create_time),
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

    def __init__(self, size: int = 20_000) -> None:
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


_MESSAGES = _MessageCache()


def view_pb(view: ContextView) -> context_pb2.ContextView:
    return context_pb2.ContextView(
        messages=[_MESSAGES.pb(m) for m in view.messages],
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


def tool_outcome_domain(result: tool_pb2.ToolResult) -> ToolOutcome:
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
                ref=payload_ref_domain(output.ref),
                digest=output.digest,
                structured=structured,
                redacted=output.redacted,
            )
        return ToolOutcome(**base, inline=output.inline, structured=structured, redacted=output.redacted)
    if kind == "error":
        error = result.error
        detail = common_pb2.ErrorDetail(
            code=error.code,
            message=error.message,
            violations=error.violations,
            retryable=error.retryable,
            fallback_tool=error.fallback_tool,
            missing_permission=error.missing_permission,
            metadata=error.metadata,
        )
        if error.HasField("retry_after"):
            detail.retry_after.CopyFrom(error.retry_after)
        err = from_detail(detail)
        return ToolOutcome(
            **base, error_text=model_text(err), error_code=err.code.name, fallback_tool=error.fallback_tool
        )
    if kind == "pending_approval":
        pending = result.pending_approval
        return ToolOutcome(
            **base,
            pending=PendingInfo(
                approval_id=pending.approval_id,
                impact=pending.impact,
                expire_at=_seconds(pending.expire_time) if pending.HasField("expire_time") else 0.0,
            ),
        )
    raise InvalidRequestError("result.outcome", "one of output, error or pending_approval is required")


def _range(message: context_pb2.LineRange | context_pb2.ByteRange) -> tuple[int, int]:
    return int(message.start), int(message.end)


class ContextServicer(context_pb2_grpc.ContextServiceServicer):
    """The ContextService servicer: one domain call per RPC."""

    def __init__(self, engine: ContextEngine) -> None:
        self.engine = engine

    @_rpc
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
        session, _ = await self.engine.create_session(
            _caller(),
            session_id=request.session_id,
            agent_id=request.agent_id,
            goal=request.goal,
            sub_goals=list(request.sub_goals),
            system_prompt=request.system_prompt,
            budget=budget,
        )
        return context_pb2.CreateSessionResponse(session=session_pb(session))

    @_rpc
    async def GetSession(
        self, request: context_pb2.GetSessionRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> context_pb2.GetSessionResponse:
        session, entities = await self.engine.get_session(_caller(), request.session_id)
        return context_pb2.GetSessionResponse(session=session_pb(session), entities=entities)

    @_rpc
    async def AppendMessage(
        self, request: context_pb2.AppendMessageRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> context_pb2.AppendMessageResponse:
        if not request.HasField("message"):
            raise InvalidRequestError("message", "required")
        index, tokens = await self.engine.append_message(_caller(), request.session_id, message_domain(request.message))
        return context_pb2.AppendMessageResponse(index=index, token_count=tokens)

    @_rpc
    async def AppendToolResult(
        self, request: context_pb2.AppendToolResultRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> context_pb2.AppendToolResultResponse:
        if not request.HasField("result"):
            raise InvalidRequestError("result", "required")
        index, tokens, ref = await self.engine.append_tool_result(
            _caller(), request.session_id, tool_outcome_domain(request.result)
        )
        response = context_pb2.AppendToolResultResponse(index=index, token_count=tokens)
        if ref is not None:
            response.ref.CopyFrom(payload_ref_pb(ref))
        return response

    @_rpc
    async def BuildContext(
        self, request: context_pb2.BuildContextRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> context_pb2.BuildContextResponse:
        view = await self.engine.build_context(
            _caller(),
            request.session_id,
            budget_tokens=request.budget_tokens if request.HasField("budget_tokens") else None,
            debug=request.debug,
        )
        return context_pb2.BuildContextResponse(view=view_pb(view))

    @_rpc
    async def GetPayload(
        self, request: context_pb2.GetPayloadRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> context_pb2.GetPayloadResponse:
        selector = request.WhichOneof("selector")
        ref, content, partial = await self.engine.get_payload(
            _caller(),
            request.session_id,
            request.ref_id,
            json_path=request.json_path if selector == "json_path" else None,
            line_range=_range(request.line_range) if selector == "line_range" else None,
            byte_range=_range(request.byte_range) if selector == "byte_range" else None,
        )
        return context_pb2.GetPayloadResponse(ref=payload_ref_pb(ref), content=content, partial=partial)

    @_rpc
    async def Compact(
        self, request: context_pb2.CompactRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> context_pb2.CompactResponse:
        count, summary = await self.engine.compact(_caller(), request.session_id)
        response = context_pb2.CompactResponse(summarized_messages=count)
        if summary is not None:
            response.summary.CopyFrom(summary_pb(summary))
        return response

    @_rpc
    async def DeleteSession(
        self, request: context_pb2.DeleteSessionRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> context_pb2.DeleteSessionResponse:
        deleted = await self.engine.delete_session(_caller(), request.session_id)
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
                common_pb2.Message(role=common_pb2.ROLE_SYSTEM, content=system),
                common_pb2.Message(role=common_pb2.ROLE_USER, content=user),
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
    host.add_servicer(SERVICE_NAME, add_to_server, ContextServicer(engine))

    async def cleanup() -> None:
        await clients.close()

    return cleanup


SPEC = ServiceSpec(name="context", setup=setup)
