"""What a phase returns: the run's next step (a small union), and how a run ends (RunResult).

Control flow is a value: a phase returns `Continue` (the cursor names the phase that comes next)
or an exit, which `exits.finish` carries out. Exceptions mean errors; the loop turns the two that
end a run (a downstream call failed for good, a stale fence) into `Fail` and `Stale`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from agentmesh.chat import ToolCall
from agentmesh.errors import AgentmeshError
from dispatcher_svc.model import ModelReply, PendingApproval, Phase, TaskEvent


class RunResult(enum.Enum):
    FINISHED = "finished"
    """A terminal status was committed."""
    PARKED = "parked"
    """WAITING_APPROVAL: the task leaves the queue until ResolveApproval (or, once the approval
    expired, the dispatcher's expiry sweeper) re-enqueues it; WAITING_CHILD: until the task an ask
    handoff delegated to ends (handoff_answers.py)."""
    STALE = "stale"
    """Another owner took over (a reclaim, or a cancellation): this run stops writing."""


@dataclass(frozen=True)
class Continue:
    """Go on with `phase` (the cursor says so already: it is what a resumed run reads)."""

    phase: Phase


@dataclass(frozen=True)
class Park:
    """Park the task in WAITING_APPROVAL on `pending` (for `call`). Always a write: a run holds its
    task RUNNING, and a run that ended without writing would leave it so for good (chaos-1-6-170)."""

    pending: PendingApproval
    call: ToolCall


@dataclass(frozen=True)
class Succeed:
    """The final answer: commit SUCCEEDED with `reply`'s text after the events in `prefix`."""

    reply: ModelReply
    prefix: tuple[TaskEvent, ...] = ()
    output_json: str = ""
    """With an output schema: the answer's JSON (Task.output_json)."""
    answer: str = ""
    """With an output schema: the rendering for humans (Task.answer); "" keeps the reply's text."""


@dataclass(frozen=True)
class Fail:
    """Commit FAILED with `error` after the events in `prefix` (resumable by StartTask)."""

    error: AgentmeshError
    prefix: tuple[TaskEvent, ...] = ()


@dataclass(frozen=True)
class Abort:
    """Commit ABORTED with `error` and an incident after the events in `prefix` (a human decides)."""

    error: AgentmeshError
    prefix: tuple[TaskEvent, ...] = ()


@dataclass(frozen=True)
class HandOff:
    """A transfer handoff (issue 44): commit HANDED_OFF naming `child_task_id`, created already, after
    the events in `prefix`."""

    child_task_id: str
    to_agent: str
    prefix: tuple[TaskEvent, ...] = ()


@dataclass(frozen=True)
class WaitChild:
    """An ask handoff: park in WAITING_CHILD on `child_task_id` (created already) after `prefix`; its
    answer comes back as `call`'s outcome."""

    child_task_id: str
    call: ToolCall
    prefix: tuple[TaskEvent, ...] = ()


@dataclass(frozen=True)
class Stale:
    """Another owner has the task: stop without writing."""

    reason: str = ""


Exit = Park | Succeed | Fail | Abort | HandOff | WaitChild | Stale
"""A step that ends the run."""

NextStep = Continue | Exit
"""What every phase returns."""
