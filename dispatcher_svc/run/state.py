"""The state of one run: a value the phases read and write, and the collaborators share."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from agentmesh.chat import Usage
from agentmesh.errors import AgentmeshError
from dispatcher_svc.agents import AgentConfig
from dispatcher_svc.model import TaskStatus, ToolOutcome
from dispatcher_svc.ports import Appended, ContextView, ToolInfo
from dispatcher_svc.tasks import Cursor, TaskRecord


@dataclass
class RunState:
    """What one run of one task knows: the record and its cursor (what a checkpoint stores), the
    agent, the fence that makes its commits its own, usage, status, the tools seen."""

    record: TaskRecord
    agent: AgentConfig
    deadline_ms: int
    cursor: Cursor = field(init=False)
    fence: int = field(init=False)
    usage: Usage = field(init=False)
    status: TaskStatus = TaskStatus.RUNNING
    error: AgentmeshError | None = None
    """The error the run ended with (FAILED or ABORTED), for the run's span."""
    tools_seen: dict[str, ToolInfo] = field(default_factory=dict)
    """Every tool tool_svc named this run (for registry fallbacks)."""
    all_tools: list[ToolInfo] | None = None
    """ListTools, once a pinned tool was not among the discovered ones."""
    discovered: list[ToolInfo] | None = None
    """DiscoverTools for the goal, narrowed to the agent's tools (asked once per run)."""
    started: set[str] = field(default_factory=set)
    """Ids of the tool calls this run issued itself; any other RUNNING call was issued by an earlier
    run, whose result may be in the session log already (`read_back`)."""
    read_back: dict[str, Appended] = field(default_factory=dict)
    """Tool call id -> where its result is in the session log, for results read back from there
    (never appended again: they are the truth, issue 39)."""
    ran_again: list[ToolOutcome] = field(default_factory=list)
    """This step's calls whose own attempt ran where the stored result failed (tool_calls.retake): the
    model is told after the reply's last result (`Downstream.notes_ran_again`)."""
    next_view: ContextView | None = None
    """The context context_svc built right after the run's last append (issue 45: the next step's
    BuildContext rides on that append); None once anything else was appended, or none was asked for."""
    prompt: tuple[int, bytes] | None = None
    """The step's provider request (prompts.py), written by the commit that checkpoints its reply."""
    output_schema: dict[str, Any] | None = field(init=False)
    """The schema the final answer follows (the record's, fixed at StartTask); None: free text."""

    def __post_init__(self) -> None:
        self.cursor = self.record.cursor
        self.fence = self.record.fence
        self.usage = self.record.usage
        self.output_schema = json.loads(self.record.output_schema) if self.record.output_schema else None

    @classmethod
    def of(cls, record: TaskRecord, agent: AgentConfig, *, task_timeout_s: float) -> RunState:
        own = record.create_time_ms + int(task_timeout_s * 1000)
        # A task a handoff created is bound by its root's deadline too (record.deadline_ms).
        return cls(record, agent, deadline_ms=min(own, record.deadline_ms) if record.deadline_ms else own)
