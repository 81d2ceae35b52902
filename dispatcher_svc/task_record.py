"""A task as stored: its record (the hash, parsed), its cursor and tool calls, the hash fields a
commit writes, and the errors of a fenced write. The store itself is `dispatcher_svc.tasks`."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentmesh.chat import ToolCall, Usage
from agentmesh.errors import (
    AgentmeshError,
    FailedPreconditionError,
    NotFoundError,
    Violation,
    echo,
    error_from_json,
    error_to_json,
)
from dispatcher_svc.model import CallStage, ModelReply, PendingApproval, Phase, Task, TaskStatus, ToolOutcome
from dispatcher_svc.model_json import (
    outcome_from_json,
    outcome_to_json,
    pending_from_json,
    pending_to_json,
    reply_from_json,
    reply_to_json,
)


class StaleOwnerError(FailedPreconditionError):
    """A write carried an old fencing number: another replica owns the task now."""


class WrongStatusError(FailedPreconditionError):
    """A write expected the task in another status (e.g. resolving an approval twice)."""

    def __init__(self, message: str, status: TaskStatus) -> None:
        super().__init__(message, metadata={"status": status.name})
        self.status = status


class TaskExistsError(FailedPreconditionError):
    """A task with this id exists already."""


def task_not_found(task_id: str) -> NotFoundError:
    return NotFoundError(
        f"task_id: no task {echo(task_id)!r}",
        violations=[Violation(path="task_id", rule="exists", actual=repr(echo(task_id)))],
        metadata={"field": "task_id", "task_id": task_id},
    )


STATUS_FIELDS = ("status", "last_sequence")

RECORD_FIELDS = (
    "task_id", "agent_id", "goal", "status", "fence", "step", "usage", "answer", "error", "session_id",
    "request_id", "traceparent", "token_budget", "max_steps", "create_ms", "update_ms", "last_sequence",
    "owner", "lease_until", "runs", "pending", "cursor", "creator", "creator_agent", "output_schema",
    "output_json", "parent_task_id", "root_task_id", "child_task_id", "depth", "hops", "answer_to",
    "deadline_ms",
)  # fmt: skip
"""The hash fields a TaskRecord is made of: the acquire script reads exactly these (issue 45: one
HMGET instead of HMGET and HGETALL), and `TaskRecord.from_hash` reads nothing else."""
_RECORD_FIELD_SET = frozenset(RECORD_FIELDS)
"""The hash fields of a light status read (`parse_status`)."""


def parse_status(task_id: str, raw: Sequence[bytes | None]) -> tuple[TaskStatus, int]:
    """The status and last sequence from an HMGET of STATUS_FIELDS; NotFoundError naming task_id."""
    if raw[0] is None:
        raise task_not_found(task_id)
    return TaskStatus(int(raw[0])), int(raw[1] or 0)


# --- the checkpoint ---------------------------------------------------------------------------------


@dataclass
class CallState:
    """One tool call of the current reply, as far as it got.

    Its stage (CallStage): new -> running (TOOL_CALL committed; may have been sent) -> done
    (outcome committed) -> appended (its result is in the session log); waiting = parked on an
    approval.
    """

    call: ToolCall
    state: CallStage = CallStage.NEW
    outcome: ToolOutcome | None = None
    resolved: ToolOutcome | None = None
    """An outcome delivered by ResolveApproval, not yet handled by the loop."""
    note: str = ""
    """The text note of a checkpoint written before corrections were typed (ToolOutcome.correction):
    kept, and written back, so such records stay readable; never shown to the model again."""

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"call": self.call.to_json(), "state": self.state.value}
        if self.outcome is not None:
            data["outcome"] = outcome_to_json(self.outcome)
        if self.resolved is not None:
            data["resolved"] = outcome_to_json(self.resolved)
        if self.note:
            data["note"] = self.note
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CallState:
        return cls(
            call=ToolCall.from_json(data["call"]),
            state=CallStage(data.get("state", "new")),
            outcome=outcome_from_json(data["outcome"]) if "outcome" in data else None,
            resolved=outcome_from_json(data["resolved"]) if "resolved" in data else None,
            note=data.get("note", ""),
        )


@dataclass
class Cursor:
    """Where the task's loop is: enough to resume it on any replica without repeating a side effect."""

    phase: Phase = Phase.INIT
    """init (no session yet) | thinking (step started, no reply) | acting (reply checkpointed)."""
    step: int = 0
    ctx_count: int = 0
    """Messages known to be in the session log; an append is detected after a crash by comparing."""
    reply: ModelReply | None = None
    reply_appended: bool = False
    calls: list[CallState] = field(default_factory=list)
    signatures: dict[str, int] = field(default_factory=dict)
    """Times each (tool, arguments) was issued: loop detection."""
    contract_failures: dict[str, int] = field(default_factory=dict)
    """Consecutive CONTRACT failures per tool: reflective retries used."""
    failed: dict[str, str] = field(default_factory=dict)
    """(tool, arguments) that failed with ENGINEERING -> code: never re-issued."""
    pinned: list[str] = field(default_factory=list)
    """Tools offered on every later step (fallbacks, read_payload after an offload)."""
    raw_tokens: int = 0
    """Tokens the session would hold had every tool output been appended raw (for the comparison)."""
    ledger: dict[str, list[Any]] = field(default_factory=dict)
    """The task's action ledger: tool_call_id -> [tool, result, write] for every call that got an outcome
    (result OK, an error code's name, or APPROVAL_REQUIRED while it waits), in call order."""
    answer_corrections: int = 0
    """Final answers sent back for breaking the output schema (at most 2, then OUTPUT_INVALID)."""
    claim_corrections: int = 0
    verify_rejections: int = 0
    """Handoffs a verifier rejected (`verify_with:`): one goes back to the model, the next fails the task."""
    """Final answers sent back for an unsupported claim (at most 1, then CLAIM_UNSUPPORTED)."""
    fix: str = ""
    """In phase CORRECTING: the correction the model reads after its rejected answer (`reply`)."""

    def to_json(self) -> str:
        data: dict[str, Any] = {
            "phase": self.phase.value,
            "step": self.step,
            "ctx": self.ctx_count,
            "reply": reply_to_json(self.reply) if self.reply is not None else None,
            "reply_appended": self.reply_appended,
            "calls": [c.to_json() for c in self.calls],
            "sigs": self.signatures,
            "contract": self.contract_failures,
            "failed": self.failed,
            "pinned": self.pinned,
            "raw": self.raw_tokens,
        }
        # Written only once used: a checkpoint of a task without them reads as before.
        if self.ledger:
            data["ledger"] = self.ledger
        if self.answer_corrections:
            data["answer_fix"] = self.answer_corrections
        if self.claim_corrections:
            data["claim_fix"] = self.claim_corrections
        if self.verify_rejections:
            data["verify_fix"] = self.verify_rejections
        if self.fix:
            data["fix"] = self.fix
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Cursor:
        if not text:
            return cls()
        data = json.loads(text)
        return cls(
            phase=Phase(data.get("phase", "init")),
            step=int(data.get("step", 0)),
            ctx_count=int(data.get("ctx", 0)),
            reply=reply_from_json(data["reply"]) if data.get("reply") else None,
            reply_appended=bool(data.get("reply_appended", False)),
            calls=[CallState.from_json(c) for c in data.get("calls", [])],
            signatures={k: int(v) for k, v in data.get("sigs", {}).items()},
            contract_failures={k: int(v) for k, v in data.get("contract", {}).items()},
            failed=dict(data.get("failed", {})),
            pinned=list(data.get("pinned", [])),
            raw_tokens=int(data.get("raw", 0)),
            ledger={str(k): list(v) for k, v in data.get("ledger", {}).items()},
            answer_corrections=int(data.get("answer_fix", 0)),
            claim_corrections=int(data.get("claim_fix", 0)),
            verify_rejections=int(data.get("verify_fix", 0)),
            fix=str(data.get("fix", "")),
        )


# --- the task record ------------------------------------------------------------------------------


@dataclass
class TaskRecord:
    """Everything stored for a task (the hash, parsed)."""

    task_id: str
    agent_id: str
    goal: str
    status: TaskStatus
    fence: int = 0
    step: int = 0
    usage: Usage = field(default_factory=Usage)
    answer: str = ""
    error: AgentmeshError | None = None
    session_id: str = ""
    request_id: str = ""
    traceparent: str = ""
    token_budget: int = 0
    max_steps: int = 0
    create_time_ms: int = 0
    update_time_ms: int = 0
    last_sequence: int = 0
    owner: str = ""
    lease_until_ms: int = 0
    runs: int = 0
    pending: PendingApproval | None = None
    cursor: Cursor = field(default_factory=Cursor)
    creator: str = ""
    """The subject of the token that started the task; "" for a task stored before creators were
    recorded (such a task is for operators only: dispatcher_svc/access.py)."""
    creator_agent: str = ""
    """The agent id of that token when it was an agent's ("" for operators and old tasks)."""
    output_schema: str = ""
    """The JSON Schema the final answer follows, as JSON text (the agent's narrowed by the task's at
    StartTask); "" for free-text answers."""
    output_json: str = ""
    """The final answer as JSON text, when SUCCEEDED with an output schema."""
    parent_task_id: str = ""
    """The task whose handoff created this one (dispatcher_svc/handoffs.py); "" for a client's task."""
    root_task_id: str = ""
    """The first task of its handoff tree; "" reads as the task's own id."""
    child_task_id: str = ""
    """The task it handed off to (HANDED_OFF) or waits for (WAITING_CHILD)."""
    depth: int = 0
    """Handoffs from the root to this task."""
    hops: str = ""
    """The agents of the handoff chain from the root to this task, comma-separated (the cycle guard)."""
    answer_to: str = ""
    """The task waiting (WAITING_CHILD) for this one's answer: an ask's parent, kept across transfers."""
    deadline_ms: int = 0
    """The root's deadline a handoff's task inherits (0: its own create time + dispatcher.task_timeout_s)."""

    @property
    def root(self) -> str:
        """The root of its handoff tree (its own id when no handoff created it)."""
        return self.root_task_id or self.task_id

    def view(self) -> Task:
        return Task(
            task_id=self.task_id,
            agent_id=self.agent_id,
            goal=self.goal,
            status=self.status,
            step=self.step,
            usage=self.usage,
            answer=self.answer,
            error=self.error,
            session_id=self.session_id,
            request_id=self.request_id,
            pending_approval=self.pending,
            last_sequence=self.last_sequence,
            create_time_ms=self.create_time_ms,
            update_time_ms=self.update_time_ms,
            created_by=self.creator,
            output_json=self.output_json,
            output_schema_json=self.output_schema,
            parent_task_id=self.parent_task_id,
            root_task_id=self.root,
            child_task_id=self.child_task_id,
        )

    @classmethod
    def from_hash(cls, raw: Mapping[bytes, bytes]) -> TaskRecord:
        # Only RECORD_FIELDS: a field read here but missing there would be lost on every acquire.
        h = {k.decode(): v.decode("utf-8", "replace") for k, v in raw.items() if k.decode() in _RECORD_FIELD_SET}

        def num(name: str) -> int:
            value = h.get(name, "")
            return int(value) if value else 0

        usage = h.get("usage", "")
        error = h.get("error", "")
        pending = h.get("pending", "")
        return cls(
            task_id=h.get("task_id", ""),
            agent_id=h.get("agent_id", ""),
            goal=h.get("goal", ""),
            status=TaskStatus(num("status")),
            fence=num("fence"),
            step=num("step"),
            usage=Usage(*(int(x) for x in usage.split(","))) if usage else Usage(),
            answer=h.get("answer", ""),
            error=error_from_json(json.loads(error)) if error else None,
            session_id=h.get("session_id", ""),
            request_id=h.get("request_id", ""),
            traceparent=h.get("traceparent", ""),
            token_budget=num("token_budget"),
            max_steps=num("max_steps"),
            create_time_ms=num("create_ms"),
            update_time_ms=num("update_ms"),
            last_sequence=num("last_sequence"),
            owner=h.get("owner", ""),
            lease_until_ms=num("lease_until"),
            runs=num("runs"),
            pending=pending_from_json(json.loads(pending)) if pending else None,
            cursor=Cursor.from_json(h.get("cursor", "")),
            creator=h.get("creator", ""),
            creator_agent=h.get("creator_agent", ""),
            output_schema=h.get("output_schema", ""),
            output_json=h.get("output_json", ""),
            parent_task_id=h.get("parent_task_id", ""),
            root_task_id=h.get("root_task_id", ""),
            child_task_id=h.get("child_task_id", ""),
            depth=num("depth"),
            hops=h.get("hops", ""),
            answer_to=h.get("answer_to", ""),
            deadline_ms=num("deadline_ms"),
        )


def fields_of(
    *,
    status: TaskStatus | None = None,
    step: int | None = None,
    usage: Usage | None = None,
    answer: str | None = None,
    error: AgentmeshError | bool | None = False,
    pending: PendingApproval | bool | None = False,
    cursor: Cursor | None = None,
    update_ms: int | None = None,
    **extra: str | int,
) -> dict[str, str]:
    """Hash fields for a commit; `error=None` / `pending=None` clear them, False leaves them."""
    out: dict[str, str] = {k: str(v) for k, v in extra.items()}
    if status is not None:
        out["status"] = str(int(status))
    if step is not None:
        out["step"] = str(step)
    if usage is not None:
        out["usage"] = f"{usage.input_tokens},{usage.output_tokens}"
    if answer is not None:
        out["answer"] = answer
    if error is not False:
        out["error"] = json.dumps(error_to_json(error), ensure_ascii=False) if isinstance(error, AgentmeshError) else ""
    if pending is not False:
        out["pending"] = json.dumps(pending_to_json(pending)) if isinstance(pending, PendingApproval) else ""
    if cursor is not None:
        out["cursor"] = cursor.to_json()
    if update_ms is not None:
        out["update_ms"] = str(update_ms)
    return out
