"""The state of one run of one task on this replica, and how a run ends (see loop.py).

`RunState` holds what every part of a run reads and writes: the task record and its cursor, the
agent, the fence, usage, status, the tools seen. The parts are mixins stacked on it, each in its
own module: `checkpoints.Checkpoints` (fenced commits of the cursor and events),
`calls.DownstreamCalls` (the other services, with retries and exactly-once appends),
`steps.Steps` (the step logic: setup, think, act, the error-class policy, the exits).
"""

from __future__ import annotations

import asyncio
import enum
from typing import TYPE_CHECKING

from agentmesh.chat import Usage
from agentmesh.errors import AgentmeshError
from dispatcher_svc.agents import AgentConfig
from dispatcher_svc.lease import Lease
from dispatcher_svc.model import TaskStatus
from dispatcher_svc.ports import ToolInfo
from dispatcher_svc.tasks import Cursor, TaskRecord

if TYPE_CHECKING:
    from dispatcher_svc.loop import AgentLoop

_CLIP = 160


class RunResult(enum.Enum):
    FINISHED = "finished"
    """A terminal status was committed."""
    PARKED = "parked"
    """WAITING_APPROVAL: the task leaves the queue until ResolveApproval (or, once the approval
    expired, the dispatcher's expiry sweeper) re-enqueues it."""
    STALE = "stale"
    """Another owner took over (a reclaim, or a cancellation): this run stops writing."""


class Stop(Exception):
    """Ends a run with `result` (raised by the exits: succeed, fail, abort, park)."""

    def __init__(self, result: RunResult) -> None:
        super().__init__(result.value)
        self.result = result


def clip(text: str, limit: int = _CLIP) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class RunState:
    """The state of one run of one task on this replica."""

    def __init__(self, loop: AgentLoop, record: TaskRecord, agent: AgentConfig, lease: Lease | None) -> None:
        self.loop = loop
        self.lease = lease
        self.settings = loop.settings
        self.ports = loop.ports
        self.record = record
        self.cursor: Cursor = record.cursor
        self.agent = agent
        self.fence = record.fence
        self.usage: Usage = record.usage
        self.status = TaskStatus.RUNNING
        self.error: AgentmeshError | None = None
        self.deadline_ms = record.create_time_ms + int(self.settings.task_timeout_s * 1000)
        self._token = ""
        self._token_at = 0.0
        self._tools_seen: dict[str, ToolInfo] = {}
        self._all_tools: list[ToolInfo] | None = None
        self._discovered: list[ToolInfo] | None = None
        # A step-start checkpoint still on its way to Redis (see `checkpoint_behind`).
        self._in_flight: asyncio.Task[None] | None = None
        # The step's provider request (prompts.py), written by the commit that checkpoints its reply.
        self._prompt: tuple[int, bytes] | None = None
