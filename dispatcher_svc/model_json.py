"""JSON codecs of the dispatcher's values for the checkpoint and the event log (model.py's types)."""

from __future__ import annotations

import json
from typing import Any

from agentmesh.chat import Correction, ToolCall, Usage
from agentmesh.errors import error_from_json, error_to_json
from dispatcher_svc.model import (
    EventKind,
    ExecStats,
    ModelReply,
    PayloadRef,
    PendingApproval,
    TaskEvent,
    TaskStatus,
    ToolOutcome,
    ToolOutput,
)


def _ref_to_json(ref: PayloadRef) -> dict[str, Any]:
    return {
        "ref_id": ref.ref_id,
        "session_id": ref.session_id,
        "size": ref.size_bytes,
        "media_type": ref.media_type,
        "sha256": ref.sha256,
        "expire_ms": ref.expire_time_ms,
    }


def _ref_from_json(data: dict[str, Any]) -> PayloadRef:
    return PayloadRef(
        ref_id=data["ref_id"],
        session_id=data.get("session_id", ""),
        size_bytes=int(data.get("size", 0)),
        media_type=data.get("media_type", ""),
        sha256=data.get("sha256", ""),
        expire_time_ms=int(data.get("expire_ms", 0)),
    )


def pending_to_json(pending: PendingApproval) -> dict[str, Any]:
    return {
        "approval_id": pending.approval_id,
        "plan": pending.plan.to_json(),
        "impact": pending.impact,
        "sha256": pending.arguments_sha256,
        "expire_ms": pending.expire_time_ms,
        "requested_by": pending.requested_by,
        **({"kind": pending.kind} if pending.kind != "call" else {}),
    }


def pending_from_json(data: dict[str, Any]) -> PendingApproval:
    return PendingApproval(
        approval_id=data["approval_id"],
        plan=ToolCall.from_json(data["plan"]),
        impact=data.get("impact", ""),
        arguments_sha256=data.get("sha256", ""),
        expire_time_ms=int(data.get("expire_ms", 0)),
        requested_by=data.get("requested_by", ""),
        kind=str(data.get("kind", "call")),
    )


def outcome_to_json(outcome: ToolOutcome) -> dict[str, Any]:
    data: dict[str, Any] = {"call_id": outcome.tool_call_id, "tool": outcome.tool_name}
    if outcome.output is not None:
        out = outcome.output
        data["output"] = {
            "inline": out.inline,
            "ref": _ref_to_json(out.ref) if out.ref else None,
            "digest": out.digest,
            "type": out.result_type,
            "redacted": out.redacted,
        }
    elif outcome.error is not None:
        data["error"] = error_to_json(outcome.error)
    elif outcome.pending is not None:
        data["pending"] = pending_to_json(outcome.pending)
    s = outcome.stats
    data["stats"] = [s.attempts, s.duration_ms, s.replayed, s.output_bytes]
    if outcome.correction is not None:
        data["corr"] = outcome.correction.to_json()
    return data


def outcome_from_json(data: dict[str, Any]) -> ToolOutcome:
    output = error = pending = None
    if "output" in data:
        o = data["output"]
        output = ToolOutput(
            inline=o.get("inline"),
            ref=_ref_from_json(o["ref"]) if o.get("ref") else None,
            digest=o.get("digest", ""),
            result_type=o.get("type", ""),
            redacted=bool(o.get("redacted", False)),
        )
    elif "error" in data:
        error = error_from_json(data["error"])
    else:
        pending = pending_from_json(data["pending"])
    attempts, duration_ms, replayed, output_bytes = data.get("stats", [0, 0.0, False, 0])
    return ToolOutcome(
        tool_call_id=data["call_id"],
        tool_name=data["tool"],
        output=output,
        error=error,
        pending=pending,
        stats=ExecStats(int(attempts), float(duration_ms), bool(replayed), int(output_bytes)),
        correction=Correction.from_json(data["corr"]) if "corr" in data else None,
    )


def reply_to_json(reply: ModelReply) -> dict[str, Any]:
    return {
        "text": reply.text,
        "calls": [c.to_json() for c in reply.tool_calls],
        "usage": reply.usage.to_json(),
        "model": reply.model,
        "finish": reply.finish_reason,
    }


def reply_from_json(data: dict[str, Any]) -> ModelReply:
    return ModelReply(
        text=data.get("text", ""),
        tool_calls=tuple(ToolCall.from_json(c) for c in data.get("calls", [])),
        usage=Usage.from_json(data.get("usage")),
        model=data.get("model", ""),
        finish_reason=data.get("finish", ""),
    )


def event_to_json(event: TaskEvent) -> str:
    """The event as stored in the task's stream (sequence and task id live in the stream itself)."""
    data: dict[str, Any] = {"k": int(event.kind), "t": event.time_ms, "s": int(event.status), "n": event.step}
    if event.message:
        data["m"] = event.message
    if event.tool_call is not None:
        data["call"] = event.tool_call.to_json()
    if event.tool_result is not None:
        data["result"] = outcome_to_json(event.tool_result)
    if event.error is not None:
        data["error"] = error_to_json(event.error)
    if event.pending_approval is not None:
        data["pending"] = pending_to_json(event.pending_approval)
    if event.usage is not None:
        data["usage"] = event.usage.to_json()
    if event.attributes:
        data["attrs"] = event.attributes
    if event.output_json:
        data["out"] = event.output_json
    return _COMPACT.encode(data)


_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
"""`json.dumps(..., ensure_ascii=False, separators=(",", ":"))` without building an encoder per call:
a task writes a dozen events (issue 45)."""


def event_from_json(task_id: str, sequence: int, text: str | bytes) -> TaskEvent:
    return event_from_dict(task_id, sequence, json.loads(text))


def event_from_dict(task_id: str, sequence: int, data: dict[str, Any]) -> TaskEvent:
    """An event as `event_to_json` stored it, decoded already (one of a packed entry's, events.py)."""
    return TaskEvent(
        task_id=task_id,
        sequence=sequence,
        kind=EventKind(data["k"]),
        time_ms=int(data["t"]),
        status=TaskStatus(data.get("s", 0)),
        step=int(data.get("n", 0)),
        message=data.get("m", ""),
        tool_call=ToolCall.from_json(data["call"]) if "call" in data else None,
        tool_result=outcome_from_json(data["result"]) if "result" in data else None,
        error=error_from_json(data["error"]) if "error" in data else None,
        pending_approval=pending_from_json(data["pending"]) if "pending" in data else None,
        usage=Usage.from_json(data["usage"]) if "usage" in data else None,
        attributes=dict(data.get("attrs", {})),
        output_json=data.get("out", ""),
    )
