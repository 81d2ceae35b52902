"""`Run`: what every phase of one run receives — the state value and the collaborators that do
its I/O, held as members (not base classes)."""

from __future__ import annotations

from dataclasses import dataclass

from agentmesh.config import DispatcherSettings
from dispatcher_svc.agents import AgentRegistry
from dispatcher_svc.handoffs import CapabilityRouter
from dispatcher_svc.queue import TaskQueue
from dispatcher_svc.run.checkpointer import Checkpointer
from dispatcher_svc.run.downstream import Downstream
from dispatcher_svc.run.state import RunState
from dispatcher_svc.tasks import TaskStore


@dataclass
class Run:
    """One run of one task on this replica."""

    state: RunState
    checkpoints: Checkpointer
    downstream: Downstream
    tasks: TaskStore
    settings: DispatcherSettings
    agents: AgentRegistry | None = None
    """The configured agents: whom a handoff may create a task for."""
    queue: TaskQueue | None = None
    """The work queue a handoff's child task joins; None: this loop makes no handoffs (unit tests)."""
    router: CapabilityRouter | None = None
    """Picks the agent of a handoff that names a capability; None: such a handoff finds no agent."""
