"""The dispatcher's domain vocabulary: tasks, events, tool calls and outcomes, as plain Python.

These mirror the agentmesh.v1 messages the dispatcher speaks (server.py and adapters.py map them),
and serialise to compact JSON for the task checkpoint and the event log in Redis. No grpc, no
protobuf here.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field, replace
from typing import Any

from agentmesh.chat import Correction, ToolCall, Usage
from agentmesh.errors import AgentmeshError, error_from_json, error_to_json


class Phase(enum.StrEnum):
    """Where a run of a task is (Cursor.phase; the value is what the checkpoint stores)."""

    INIT = "init"
    """The session is not set up yet."""
    THINKING = "thinking"
    """A step has started: context, tools and the model's reply come next."""
    ACTING = "acting"
    """The reply is checkpointed: its tool calls run in order."""
    CORRECTING = "correcting"
    """A final answer was sent back (output schema or claims, issue 41): the cursor holds it and the
    correction; both are appended to the session, then the next step starts."""


class CallStage(enum.StrEnum):
    """Where one tool call of a step is (CallState.state; the value is what the checkpoint stores).

    new -> running (TOOL_CALL committed; may have been sent) -> done (outcome committed) ->
    appended (its result is in the session log); waiting = parked on an approval.
    """

    NEW = "new"
    RUNNING = "running"
    DONE = "done"
    APPENDED = "appended"
    WAITING = "waiting"


class TaskStatus(enum.IntEnum):
    """Mirror of agentmesh.v1.TaskStatus (same numbers)."""

    UNSPECIFIED = 0
    PENDING = 1
    RUNNING = 2
    WAITING_APPROVAL = 3
    SUCCEEDED = 4
    FAILED = 5
    ABORTED = 6
    CANCELLED = 7

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL: frozenset[TaskStatus] = frozenset(
    {TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.ABORTED, TaskStatus.CANCELLED}
)


class EventKind(enum.IntEnum):
    """Mirror of agentmesh.v1.TaskEventKind (same numbers)."""

    UNSPECIFIED = 0
    HEARTBEAT = 1
    STATUS = 2
    STEP_STARTED = 3
    MODEL_REPLY = 4
    TOOL_CALL = 5
    TOOL_RESULT = 6
    CORRECTION = 7
    FALLBACK = 8
    APPROVAL_REQUIRED = 9
    APPROVAL_RESOLVED = 10
    INCIDENT = 11
    ANSWER = 12
    CONTEXT = 13
    CLAIM_CHECK = 14
    """The final answer's claims checked against the task's tool calls (issue 41)."""


@dataclass(frozen=True, slots=True)
class PayloadRef:
    """A reference to content offloaded to Redis (see agentmesh.v1.PayloadRef)."""

    ref_id: str
    session_id: str = ""
    size_bytes: int = 0
    media_type: str = ""
    sha256: str = ""
    expire_time_ms: int = 0


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """A successful tool output: inline text or a ref plus digest."""

    inline: str | None = None
    ref: PayloadRef | None = None
    digest: str = ""
    result_type: str = ""
    """"structured", "text" or "" (unspecified)."""
    redacted: bool = False


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """A write waiting for a human (see agentmesh.v1.PendingApproval)."""

    approval_id: str
    plan: ToolCall
    impact: str = ""
    arguments_sha256: str = ""
    expire_time_ms: int = 0
    requested_by: str = ""
    kind: str = "call"
    """"call", "register_tool" or "settlement" (a call whose outcome is unknown: RAN or NOT_RAN)."""

    @property
    def is_settlement(self) -> bool:
        return self.kind == "settlement"


@dataclass(frozen=True, slots=True)
class ExecStats:
    attempts: int = 0
    duration_ms: float = 0.0
    replayed: bool = False
    output_bytes: int = 0


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """The typed outcome of one tool call: exactly one of output, error, pending."""

    tool_call_id: str
    tool_name: str
    output: ToolOutput | None = None
    error: AgentmeshError | None = None
    pending: PendingApproval | None = None
    stats: ExecStats = ExecStats()
    correction: Correction | None = None
    """For an error: what the dispatcher tells the model to do next (set by the loop's policy)."""

    def __post_init__(self) -> None:
        if sum(x is not None for x in (self.output, self.error, self.pending)) != 1:
            raise ValueError("a ToolOutcome has exactly one of output, error, pending")

    @property
    def kind(self) -> str:
        return "output" if self.output is not None else "error" if self.error is not None else "pending"


@dataclass(frozen=True, slots=True)
class SentPrompt:
    """The provider request a reply answers, as provider_svc reports it sent (secrets masked)."""

    format: str
    """"openai.chat.completions" or "anthropic.messages"."""
    request_json: str
    redacted: bool = False


@dataclass(frozen=True, slots=True)
class ModelReply:
    """One model reply: text and/or tool calls."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    finish_reason: str = ""
    sent: SentPrompt | None = field(default=None, compare=False, repr=False)
    """The request it answers, when asked for (never part of the checkpoint: prompts.py keeps it)."""
    cost_usd: float = field(default=0.0, compare=False)
    """What provider_svc billed for it at its price table (not checkpointed: the MODEL_REPLY event keeps it)."""


@dataclass(frozen=True, slots=True)
class ApprovalRecord:
    """An approval as tool_svc holds it (see agentmesh.v1.Approval)."""

    request: PendingApproval | None
    state: str
    """"PENDING", "APPROVED", "DENIED", "EXPIRED" or "UNSPECIFIED"."""
    resolved_by: str = ""
    reason: str = ""
    resolve_time_ms: int = 0
    settlement: str = ""
    """For a settlement: "ran" or "not_ran"."""


@dataclass(frozen=True, slots=True)
class TaskEvent:
    """One event of a task; `sequence` is contiguous from 1 (0 for heartbeats)."""

    task_id: str
    sequence: int
    kind: EventKind
    time_ms: int
    status: TaskStatus = TaskStatus.UNSPECIFIED
    step: int = 0
    message: str = ""
    tool_call: ToolCall | None = None
    tool_result: ToolOutcome | None = None
    error: AgentmeshError | None = None
    pending_approval: PendingApproval | None = None
    usage: Usage | None = None
    attributes: dict[str, str] = field(default_factory=dict)
    output_json: str = ""
    """For ANSWER of a task with an output schema: the answer as JSON text."""

    def with_sequence(self, sequence: int) -> TaskEvent:
        return replace(self, sequence=sequence)


@dataclass(frozen=True, slots=True)
class Task:
    """The public view of a task (agentmesh.v1.Task)."""

    task_id: str
    agent_id: str
    goal: str
    status: TaskStatus
    step: int = 0
    usage: Usage = field(default_factory=Usage)
    answer: str = ""
    error: AgentmeshError | None = None
    session_id: str = ""
    request_id: str = ""
    pending_approval: PendingApproval | None = None
    last_sequence: int = 0
    create_time_ms: int = 0
    update_time_ms: int = 0
    created_by: str = ""
    """The subject that started the task ("" for tasks started before creators were recorded)."""
    output_json: str = ""
    """The final answer as JSON text, for a task with an output schema (issue 41)."""
    output_schema_json: str = ""
    """The schema the final answer follows ("" for free text)."""


# --- JSON codecs (checkpoint and event log) -----------------------------------------------------


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
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def event_from_json(task_id: str, sequence: int, text: str | bytes) -> TaskEvent:
    data = json.loads(text)
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
