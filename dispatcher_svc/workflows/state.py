"""The state of one workflow run as values: each node's status, attempts, output and error.

Immutable, so the scheduler is a pure function of (workflow, state, now) and a checkpoint is a
snapshot; every change returns a new RunState.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from agentmesh.errors import ErrorCode

__all__ = ["TERMINAL", "ItemState", "NodeState", "NodeStatus", "RunState", "RunStatus"]


class NodeStatus(enum.StrEnum):
    PENDING = "pending"
    """Not started, or waiting for its retry (`not_before`)."""
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    FELL_BACK = "fell_back"
    """Failed after its retries; its fallback node runs in its place."""
    SKIPPED = "skipped"
    """Will not run: a branch not taken, an input that failed or was skipped, an unused fallback."""
    CANCELLED = "cancelled"


TERMINAL = frozenset(
    {NodeStatus.SUCCEEDED, NodeStatus.FAILED, NodeStatus.FELL_BACK, NodeStatus.SKIPPED, NodeStatus.CANCELLED}
)


class RunStatus(enum.StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    """A node failed (after its retries and fallback) and no join tolerated it."""
    ABORTED = "aborted"
    """A FATAL error (or a cancel) ended the run at once; what ran was cancelled."""


@dataclass(frozen=True)
class ItemState:
    """One item of a parallel node."""

    status: NodeStatus = NodeStatus.PENDING
    attempts: int = 0
    output: Any = None
    error: ErrorCode | None = None
    started_at: float | None = None
    not_before: float = 0.0


@dataclass(frozen=True)
class NodeState:
    status: NodeStatus = NodeStatus.PENDING
    attempts: int = 0
    """Attempts started so far (the first is 1)."""
    output: Any = None
    error: ErrorCode | None = None
    started_at: float | None = None
    not_before: float = 0.0
    """A retry waits until then (seconds, the caller's clock)."""
    items: tuple[ItemState, ...] | None = None
    """A parallel node's items once it has expanded its list."""
    reason: str = ""
    """Why it was skipped or cancelled."""


@dataclass(frozen=True)
class RunState:
    nodes: Mapping[str, NodeState]
    aborted: ErrorCode | None = None

    @classmethod
    def new(cls, node_ids: list[str] | tuple[str, ...]) -> RunState:
        return cls({node: NodeState() for node in node_ids})

    def __getitem__(self, node: str) -> NodeState:
        return self.nodes[node]

    def with_node(self, node: str, **changes: Any) -> RunState:
        return replace(self, nodes={**self.nodes, node: replace(self.nodes[node], **changes)})

    def with_item(self, node: str, item: int, **changes: Any) -> RunState:
        items = list(self.nodes[node].items or ())
        items[item] = replace(items[item], **changes)
        return self.with_node(node, items=tuple(items))
