"""Typed views of the dispatcher's messages: task events, tasks and agents.

Every `TaskEvent` of a task's stream becomes one event dataclass named after its kind (`Step`,
`ToolCall`, `Answer`, `StatusChanged`, ...). All share `task_id`, `sequence` (contiguous from 1 per
task), `step`, `status`, `message`, `time` and `raw` (the `agentmesh.v1.TaskEvent` message itself, for
anything this module does not lift out). Heartbeats are never yielded.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from agentmesh_client._v1 import common_pb2, dispatcher_pb2

__all__ = [
    "Agent",
    "Answer",
    "ApprovalRequired",
    "ApprovalResolved",
    "ClaimCheck",
    "ContextBuilt",
    "Correction",
    "Event",
    "Failure",
    "Fallback",
    "Handoff",
    "Incident",
    "ModelReply",
    "StatusChanged",
    "Step",
    "Task",
    "TaskStatus",
    "ToolCall",
    "ToolResult",
    "UnknownEvent",
    "Usage",
    "to_event",
]

D = dispatcher_pb2


class TaskStatus(StrEnum):
    """The lifecycle of a task (agentmesh.v1.TaskStatus without its prefix)."""

    UNSPECIFIED = "UNSPECIFIED"
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    WAITING_APPROVAL = "WAITING_APPROVAL"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    ABORTED = "ABORTED"
    CANCELLED = "CANCELLED"
    HANDED_OFF = "HANDED_OFF"
    """A transfer handoff moved the work to `Task.child_task_id` (terminal)."""
    WAITING_CHILD = "WAITING_CHILD"
    """Waiting for the task an ask handoff delegated to (`Task.child_task_id`)."""

    @property
    def terminal(self) -> bool:
        """Whether the task has ended (FAILED ends it until someone resumes it)."""
        return self in _TERMINAL

    @classmethod
    def of(cls, value: int) -> TaskStatus:
        try:
            return cls(D.TaskStatus.Name(value).removeprefix("TASK_STATUS_"))
        except ValueError:
            return cls.UNSPECIFIED


_TERMINAL = frozenset(
    {TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.ABORTED, TaskStatus.CANCELLED, TaskStatus.HANDED_OFF}
)


def _name(enum: Any, value: int, prefix: str) -> str:
    try:
        return str(enum.Name(value)).removeprefix(prefix)
    except ValueError:
        return str(value)


@dataclass(frozen=True)
class Usage:
    """Tokens spent."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0

    @classmethod
    def of(cls, usage: common_pb2.TokenUsage) -> Usage:
        return cls(usage.input_tokens, usage.output_tokens, usage.total_tokens)


@dataclass(frozen=True)
class Failure:
    """A typed error a task or tool call ended with (an `agentmesh.v1.ErrorDetail`, lifted)."""

    code: str
    """agentmesh's error code, e.g. "SCHEMA_INVALID" or "BUDGET_EXHAUSTED"."""
    error_class: str
    """"CONTRACT", "ENGINEERING" or "FATAL"."""
    message: str
    retryable: bool
    detail: common_pb2.ErrorDetail = field(repr=False)

    @classmethod
    def of(cls, detail: common_pb2.ErrorDetail) -> Failure:
        return cls(
            code=_name(common_pb2.ErrorCode, detail.code, "ERROR_CODE_"),
            error_class=_name(common_pb2.ErrorClass, detail.error_class, "ERROR_CLASS_"),
            message=detail.message,
            retryable=detail.retryable,
            detail=detail,
        )


def _failure(message: Any, name: str = "error") -> Failure | None:
    return Failure.of(getattr(message, name)) if message.HasField(name) else None


@dataclass(frozen=True, kw_only=True)
class Event:
    """What every event has (module docstring)."""

    task_id: str
    sequence: int
    step: int
    status: TaskStatus
    message: str
    time: datetime | None
    raw: dispatcher_pb2.TaskEvent = field(repr=False, compare=False)


@dataclass(frozen=True, kw_only=True)
class StatusChanged(Event):
    """The task's status changed; `error` says why a task FAILED or was ABORTED."""

    error: Failure | None

    @property
    def terminal(self) -> bool:
        return self.status.terminal


@dataclass(frozen=True, kw_only=True)
class Step(Event):
    """A step of the agent loop began."""


@dataclass(frozen=True, kw_only=True)
class ContextBuilt(Event):
    """The step's context was built; `attributes` holds its token counts."""

    usage: Usage
    attributes: Mapping[str, str]


@dataclass(frozen=True, kw_only=True)
class ModelReply(Event):
    """The model replied (text and/or tool calls)."""

    usage: Usage


@dataclass(frozen=True, kw_only=True)
class ToolCall(Event):
    """A tool call is about to run."""

    call_id: str
    name: str
    arguments_json: str

    def arguments(self) -> Any:
        """The arguments, parsed (raises ValueError when the model's JSON is invalid)."""
        return json.loads(self.arguments_json)


@dataclass(frozen=True, kw_only=True)
class ToolResult(Event):
    """A tool call's outcome: `output` (inline text) or `error`; the message has the rest."""

    call_id: str
    name: str
    output: str | None
    error: Failure | None
    result: common_pb2.ToolResult = field(repr=False, compare=False)


@dataclass(frozen=True, kw_only=True)
class Correction(Event):
    """A CONTRACT error of a tool call was fed back to the model."""

    call_id: str
    name: str
    error: Failure | None


@dataclass(frozen=True, kw_only=True)
class Fallback(Event):
    """An ENGINEERING failure of a tool call was noted; the fallback is offered to the model."""

    call_id: str
    name: str
    error: Failure | None


@dataclass(frozen=True, kw_only=True)
class ApprovalRequired(Event):
    """A tool call waits for a human: resolve it with `Client.resolve_approval(task_id, approval_id,
    approve=..., arguments_sha256=...)` (with another identity than the task's creator)."""

    approval_id: str
    tool: str
    arguments_json: str
    impact: str
    arguments_sha256: str
    kind: str
    """"CALL", "REGISTER_TOOL" or "SETTLEMENT"."""
    pending: common_pb2.PendingApproval = field(repr=False, compare=False)


@dataclass(frozen=True, kw_only=True)
class ApprovalResolved(Event):
    """An approval was resolved."""


@dataclass(frozen=True, kw_only=True)
class Incident(Event):
    """A FATAL error stopped the task."""

    error: Failure | None


@dataclass(frozen=True, kw_only=True)
class Answer(Event):
    """The final answer (`text`); for a task with an output schema, `output` is the answer parsed from
    JSON (`output_json`), else None."""

    text: str
    output: Any = None
    output_json: str = ""


@dataclass(frozen=True, kw_only=True)
class ClaimCheck(Event):
    """The final answer's claims checked against the task's tool calls: `verdict` (supported,
    unsupported, warned), the `claims` found and the `gap` (what no successful call backs)."""

    verdict: str
    claims: str
    gap: str


@dataclass(frozen=True, kw_only=True)
class Handoff(Event):
    """A handoff between two tasks (in both tasks' streams): `mode` transfer, ask, or answer (the
    delegate's answer back), the two task ids, and the hop summary's `hop_tokens`."""

    mode: str
    parent_task_id: str
    child_task_id: str
    hop_tokens: int
    attributes: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class UnknownEvent(Event):
    """An event of a kind newer than this client (`kind` is its enum number)."""

    kind: int


def _base(event: dispatcher_pb2.TaskEvent) -> dict[str, Any]:
    return {
        "task_id": event.task_id,
        "sequence": event.sequence,
        "step": event.step,
        "status": TaskStatus.of(event.status),
        "message": event.message,
        "time": event.time.ToDatetime() if event.HasField("time") else None,
        "raw": event,
    }


def to_event(event: dispatcher_pb2.TaskEvent) -> Event:
    """The typed form of one TaskEvent (not a heartbeat)."""
    base = _base(event)
    kind = event.kind
    call = event.tool_call
    if kind == D.TASK_EVENT_KIND_STATUS:
        return StatusChanged(**base, error=_failure(event))
    if kind == D.TASK_EVENT_KIND_STEP_STARTED:
        return Step(**base)
    if kind == D.TASK_EVENT_KIND_CONTEXT:
        return ContextBuilt(**base, usage=Usage.of(event.usage), attributes=dict(event.attributes))
    if kind == D.TASK_EVENT_KIND_MODEL_REPLY:
        return ModelReply(**base, usage=Usage.of(event.usage))
    if kind == D.TASK_EVENT_KIND_TOOL_CALL:
        return ToolCall(**base, call_id=call.id, name=call.name, arguments_json=call.arguments_json)
    if kind == D.TASK_EVENT_KIND_TOOL_RESULT:
        result = event.tool_result
        output = result.output.inline if result.HasField("output") and result.output.HasField("inline") else None
        return ToolResult(
            **base,
            call_id=result.tool_call_id,
            name=result.tool_name,
            output=output,
            error=_failure(result) or _failure(event),
            result=result,
        )
    if kind in (D.TASK_EVENT_KIND_CORRECTION, D.TASK_EVENT_KIND_FALLBACK):
        kind_type = Correction if kind == D.TASK_EVENT_KIND_CORRECTION else Fallback
        return kind_type(**base, call_id=call.id, name=call.name, error=_failure(event))
    if kind == D.TASK_EVENT_KIND_APPROVAL_REQUIRED:
        pending = event.pending_approval
        return ApprovalRequired(
            **base,
            approval_id=pending.approval_id,
            tool=pending.plan.name,
            arguments_json=pending.plan.arguments_json,
            impact=pending.impact,
            arguments_sha256=pending.arguments_sha256,
            kind=_name(common_pb2.ApprovalKind, pending.kind, "APPROVAL_KIND_"),
            pending=pending,
        )
    if kind == D.TASK_EVENT_KIND_APPROVAL_RESOLVED:
        return ApprovalResolved(**base)
    if kind == D.TASK_EVENT_KIND_INCIDENT:
        return Incident(**base, error=_failure(event))
    if kind == D.TASK_EVENT_KIND_ANSWER:
        return Answer(**base, text=event.message, output=parse_output(event.output_json), output_json=event.output_json)
    if kind == D.TASK_EVENT_KIND_CLAIM_CHECK:
        attrs = event.attributes
        return ClaimCheck(
            **base, verdict=attrs.get("verdict", ""), claims=attrs.get("claims", ""), gap=attrs.get("gap", "")
        )
    if kind == D.TASK_EVENT_KIND_HANDOFF:
        attrs = event.attributes
        return Handoff(
            **base,
            mode=attrs.get("mode", ""),
            parent_task_id=attrs.get("parent_task_id", ""),
            child_task_id=attrs.get("child_task_id", ""),
            hop_tokens=int(attrs.get("hop_tokens", "0") or 0),
            attributes=dict(attrs),
        )
    return UnknownEvent(**base, kind=int(kind))


@dataclass(frozen=True)
class Task:
    """A task as GetTask, CancelTask and ResolveApproval return it."""

    task_id: str
    agent_id: str
    goal: str
    status: TaskStatus
    step: int
    answer: str
    error: Failure | None
    session_id: str
    request_id: str
    last_sequence: int
    created_by: str
    usage: Usage
    raw: dispatcher_pb2.Task = field(repr=False, compare=False)
    output: Any = None
    """The typed answer (a task with an output schema): parsed from `output_json`, or an instance of the
    pydantic model the caller passed (`output_type`); None for free-text answers."""
    output_json: str = ""
    parent_task_id: str = ""
    """The task whose handoff created this one ("" for a task a client started)."""
    root_task_id: str = ""
    """The first task of its handoff tree."""
    child_task_id: str = ""
    """The task it handed off to (HANDED_OFF) or waits for (WAITING_CHILD)."""

    @classmethod
    def of(cls, task: dispatcher_pb2.Task, output_type: Any = None) -> Task:
        return cls(
            task_id=task.task_id,
            agent_id=task.agent_id,
            goal=task.goal,
            status=TaskStatus.of(task.status),
            step=task.step,
            answer=task.answer,
            error=_failure(task),
            session_id=task.session_id,
            request_id=task.request_id,
            last_sequence=task.last_sequence,
            created_by=task.created_by,
            usage=Usage.of(task.usage),
            raw=task,
            output=parse_output(task.output_json, output_type),
            output_json=task.output_json,
            parent_task_id=task.parent_task_id,
            root_task_id=task.root_task_id,
            child_task_id=task.child_task_id,
        )


def parse_output(text: str, output_type: Any = None) -> Any:
    """A typed answer's JSON as a value, or as `output_type` (a pydantic model class: its
    `model_validate_json`); None when there is none."""
    if not text:
        return None
    if output_type is not None and hasattr(output_type, "model_validate_json"):
        return output_type.model_validate_json(text)
    return json.loads(text)


def output_schema_json(output_schema: Any) -> str:
    """The JSON Schema text of `output_schema`: a mapping (a JSON Schema), JSON text, or a pydantic model
    class (its `model_json_schema()`)."""
    if output_schema is None:
        return ""
    if isinstance(output_schema, str):
        return output_schema
    if hasattr(output_schema, "model_json_schema"):
        return json.dumps(output_schema.model_json_schema())
    return json.dumps(dict(output_schema))


@dataclass(frozen=True)
class Agent:
    """A configured agent the caller may run."""

    agent_id: str
    description: str
    model: str
    tools: tuple[str, ...]
    capabilities: tuple[str, ...]
    token_budget: int
    max_steps: int

    @classmethod
    def of(cls, agent: dispatcher_pb2.Agent) -> Agent:
        return cls(
            agent_id=agent.agent_id,
            description=agent.description,
            model=agent.model,
            tools=tuple(agent.tools),
            capabilities=tuple(agent.capabilities),
            token_budget=agent.token_budget,
            max_steps=agent.max_steps,
        )
