"""Protobuf mappings of the dispatcher's calls to the other services (the edge, like server.py).

adapters.py sends what these build and reads what they return; server.py uses the shared ones
(a task's pending approval, tool results and settlement outcomes in its own messages).
"""

from __future__ import annotations

from agentmesh.chat import Role, ToolCall
from agentmesh.errors import AgentmeshError, ErrorCode
from agentmesh.rpc import codec
from agentmesh.rpc.status import checked_from_detail, to_detail
from agentmesh.v1 import common_pb2, context_pb2, provider_pb2
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
from dispatcher_svc.ports import ContextBlockInfo, ContextView, SessionInfo, ToolInfo

_RESULT_TYPES = {"structured": common_pb2.RESULT_TYPE_STRUCTURED, "text": common_pb2.RESULT_TYPE_TEXT}
_RESULT_NAMES = {v: k for k, v in _RESULT_TYPES.items()}


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
