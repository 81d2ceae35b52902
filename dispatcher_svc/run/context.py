"""`Run`: what every phase of one run receives — the state value and the collaborators that do
its I/O, held as members (not base classes)."""

from __future__ import annotations

from dataclasses import dataclass

from agentmesh.config import DispatcherSettings
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
