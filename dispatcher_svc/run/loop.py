"""One task's agent loop (docs/design.md §2, §3, §7), resumable on any replica.

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
the phases (phases.PHASES) until one returns an exit, and has `exits.finish` carry it out.
"""

from __future__ import annotations

import logging

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from agentmesh.config import DispatcherSettings
from agentmesh.redacted import set_error_status
from agentmesh.semconv import (
    ATTR_REQUEST_ID,
    ATTR_TASK_ID,
    ERROR_TYPE,
    GEN_AI_AGENT_ID,
    GEN_AI_CONVERSATION_ID,
    GEN_AI_OPERATION_NAME,
)
from dispatcher_svc.agents import AgentRegistry
from dispatcher_svc.handoffs import CapabilityRouter
from dispatcher_svc.lease import Lease
from dispatcher_svc.model import EventKind, TaskEvent, TaskStatus
from dispatcher_svc.ports import Ports
from dispatcher_svc.queue import TaskQueue
from dispatcher_svc.run import decisions, exits
from dispatcher_svc.run.checkpointer import Checkpointer
from dispatcher_svc.run.context import Run
from dispatcher_svc.run.decisions import Outage, OutageWait
from dispatcher_svc.run.downstream import Downstream, Hook, PortFailure, TokenMinter
from dispatcher_svc.run.names import idempotency_key
from dispatcher_svc.run.next_step import Continue, Exit, RunResult, Stale
from dispatcher_svc.run.phases import PHASES
from dispatcher_svc.run.state import RunState
from dispatcher_svc.tasks import StaleOwnerError, TaskRecord, TaskStore

__all__ = ["AgentLoop", "Hook", "RunResult", "TokenMinter", "idempotency_key"]

log = logging.getLogger("dispatcher_svc.loop")


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
        queue: TaskQueue | None = None,
        router: CapabilityRouter | None = None,
    ) -> None:
        self.tasks = tasks
        self.agents = agents
        self.ports = ports
        self.settings = settings
        self.mint_token = mint_token
        self.tracer = tracer or trace.get_tracer("dispatcher_svc")
        self.hook = hook
        self.token_ttl_s = token_ttl_s
        self.queue = queue
        self.router = router

    def start(self, record: TaskRecord, lease: Lease | None) -> Run:
        """A run of an acquired task: its state, and the collaborators that do its I/O."""
        agent = self.agents.get(record.agent_id)
        state = RunState.of(record, agent, task_timeout_s=self.settings.task_timeout_s)
        checkpoints = Checkpointer(
            state,
            self.tasks,
            task_ttl_s=self.settings.task_ttl_s,
            on_commit=lease.progressed if lease is not None else None,
        )
        metrics = self.tasks.metrics

        async def on_outage(outage: Outage, wait: OutageWait) -> None:
            """Counts the wait; a reported one is a task event, so watchers see the task is alive."""
            metrics.outage_wait(outage.service)
            if wait.reported and state.status is TaskStatus.RUNNING:
                await checkpoints.note([outage_event(checkpoints, outage, wait)])

        return Run(
            state=state,
            checkpoints=checkpoints,
            downstream=Downstream(
                state,
                self.ports,
                self.settings,
                lease=lease,
                mint_token=self.mint_token,
                token_ttl_s=self.token_ttl_s,
                hook=self.hook,
                on_outage=on_outage,
            ),
            tasks=self.tasks,
            settings=self.settings,
            agents=self.agents,
            queue=self.queue,
            router=self.router,
        )

    async def run(self, record: TaskRecord, lease: Lease | None = None) -> RunResult:
        """Runs an acquired task (its `fence` is ours) until it ends, parks, or is taken over.

        With a `lease`, every downstream call first makes sure the claim is still ours.
        """
        run = self.start(record, lease)
        agent, state = run.state.agent, run.state
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
                result = await self._drive(run)
                span.set_attribute("agentmesh.task.result", result.value)
                span.set_attribute("agentmesh.task.status", state.status.name)
                if state.error is not None:
                    span.set_attribute(ERROR_TYPE, state.error.code.name)
                    set_error_status(span, f"{state.error.code.name}: {state.error.message}")
                return result
        finally:
            otel_context.detach(token)

    async def _drive(self, run: Run) -> RunResult:
        """Runs the phases, one span per step, until one returns an exit; carries it out.

        The two errors that end a run become exits here: a downstream call that failed for good
        (PortFailure: the task fails, or aborts if the error is FATAL) and a stale fence
        (StaleOwnerError: another owner has the task; nothing more is written).
        """
        state = run.state
        attributes = {ATTR_REQUEST_ID: state.record.request_id, ATTR_TASK_ID: state.record.task_id}
        try:
            try:
                while True:
                    step = state.cursor.step
                    with self.tracer.start_as_current_span(
                        f"agent step {step}" if step else "agent setup",
                        attributes=attributes,
                        record_exception=False,
                        set_status_on_exception=False,
                    ):
                        # One span per step: its phases run until the next step begins, or an exit.
                        exit_ = await _run_step(run, step)
                        if exit_ is not None:
                            return await exits.finish(run, exit_)
            except PortFailure as failure:
                log.warning("task %s: %s", state.record.task_id, failure)
                return await exits.finish(run, decisions.exit_for(failure.error))
        except StaleOwnerError as exc:
            return await exits.finish(run, Stale(str(exc)))
        finally:
            run.checkpoints.abandon_in_flight()


async def _run_step(run: Run, step: int) -> Exit | None:
    """The phases of step `step` (0: setup): None once the next step has begun, else the exit."""
    cursor = run.state.cursor
    while cursor.step == step:
        phase = cursor.phase
        next_step = await PHASES[phase](run)
        if not isinstance(next_step, Continue):
            return next_step
        assert next_step.phase is cursor.phase, f"{phase} continued to {next_step.phase}, cursor says {cursor.phase}"
    return None


def outage_event(checkpoints: Checkpointer, outage: Outage, wait: OutageWait) -> TaskEvent:
    """A STATUS event (still RUNNING) saying what the task waits for: "context_svc unavailable,
    retrying in 2.0 s"."""
    return checkpoints.event(
        EventKind.STATUS,
        wait.message,
        attributes={
            "outage_service": outage.service,
            "outage_call": outage.call,
            "retry": str(wait.retry),
            "retry_in_s": f"{wait.delay_s:.1f}",
        },
    )


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
