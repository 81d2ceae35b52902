"""Protobuf <-> dispatcher domain objects (used by server.py and adapters.py only)."""

from __future__ import annotations

from google.protobuf import timestamp_pb2

from agentmesh.errors import AgentmeshError, ErrorCode
from agentmesh.rpcstatus import from_detail, to_detail
from agentmesh.v1 import common_pb2, context_pb2, dispatcher_pb2, provider_pb2, tool_pb2
from dispatcher_svc.agents import AgentConfig
from dispatcher_svc.model import (
    ApprovalRecord,
    ExecStats,
    ModelReply,
    PayloadRef,
    PendingApproval,
    Task,
    TaskEvent,
    ToolCall,
    ToolOutcome,
    ToolOutput,
    Usage,
)
from dispatcher_svc.ports import ContextBlockInfo, ContextView, SessionInfo, ToolInfo
from dispatcher_svc.service import StartRequest

_ROLES = {
    "system": common_pb2.ROLE_SYSTEM,
    "user": common_pb2.ROLE_USER,
    "assistant": common_pb2.ROLE_ASSISTANT,
    "tool": common_pb2.ROLE_TOOL,
}
_RESULT_TYPES = {"structured": common_pb2.RESULT_TYPE_STRUCTURED, "text": common_pb2.RESULT_TYPE_TEXT}
_RESULT_NAMES = {v: k for k, v in _RESULT_TYPES.items()}


def timestamp(ms: int) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromMilliseconds(ms)
    return ts


def ms_of(ts: timestamp_pb2.Timestamp, present: bool) -> int:
    return ts.ToMilliseconds() if present else 0


# --- common ---------------------------------------------------------------------------------------


def tool_call_pb(call: ToolCall) -> common_pb2.ToolCall:
    return common_pb2.ToolCall(id=call.id, name=call.name, arguments_json=call.arguments_json)


def tool_call(pb: common_pb2.ToolCall) -> ToolCall:
    return ToolCall(id=pb.id, name=pb.name, arguments_json=pb.arguments_json)


def usage_pb(usage: Usage) -> common_pb2.TokenUsage:
    return common_pb2.TokenUsage(
        input_tokens=usage.input_tokens, output_tokens=usage.output_tokens, total_tokens=usage.total_tokens
    )


def usage(pb: common_pb2.TokenUsage) -> Usage:
    return Usage(input_tokens=pb.input_tokens, output_tokens=pb.output_tokens)


def message_pb(role: str, content: str, tool_calls: tuple[ToolCall, ...] | list[ToolCall] = ()) -> common_pb2.Message:
    return common_pb2.Message(role=_ROLES[role], content=content, tool_calls=[tool_call_pb(c) for c in tool_calls])


def payload_ref_pb(ref: PayloadRef) -> common_pb2.PayloadRef:
    pb = common_pb2.PayloadRef(
        ref_id=ref.ref_id,
        session_id=ref.session_id,
        size_bytes=ref.size_bytes,
        media_type=ref.media_type,
        sha256=ref.sha256,
    )
    if ref.expire_time_ms:
        pb.expire_time.CopyFrom(timestamp(ref.expire_time_ms))
    return pb


def payload_ref(pb: common_pb2.PayloadRef) -> PayloadRef:
    return PayloadRef(
        ref_id=pb.ref_id,
        session_id=pb.session_id,
        size_bytes=pb.size_bytes,
        media_type=pb.media_type,
        sha256=pb.sha256,
        expire_time_ms=ms_of(pb.expire_time, pb.HasField("expire_time")),
    )


# --- tools ----------------------------------------------------------------------------------------


def pending_pb(pending: PendingApproval) -> tool_pb2.PendingApproval:
    pb = tool_pb2.PendingApproval(
        approval_id=pending.approval_id,
        plan=tool_call_pb(pending.plan),
        impact=pending.impact,
        arguments_sha256=pending.arguments_sha256,
        requested_by=pending.requested_by,
    )
    if pending.expire_time_ms:
        pb.expire_time.CopyFrom(timestamp(pending.expire_time_ms))
    return pb


def pending(pb: tool_pb2.PendingApproval) -> PendingApproval:
    return PendingApproval(
        approval_id=pb.approval_id,
        plan=tool_call(pb.plan),
        impact=pb.impact,
        arguments_sha256=pb.arguments_sha256,
        expire_time_ms=ms_of(pb.expire_time, pb.HasField("expire_time")),
        requested_by=pb.requested_by,
    )


def tool_error_pb(err: AgentmeshError) -> tool_pb2.ToolError:
    detail = to_detail(err)
    return tool_pb2.ToolError(
        code=detail.code,
        error_class=detail.error_class,
        message=detail.message,
        violations=detail.violations,
        retryable=detail.retryable,
        retry_after=detail.retry_after if detail.HasField("retry_after") else None,
        fallback_tool=detail.fallback_tool,
        missing_permission=detail.missing_permission,
        metadata=detail.metadata,
    )


def tool_error(pb: tool_pb2.ToolError) -> AgentmeshError:
    detail = common_pb2.ErrorDetail(
        code=pb.code,
        error_class=pb.error_class,
        message=pb.message,
        violations=pb.violations,
        retryable=pb.retryable,
        retry_after=pb.retry_after if pb.HasField("retry_after") else None,
        fallback_tool=pb.fallback_tool,
        missing_permission=pb.missing_permission,
        metadata=pb.metadata,
    )
    return from_detail(detail)


def tool_result_pb(outcome: ToolOutcome) -> tool_pb2.ToolResult:
    pb = tool_pb2.ToolResult(tool_call_id=outcome.tool_call_id, tool_name=outcome.tool_name)
    if outcome.output is not None:
        out = outcome.output
        output = tool_pb2.ToolOutput(
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
        pb.error.CopyFrom(tool_error_pb(outcome.error))
    elif outcome.pending is not None:
        pb.pending_approval.CopyFrom(pending_pb(outcome.pending))
    s = outcome.stats
    pb.stats.attempts = s.attempts
    pb.stats.duration.FromNanoseconds(int(s.duration_ms * 1e6))
    pb.stats.replayed = s.replayed
    pb.stats.output_bytes = s.output_bytes
    return pb


def tool_result(pb: tool_pb2.ToolResult) -> ToolOutcome:
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
        error = tool_error(pb.error)
    elif which == "pending_approval":
        pend = pending(pb.pending_approval)
    else:
        error = AgentmeshError(  # a ToolResult without an outcome is tool_svc's bug, typed as such
            ErrorCode.INTERNAL, f"tool_svc answered {pb.tool_name or 'a call'} without an outcome"
        )
    stats = ExecStats(
        attempts=pb.stats.attempts,
        duration_ms=pb.stats.duration.ToNanoseconds() / 1e6,
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
    )


def approval(pb: tool_pb2.Approval) -> ApprovalRecord:
    state = tool_pb2.ApprovalState.Name(pb.state).removeprefix("APPROVAL_STATE_")
    return ApprovalRecord(
        request=pending(pb.request) if pb.HasField("request") else None,
        state=state,
        resolved_by=pb.resolved_by,
        reason=pb.reason,
        resolve_time_ms=ms_of(pb.resolve_time, pb.HasField("resolve_time")),
    )


def approval_pb(record: ApprovalRecord) -> tool_pb2.Approval:
    pb = tool_pb2.Approval(
        state=f"APPROVAL_STATE_{record.state}",
        resolved_by=record.resolved_by,
        reason=record.reason,
    )
    if record.request is not None:
        pb.request.CopyFrom(pending_pb(record.request))
    if record.resolve_time_ms:
        pb.resolve_time.CopyFrom(timestamp(record.resolve_time_ms))
    return pb


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
    return ModelReply(
        text=pb.message.content,
        tool_calls=tuple(tool_call(c) for c in pb.message.tool_calls),
        usage=usage(pb.usage),
        model=pb.model,
        finish_reason=provider_pb2.FinishReason.Name(pb.finish_reason).removeprefix("FINISH_REASON_"),
    )


# --- dispatcher -----------------------------------------------------------------------------------


def start_request(pb: dispatcher_pb2.StartTaskRequest) -> StartRequest:
    return StartRequest(
        agent_id=pb.agent_id,
        goal=pb.goal,
        token_budget=pb.token_budget if pb.HasField("token_budget") else None,
        max_steps=pb.max_steps if pb.HasField("max_steps") else None,
        task_id=pb.task_id,
    )


def task_pb(task: Task) -> dispatcher_pb2.Task:
    pb = dispatcher_pb2.Task(
        task_id=task.task_id,
        agent_id=task.agent_id,
        goal=task.goal,
        status=int(task.status),  # type: ignore[arg-type]
        step=task.step,
        usage=usage_pb(task.usage),
        answer=task.answer,
        session_id=task.session_id,
        request_id=task.request_id,
        last_sequence=task.last_sequence,
    )
    if task.error is not None:
        pb.error.CopyFrom(to_detail(task.error))
    if task.pending_approval is not None:
        pb.pending_approval.CopyFrom(pending_pb(task.pending_approval))
    if task.create_time_ms:
        pb.create_time.CopyFrom(timestamp(task.create_time_ms))
    if task.update_time_ms:
        pb.update_time.CopyFrom(timestamp(task.update_time_ms))
    return pb


def event_pb(event: TaskEvent) -> dispatcher_pb2.TaskEvent:
    pb = dispatcher_pb2.TaskEvent(
        task_id=event.task_id,
        sequence=event.sequence,
        kind=int(event.kind),  # type: ignore[arg-type]
        status=int(event.status),  # type: ignore[arg-type]
        step=event.step,
        message=event.message,
        attributes=event.attributes,
    )
    pb.time.CopyFrom(timestamp(event.time_ms))
    if event.tool_call is not None:
        pb.tool_call.CopyFrom(tool_call_pb(event.tool_call))
    if event.tool_result is not None:
        pb.tool_result.CopyFrom(tool_result_pb(event.tool_result))
    if event.error is not None:
        pb.error.CopyFrom(to_detail(event.error))
    if event.pending_approval is not None:
        pb.pending_approval.CopyFrom(pending_pb(event.pending_approval))
    if event.usage is not None:
        pb.usage.CopyFrom(usage_pb(event.usage))
    return pb


def agent_pb(agent: AgentConfig) -> dispatcher_pb2.Agent:
    return dispatcher_pb2.Agent(
        agent_id=agent.id,
        description=agent.description,
        model=agent.model,
        tools=list(agent.tools),
        capabilities=list(agent.capabilities),
        token_budget=agent.token_budget,
        max_steps=agent.max_steps,
    )
