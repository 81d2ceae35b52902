"""tool_svc's gRPC surface: maps protobuf to the tool gateway and back, nothing else.

Tool outcomes (output, typed error, pending approval) travel in-band in ToolResult; a gRPC status is
only used for faults of the RPC itself (malformed request, unknown approval, Redis down, ...). The
caller's identity is the verified token (`agentmesh.auth.require_identity`), never a request field.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc.aio

from agentmesh.chat import DEFAULT_MAX_JSON_DEPTH, MAX_GOAL_CHARS, ToolCall
from agentmesh.errors import InvalidRequestError
from agentmesh.identity_value import require_identity
from agentmesh.rpc import codec
from agentmesh.rpc.host import ServiceHost, ServiceSpec
from agentmesh.rpc.status import to_detail
from agentmesh.store import Keys
from agentmesh.v1 import common_pb2, tool_pb2, tool_pb2_grpc
from tool_svc.approvals import ApprovalRecord, Settlement
from tool_svc.gateway import Gateway
from tool_svc.model import (
    Caller,
    CallRequest,
    Output,
    Pending,
    Permission,
    RetryPolicy,
    ToolDef,
    ToolResult,
)

log = logging.getLogger("tool_svc.server")

SERVICE_NAME = tool_pb2.DESCRIPTOR.services_by_name["ToolService"].full_name

_MAX_CALL_ID = 256
_KEYS = Keys()

_RESULT_TYPE = {"structured": common_pb2.RESULT_TYPE_STRUCTURED, "text": common_pb2.RESULT_TYPE_TEXT}
_ACCESS = {"read": common_pb2.ACCESS_MODE_READ, "write": common_pb2.ACCESS_MODE_WRITE}
_STATE = {
    "pending": common_pb2.APPROVAL_STATE_PENDING,
    "approved": common_pb2.APPROVAL_STATE_APPROVED,
    "denied": common_pb2.APPROVAL_STATE_DENIED,
    "expired": common_pb2.APPROVAL_STATE_EXPIRED,
}


# --- ToolSpec <-> ToolDef ---------------------------------------------------------------------------


_SPEC_PBS: dict[int, tuple[ToolDef, str, common_pb2.ToolSpec]] = {}
_SPEC_PBS_MAX = 4096


def spec_to_pb(spec: ToolDef, *, unavailable: str = "") -> common_pb2.ToolSpec:
    """The ToolSpec of `spec`, built once per (ToolDef object, unavailable): a ToolDef is frozen and the
    registry replaces it rather than changing it, and DiscoverTools answers the same few every call (two
    schemas' sorted JSON and five Durations each, issue 45). The entry holds the ToolDef, so its id is
    not reused while cached; a message put in a response's repeated field is copied, never shared."""
    hit = _SPEC_PBS.get(id(spec))
    if hit is not None and hit[0] is spec and hit[1] == unavailable:
        return hit[2]
    built = _spec_pb(spec, unavailable)
    if len(_SPEC_PBS) >= _SPEC_PBS_MAX:
        _SPEC_PBS.clear()
    _SPEC_PBS[id(spec)] = (spec, unavailable, built)
    return built


def _spec_pb(spec: ToolDef, unavailable: str) -> common_pb2.ToolSpec:
    return common_pb2.ToolSpec(
        name=spec.name,
        description=spec.description,
        examples=list(spec.examples),
        input_schema_json=json.dumps(spec.input_schema, ensure_ascii=False, sort_keys=True),
        output_schema_json=""
        if spec.output_schema is None
        else json.dumps(spec.output_schema, ensure_ascii=False, sort_keys=True),
        result_type=_RESULT_TYPE[spec.result_type],
        permission=common_pb2.ToolPermission(
            environment=spec.permission.environment, group=spec.permission.group, access=_ACCESS[spec.permission.access]
        ),
        impact=spec.impact,
        timeout=codec.duration(spec.timeout_s),
        retry_policy=common_pb2.RetryPolicy(
            max_attempts=spec.retry.max_attempts,
            initial_backoff=codec.duration(spec.retry.initial_backoff_s),
            max_backoff=codec.duration(spec.retry.max_backoff_s),
            max_jitter=codec.duration(spec.retry.max_jitter_s),
        ),
        idempotent=spec.idempotent,
        requires_approval=spec.requires_approval,
        fallback_tool=spec.fallback_tool,
        executor=spec.executor,
        endpoint_url=spec.endpoint_url,
        http_method=spec.http_method if spec.executor == "http" else "",
        upstream_idempotency_key=spec.upstream_idempotency_key,
        unavailable_reason=unavailable,
        mcp_server=spec.mcp_server,
        mcp_tool=spec.mcp_tool,
    )


def _schema(text: str, field: str, *, required: bool, max_depth: int) -> dict[str, Any] | None:
    if not text.strip():
        if required:
            raise InvalidRequestError(field, "is required (a Draft 2020-12 JSON Schema as JSON text)")
        return None
    # Depth-checked before parsing: a deep schema would exhaust the parser, jsonschema or our walks.
    value = codec.json_value(text, field, max_depth=max_depth)
    if not isinstance(value, dict):
        raise InvalidRequestError(field, "must be a JSON object")
    return value


def spec_from_pb(pb: common_pb2.ToolSpec, *, max_json_depth: int = DEFAULT_MAX_JSON_DEPTH) -> ToolDef:
    """A ToolDef from a RegisterTool request (the registry checks it further); schemas nesting deeper
    than `max_json_depth` (`server.max_json_depth`) are refused before parsing."""
    access = {v: k for k, v in _ACCESS.items()}.get(pb.permission.access)
    if access is None:
        raise InvalidRequestError("tool.permission.access", "must be ACCESS_MODE_READ or ACCESS_MODE_WRITE")
    result_type = {v: k for k, v in _RESULT_TYPE.items()}.get(pb.result_type, "structured")
    retry = pb.retry_policy
    timeout = codec.duration_seconds(pb.timeout, "tool.timeout") if pb.HasField("timeout") else 10.0
    input_schema = _schema(pb.input_schema_json, "tool.input_schema_json", required=True, max_depth=max_json_depth)
    assert input_schema is not None
    return ToolDef(
        name=pb.name,
        description=pb.description,
        examples=tuple(pb.examples),
        input_schema=input_schema,
        output_schema=_schema(
            pb.output_schema_json, "tool.output_schema_json", required=False, max_depth=max_json_depth
        ),
        result_type=result_type,  # type: ignore[arg-type]
        permission=Permission(pb.permission.environment or "*", pb.permission.group or "default", access),  # type: ignore[arg-type]
        impact=pb.impact,
        timeout_s=timeout,
        retry=RetryPolicy(
            max_attempts=retry.max_attempts or 3,
            initial_backoff_s=codec.duration_seconds(retry.initial_backoff, "tool.retry_policy.initial_backoff")
            if retry.HasField("initial_backoff")
            else 1.0,
            max_backoff_s=codec.duration_seconds(retry.max_backoff, "tool.retry_policy.max_backoff")
            if retry.HasField("max_backoff")
            else 4.0,
            max_jitter_s=codec.duration_seconds(retry.max_jitter, "tool.retry_policy.max_jitter")
            if retry.HasField("max_jitter")
            else 0.5,
        ),
        idempotent=pb.idempotent,
        requires_approval=pb.requires_approval or access == "write",
        fallback_tool=pb.fallback_tool,
        executor=(pb.executor or "http"),  # type: ignore[arg-type]
        endpoint_url=pb.endpoint_url,
        http_method=pb.http_method or "POST",
        upstream_idempotency_key=pb.upstream_idempotency_key,
    )


# --- results ---------------------------------------------------------------------------------------


_KIND = {
    "call": common_pb2.APPROVAL_KIND_CALL,
    "register_tool": common_pb2.APPROVAL_KIND_REGISTER_TOOL,
    "settlement": common_pb2.APPROVAL_KIND_SETTLEMENT,
}
_SETTLEMENT_TO_PB: dict[Settlement, common_pb2.SettlementOutcome] = {
    "ran": common_pb2.SETTLEMENT_OUTCOME_RAN,
    "not_ran": common_pb2.SETTLEMENT_OUTCOME_NOT_RAN,
}
_SETTLEMENT_FROM_PB: dict[int, Settlement] = {v: k for k, v in _SETTLEMENT_TO_PB.items()}


def settlement_from_pb(value: int) -> Settlement:
    """The domain settlement of a request field; INVALID_REQUEST for a number this build does not know."""
    if value == common_pb2.SETTLEMENT_OUTCOME_UNSPECIFIED:
        return ""
    if value not in _SETTLEMENT_FROM_PB:
        raise InvalidRequestError("settlement", f"unknown SettlementOutcome {value}")
    return _SETTLEMENT_FROM_PB[value]


def pending_to_pb(pending: Pending) -> common_pb2.PendingApproval:
    return common_pb2.PendingApproval(
        approval_id=pending.approval_id,
        plan=codec.tool_call_to_pb(ToolCall(pending.call_id, pending.tool_name, pending.arguments_json)),
        impact=pending.impact,
        arguments_sha256=pending.arguments_sha256,
        expire_time=codec.timestamp(pending.expire_at),
        requested_by=pending.requested_by,
        kind=_KIND.get(pending.kind, common_pb2.APPROVAL_KIND_CALL),
    )


def output_to_pb(output: Output) -> common_pb2.ToolOutput:
    out = common_pb2.ToolOutput(result_type=_RESULT_TYPE[output.result_type], redacted=output.redacted)
    if output.ref is not None:
        ref = output.ref
        out.ref.CopyFrom(codec.payload_ref_to_pb(ref))
        out.digest = output.digest
    else:
        out.inline = output.inline
    return out


def result_to_pb(result: ToolResult) -> common_pb2.ToolResult:
    out = common_pb2.ToolResult(
        tool_call_id=result.call_id,
        tool_name=result.tool_name,
        stats=common_pb2.ExecutionStats(
            attempts=result.stats.attempts,
            duration=codec.duration(result.stats.duration_s),
            replayed=result.stats.replayed,
            output_bytes=result.stats.output_bytes,
        ),
    )
    outcome = result.outcome
    if isinstance(outcome, Output):
        out.output.CopyFrom(output_to_pb(outcome))
    elif isinstance(outcome, Pending):
        out.pending_approval.CopyFrom(pending_to_pb(outcome))
    else:
        out.error.CopyFrom(to_detail(outcome))
    return out


def approval_to_pb(record: ApprovalRecord) -> common_pb2.Approval:
    out = common_pb2.Approval(
        request=pending_to_pb(record.pending),
        state=_STATE[record.state],
        resolved_by=record.resolved_by,
        reason=record.reason,
        settlement=_SETTLEMENT_TO_PB.get(record.settlement, common_pb2.SETTLEMENT_OUTCOME_UNSPECIFIED),
    )
    if record.resolve_time is not None:
        out.resolve_time.CopyFrom(codec.timestamp(record.resolve_time))
    return out


def _check_id(field: str, value: str, *, required: bool) -> None:
    if not value:
        if required:
            raise InvalidRequestError(field, "is required")
        return
    try:
        # The key builders enforce what an id may contain (no braces, whitespace or control characters).
        if field == "session_id":
            _KEYS.session(value, "payloads")
        elif field == "idempotency_key":
            _KEYS.idempotency(value)
        else:
            _KEYS.approval(value)
    except InvalidRequestError as exc:
        raise InvalidRequestError(field, exc.message.split(": ", 1)[-1]) from None


# --- the servicer ----------------------------------------------------------------------------------


# The breakers ListTools reports: the ones not closed (a closed breaker says nothing about its tool).
_BREAKER_STATES = {
    "open": tool_pb2.BREAKER_STATE_OPEN,
    "half_open": tool_pb2.BREAKER_STATE_HALF_OPEN,
    "ramping": tool_pb2.BREAKER_STATE_RAMPING,
}


class ToolServicer(tool_pb2_grpc.ToolServiceServicer):
    """The ToolService servicer: protobuf in, gateway call, protobuf out."""

    def __init__(self, gateway: Gateway, *, max_json_depth: int = DEFAULT_MAX_JSON_DEPTH) -> None:
        self.gateway = gateway
        self.max_json_depth = max_json_depth

    async def ListTools(
        self, request: tool_pb2.ListToolsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> tool_pb2.ListToolsResponse:
        caller = Caller.from_identity(require_identity()) if request.permitted_only else None
        entries = await self.gateway.list_entries(request.group, caller=caller, permitted_only=request.permitted_only)
        listed = {t.spec.name for t in entries}
        breakers = [
            tool_pb2.ToolBreakerCount(tool=tool, state=_BREAKER_STATES[state], count=count)
            for tool, state, count in self.gateway.breakers.census()
            if tool in listed and state in _BREAKER_STATES
        ]
        return tool_pb2.ListToolsResponse(
            tools=[spec_to_pb(t.spec, unavailable=t.unavailable) for t in entries], breakers=breakers
        )

    async def DiscoverTools(
        self, request: tool_pb2.DiscoverToolsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> tool_pb2.DiscoverToolsResponse:
        if not 0 <= request.k <= 50:
            raise InvalidRequestError("k", f"must be 1..50 (0 for the default 5), got {request.k}")
        if len(request.goal) > MAX_GOAL_CHARS:
            raise InvalidRequestError("goal", f"is limited to {MAX_GOAL_CHARS} characters")
        caller = Caller.from_identity(require_identity())
        scored = await self.gateway.discover(
            request.goal, request.k, caller=caller, permitted_only=request.permitted_only
        )
        return tool_pb2.DiscoverToolsResponse(
            tools=[tool_pb2.ScoredTool(tool=spec_to_pb(s.tool), score=s.score) for s in scored]
        )

    async def RegisterTool(
        self, request: tool_pb2.RegisterToolRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> tool_pb2.RegisterToolResponse:
        if not request.HasField("tool"):
            raise InvalidRequestError("tool", "is required")
        spec = spec_from_pb(request.tool, max_json_depth=self.max_json_depth)
        caller = Caller.from_identity(require_identity())
        stored = await self.gateway.register(spec, replace=request.replace, caller=caller)
        if isinstance(stored, Pending):
            return tool_pb2.RegisterToolResponse(tool=spec_to_pb(spec), pending_approval=pending_to_pb(stored))
        return tool_pb2.RegisterToolResponse(tool=spec_to_pb(stored))

    async def ExecuteTool(
        self, request: tool_pb2.ExecuteToolRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> tool_pb2.ExecuteToolResponse:
        if not request.HasField("call"):
            raise InvalidRequestError("call", "is required")
        if len(request.call.id) > _MAX_CALL_ID:
            raise InvalidRequestError("call.id", f"is limited to {_MAX_CALL_ID} characters")
        _check_id("session_id", request.session_id, required=True)
        _check_id("idempotency_key", request.idempotency_key, required=False)
        caller = Caller.from_identity(require_identity())
        call = CallRequest(
            call_id=request.call.id,
            name=request.call.name,
            arguments_json=request.call.arguments_json,
            session_id=request.session_id,
            idempotency_key=request.idempotency_key,
            goal=request.goal[:MAX_GOAL_CHARS],
        )
        result = await self.gateway.execute(call, caller)
        return tool_pb2.ExecuteToolResponse(result=result_to_pb(result))

    async def ResolveApproval(
        self, request: tool_pb2.ResolveApprovalRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> tool_pb2.ResolveApprovalResponse:
        _check_id("approval_id", request.approval_id, required=True)
        if not request.arguments_sha256:
            raise InvalidRequestError("arguments_sha256", "is required: the hash of the arguments you approve")
        approver = Caller.from_identity(require_identity())
        record, result = await self.gateway.resolve_approval(
            request.approval_id,
            approve=request.approve,
            reason=request.reason,
            arguments_sha256=request.arguments_sha256,
            approver=approver,
            settlement=settlement_from_pb(request.settlement),
        )
        return tool_pb2.ResolveApprovalResponse(approval=approval_to_pb(record), result=result_to_pb(result))

    async def GetApproval(
        self, request: tool_pb2.GetApprovalRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> tool_pb2.GetApprovalResponse:
        _check_id("approval_id", request.approval_id, required=True)
        record = await self.gateway.get_approval(request.approval_id, Caller.from_identity(require_identity()))
        return tool_pb2.GetApprovalResponse(approval=approval_to_pb(record))


async def setup(host: ServiceHost) -> Callable[[], Awaitable[None]] | None:
    """Registers ToolService on the host."""
    gateway = Gateway(host.settings, host.store, tracer=host.telemetry.tracer("tool_svc"), metrics=host.metrics)
    try:
        await gateway.start()  # MCP servers: connected, first listings in (docs/design.md §16)
    except BaseException:
        await gateway.aclose()
        raise
    servicer = ToolServicer(gateway, max_json_depth=host.settings.server.max_json_depth)
    host.add_servicer(SERVICE_NAME, tool_pb2_grpc.add_ToolServiceServicer_to_server, servicer)
    return gateway.aclose


SPEC = ServiceSpec(
    name="tool",
    setup=setup,
    method_roles={
        f"/{SERVICE_NAME}/RegisterTool": frozenset({"admin"}),
        f"/{SERVICE_NAME}/ResolveApproval": frozenset({"operator", "admin"}),
    },
)
