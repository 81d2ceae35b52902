"""The dispatcher's domain vocabulary: tasks, events, tool calls and outcomes, as plain Python.

These mirror the agentmesh.v1 messages the dispatcher speaks (server.py and codec.py map them);
model_json.py serialises them to compact JSON for the task checkpoint and the event log in Redis.
No grpc, no protobuf here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

from agentmesh.chat import Correction, ToolCall, Usage
from agentmesh.errors import AgentmeshError


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
    HANDED_OFF = 8
    """A transfer handoff moved the work to Task.child_task_id (terminal)."""
    WAITING_CHILD = 9
    """Parked until the task an ask handoff delegated to (Task.child_task_id) ends."""

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL: frozenset[TaskStatus] = frozenset(
    {TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.ABORTED, TaskStatus.CANCELLED, TaskStatus.HANDED_OFF}
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
    HANDOFF = 15
    """A handoff between two tasks (issue 44), in both tasks' streams."""


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
    parent_task_id: str = ""
    """The task whose handoff created this one ("" for a task a client started)."""
    root_task_id: str = ""
    """The first task of its handoff tree (its own id for a task a client started)."""
    child_task_id: str = ""
    """The task it handed off to (HANDED_OFF) or waits for (WAITING_CHILD)."""
