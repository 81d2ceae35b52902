"""One task's agent loop (docs/architecture.md §2, §3, §7), resumable on any replica.

A step: guards -> BuildContext -> DiscoverTools -> budget guard -> Generate -> checkpoint the reply
-> per tool call: TOOL_CALL checkpoint -> ExecuteTool (idempotency key = task + step.index +
tool_call_id + argument hash) -> policy -> checkpoint the outcome -> AppendToolResult. Every
checkpoint is a fenced commit (tasks.py) carrying the step's events, so a replica that takes the
task over resumes from the last checkpoint and neither repeats an event nor a side effect:
- a tool call that was sent but whose outcome was not checkpointed is sent again with the same
  idempotency key, and tool_svc replays the finished outcome instead of running it twice;
- an append to the session log that may or may not have landed is sent again: every append names
  its message (client_message_id, or the result's session-unique tool_call_id) and context_svc
  answers a repeat with the original position instead of appending it twice.
A step's first checkpoint overlaps its read-only calls (BuildContext, DiscoverTools) and is
settled before Generate; every other checkpoint is awaited where it is made. Calls that neither
depend on each other nor on the order they land in run at once: BuildContext with DiscoverTools,
and the reply's AppendMessage with its first ExecuteTool (AppendToolResult waits for both).

The loop owns no grpc: it talks to the other services through `ports.Ports`. This module drives
the phases; the work is in `steps.py` (step logic and exits), `calls.py` (downstream calls) and
`checkpoints.py` (fenced commits), mixins on `run_state.RunState` (docs/architecture.md §7).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from agentmesh.config import DispatcherSettings
from agentmesh.semconv import (
    ATTR_REQUEST_ID,
    ATTR_TASK_ID,
    ERROR_TYPE,
    GEN_AI_AGENT_ID,
    GEN_AI_CONVERSATION_ID,
    GEN_AI_OPERATION_NAME,
)
from dispatcher_svc.agents import AgentConfig, AgentRegistry
from dispatcher_svc.calls import PortFailure, idempotency_key
from dispatcher_svc.lease import Lease
from dispatcher_svc.model import Phase
from dispatcher_svc.ports import Ports
from dispatcher_svc.run_state import RunResult, Stop
from dispatcher_svc.steps import Steps
from dispatcher_svc.tasks import StaleOwnerError, TaskRecord, TaskStore

__all__ = ["AgentLoop", "Hook", "RunResult", "TokenMinter", "idempotency_key"]

log = logging.getLogger("dispatcher_svc.loop")

Hook = Callable[[str, TaskRecord], Awaitable[None]]
"""Called at named points of a step ("after_reply_checkpoint", "after_tool_call"): a test hook."""

TokenMinter = Callable[[TaskRecord, AgentConfig], str]


class AgentLoop:
    """Runs acquired tasks. One instance per replica, shared by all its tasks."""

    def __init__(
        self,
        *,
        tasks: TaskStore,
        agents: AgentRegistry,
        ports: Ports,
        settings: DispatcherSettings,
        mint_token: TokenMinter,
        tracer: trace.Tracer | None = None,
        hook: Hook | None = None,
        token_ttl_s: float = 3600.0,
    ) -> None:
        self.tasks = tasks
        self.agents = agents
        self.ports = ports
        self.settings = settings
        self.mint_token = mint_token
        self.tracer = tracer or trace.get_tracer("dispatcher_svc")
        self.hook = hook
        self.token_ttl_s = token_ttl_s

    async def run(self, record: TaskRecord, lease: Lease | None = None) -> RunResult:
        """Runs an acquired task (its `fence` is ours) until it ends, parks, or is taken over.

        With a `lease`, every downstream call first makes sure the claim is still ours.
        """
        agent = self.agents.get(record.agent_id)
        run = _Run(self, record, agent, lease)
        parent, links = _trace_parent(record)
        token = otel_context.attach(parent)
        try:
            with (
                self.tasks.feed.running(record.task_id),
                self.tracer.start_as_current_span(
                    f"invoke_agent {agent.id}",
                    kind=SpanKind.INTERNAL,
                    links=links,
                    # Ending a run (even by failing the task) is not an exception of the span.
                    record_exception=False,
                    set_status_on_exception=False,
                    attributes={
                        GEN_AI_OPERATION_NAME: "invoke_agent",
                        GEN_AI_AGENT_ID: agent.id,
                        GEN_AI_CONVERSATION_ID: record.session_id,
                        ATTR_TASK_ID: record.task_id,
                        ATTR_REQUEST_ID: record.request_id,
                        "agentmesh.task.run": record.runs,
                    },
                ) as span,
            ):
                result = await run.execute()
                span.set_attribute("agentmesh.task.result", result.value)
                span.set_attribute("agentmesh.task.status", run.status.name)
                if run.error is not None:
                    span.set_attribute(ERROR_TYPE, run.error.code.name)
                    span.set_status(Status(StatusCode.ERROR, f"{run.error.code.name}: {run.error.message}"))
                return result
        finally:
            otel_context.detach(token)


def _trace_parent(record: TaskRecord) -> tuple[otel_context.Context, list[Link]]:
    """The first run continues the trace that started the task; a resumed run links to it."""
    if not record.traceparent:
        return otel_context.Context(), []
    carrier = {"traceparent": record.traceparent}
    ctx = TraceContextTextMapPropagator().extract(carrier, context=otel_context.Context())
    if record.runs <= 1:
        return ctx, []
    original = trace.get_current_span(ctx).get_span_context()
    if not original.is_valid:
        return otel_context.Context(), []
    return otel_context.Context(), [Link(original, {"agentmesh.link": "resumed_from"})]


class _Run(Steps):
    """One run of one task: drives the phases (Phase) until the run ends."""

    async def execute(self) -> RunResult:
        tracer = self.loop.tracer
        try:
            try:
                while True:
                    step = self.cursor.step
                    name = f"agent step {step}" if step else "agent setup"
                    attributes = {ATTR_REQUEST_ID: self.record.request_id, ATTR_TASK_ID: self.record.task_id}
                    with tracer.start_as_current_span(
                        name, attributes=attributes, record_exception=False, set_status_on_exception=False
                    ):
                        # One span per step: its phases run until the next step begins.
                        while self.cursor.step == step:
                            await self.advance()
            except PortFailure as failure:
                log.warning("task %s: %s", self.record.task_id, failure)
                await self.fail(failure.error)
        except Stop as stop:
            return stop.result
        except StaleOwnerError as exc:
            log.info("task %s: stopping, %s", self.record.task_id, exc)
            return RunResult.STALE
        finally:
            self._abandon_in_flight()
        raise AssertionError("unreachable")

    async def advance(self) -> None:
        phase = self.cursor.phase
        if phase is Phase.INIT:
            await self.setup()
        elif phase is Phase.THINKING:
            await self.think()
        elif phase is Phase.ACTING:
            await self.act()
        else:
            raise AssertionError(f"unknown phase {phase!r}")
