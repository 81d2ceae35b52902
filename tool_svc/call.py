"""The state one tool call carries through the gateway's steps, and the step interface."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from agentmesh.errors import AgentmeshError
from tool_svc.model import Caller, CallRequest, Outcome, Produced, Stats, ToolDef, ToolResult

if TYPE_CHECKING:
    from tool_svc.registry import RegisteredTool

# Runs after the pipeline with the final result (None when a step raised): releases leases, records
# breaker verdicts. Finalizers run in reverse order of registration, like nested `finally` blocks.
Finalizer = Callable[["ToolResult | None"], Awaitable[None]]


@dataclass
class CallState:
    """One call on its way through the pipeline."""

    request: CallRequest
    caller: Caller
    service_environment: str
    approved_id: str = ""
    """Set when an operator approved this call: it runs without asking again."""
    tool: RegisteredTool | None = None
    arguments: Any = None
    arguments_sha256: str = ""
    """Of the arguments alone: what approvals are bound to."""
    call_sha256: str = ""
    """Of tool name + arguments: what idempotency keys are bound to."""
    produced: Produced | None = None
    redacted: bool = False
    exec_error: AgentmeshError | None = None
    executed: bool = False
    before_send: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    """Run just before the executor (idempotency marks a write as sent); one raising stops the call."""
    sent: bool = False
    """A write's request may have left the gateway: its key is never released."""
    owner: str = ""
    """The idempotency owner token (or approval / settlement id) this call holds its key with."""
    generation: int = 0
    """Which settlement of the key an unknown outcome of this call opens."""
    went_unknown: bool = False
    """The answer became OUTCOME_UNKNOWN and the key records it already."""
    stats: Stats = field(default_factory=Stats)
    bytes_in: int = 0
    bytes_out: int = 0
    bytes_after_digest: int = 0
    finalizers: list[Finalizer] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    @property
    def spec(self) -> ToolDef:
        """The resolved ToolDef (steps after ResolveTool only)."""
        assert self.tool is not None, "step ran before the tool was resolved"
        return self.tool.spec


class Step(Protocol):
    """One stage of the gateway: returns an outcome to stop the pipeline, None to go on."""

    async def __call__(self, call: CallState) -> Outcome | None: ...
