"""One task's agent loop (docs/architecture.md §2, §3, §7), resumable on any replica.

A step: guards -> BuildContext -> DiscoverTools -> budget guard -> Generate -> checkpoint the reply
-> per tool call: TOOL_CALL checkpoint -> ExecuteTool (idempotency key = task + step.index +
tool_call_id + argument hash) -> policy -> checkpoint the outcome -> AppendToolResult. Every
checkpoint is a fenced commit (tasks.py) carrying the step's events, so a replica that takes the
task over resumes from the last checkpoint and neither repeats an event nor a side effect:
- a tool call that was sent but whose outcome was not checkpointed is sent again with the same
  idempotency key, and tool_svc replays the finished outcome instead of running it twice;
- an append to the session log that may or may not have landed is detected by comparing the
  session's message count with the count the checkpoint expected (`Cursor.ctx_count`).
A step's first checkpoint overlaps its read-only calls (BuildContext, DiscoverTools) and is
settled before Generate; every other checkpoint is awaited where it is made. Calls that neither
depend on each other nor on the order they land in run at once: BuildContext with DiscoverTools,
and the reply's AppendMessage with its first ExecuteTool (AppendToolResult waits for both).

The loop owns no grpc: it talks to the other services through `ports.Ports`.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from agentmesh.chat import Correction, NextStep, ToolCall, Usage
from agentmesh.config import DispatcherSettings
from agentmesh.errors import AgentmeshError, ErrorClass, ErrorCode
from agentmesh.semconv import (
    ATTR_ERROR_CLASS,
    ATTR_ERROR_CODE,
    ATTR_REQUEST_ID,
    ATTR_TASK_ID,
    GEN_AI_AGENT_ID,
    GEN_AI_CONVERSATION_ID,
    GEN_AI_OPERATION_NAME,
)
from dispatcher_svc import guards, policy
from dispatcher_svc.agents import AgentConfig, AgentRegistry
from dispatcher_svc.events import now_ms
from dispatcher_svc.model import EventKind, ModelReply, TaskEvent, TaskStatus, ToolOutcome
from dispatcher_svc.ports import Appended, CallOptions, Ports, SessionSpec, ToolInfo
from dispatcher_svc.tasks import CallState, Cursor, Lease, StaleOwnerError, TaskRecord, TaskStore, fields_of

log = logging.getLogger("dispatcher_svc.loop")

T = TypeVar("T")
U = TypeVar("U")

READ_PAYLOAD_TOOL = "read_payload"
"""The built-in tool that reads offloaded payloads; offered once the task has one."""

# Faults of our own services worth a bounded retry: the same call may succeed in a moment.
_RETRY_CODES = frozenset({ErrorCode.UNAVAILABLE, ErrorCode.OVERLOADED})
# Faults after which an append may or may not have landed.
_UNCERTAIN_CODES = _RETRY_CODES | {ErrorCode.DEADLINE_EXCEEDED, ErrorCode.CANCELLED}
_CLIP = 160


class RunResult(enum.Enum):
    FINISHED = "finished"
    """A terminal status was committed."""
    PARKED = "parked"
    """WAITING_APPROVAL: the task leaves the queue until ResolveApproval (or, once the approval
    expired, the dispatcher's expiry sweeper) re-enqueues it."""
    STALE = "stale"
    """Another owner took over (a reclaim, or a cancellation): this run stops writing."""


Hook = Callable[[str, TaskRecord], Awaitable[None]]
"""Called at named points of a step ("after_reply_checkpoint", "after_tool_call"): a test hook."""

TokenMinter = Callable[[TaskRecord, AgentConfig], str]


class PortFailure(Exception):
    """A downstream call failed for good (after bounded retries); the task fails with `error`."""

    def __init__(self, what: str, error: AgentmeshError) -> None:
        super().__init__(f"{what}: {error}")
        self.what = what
        self.error = error


class _Stop(Exception):
    def __init__(self, result: RunResult) -> None:
        super().__init__(result.value)
        self.result = result


def clip(text: str, limit: int = _CLIP) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def idempotency_key(task_id: str, step: int, index: int, call: ToolCall) -> str:
    """task + step.index + tool_call_id + argument hash: a resumed step replays, a new step runs."""
    call_id = "".join(ch for ch in call.id if ch.isprintable() and not ch.isspace() and ch not in "{}")[:96]
    return f"{task_id}:{step}.{index}:{call_id}:{call.arguments_sha256()[:32]}"


def outcome_summary(outcome: ToolOutcome) -> str:
    if outcome.pending is not None:
        return f"{outcome.tool_name} -> waiting for approval {outcome.pending.approval_id}"
    if outcome.error is not None:
        err = outcome.error
        return f"{outcome.tool_name} -> {err.code.name} ({err.error_class.name}): {clip(err.message, 100)}"
    out = outcome.output
    assert out is not None
    if out.ref is not None:
        return (
            f"{outcome.tool_name} -> ok, {out.ref.size_bytes} bytes offloaded as {out.ref.ref_id[:15]}…, "
            f"context keeps the digest"
        )
    return f"{outcome.tool_name} -> ok: {clip(out.inline or '', 100)}"


def raw_tokens_of(outcome: ToolOutcome, appended_tokens: int) -> int:
    """Tokens the result would have cost appended raw: offloaded outputs at ~4 bytes per token."""
    out = outcome.output
    if out is not None and out.ref is not None:
        return max(appended_tokens, out.ref.size_bytes // 4)
    return appended_tokens


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


class _Run:
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
        # After a (re)start the session may hold an append the checkpoint does not know about.
        self._count_verified = False
        self._tools_seen: dict[str, ToolInfo] = {}
        self._all_tools: list[ToolInfo] | None = None
        self._discovered: list[ToolInfo] | None = None
        # A step-start checkpoint still on its way to Redis (see `checkpoint_behind`).
        self._in_flight: asyncio.Task[None] | None = None

    # -- plumbing ------------------------------------------------------------------------------

    async def ready(self) -> CallOptions:
        """Options for the next downstream call, once the lease is known to be ours."""
        if self.lease is not None:
            await self.lease.ensure()
        return self.opts()

    def opts(self) -> CallOptions:
        now = time.monotonic()
        if not self._token or now - self._token_at > self.loop.token_ttl_s / 2:
            self._token = self.loop.mint_token(self.record, self.agent)
            self._token_at = now
        remaining_s = (self.deadline_ms - now_ms()) / 1000
        if remaining_s <= 0:
            err = guards.deadline(now_ms=now_ms(), deadline_ms=self.deadline_ms)
            assert err is not None
            raise PortFailure("deadline", err)
        return CallOptions(
            identity_token=self._token,
            request_id=self.record.request_id,
            timeout_s=min(self.settings.call_timeout_s, remaining_s),
        )

    def event(self, kind: EventKind, message: str = "", **fields: object) -> TaskEvent:
        status = fields.pop("status", self.status)
        assert isinstance(status, TaskStatus)
        return TaskEvent(
            task_id=self.record.task_id,
            sequence=0,
            kind=kind,
            time_ms=now_ms(),
            status=status,
            step=self.cursor.step,
            message=message,
            **fields,  # type: ignore[arg-type]
        )

    async def commit(
        self,
        events: Sequence[TaskEvent] = (),
        *,
        status: TaskStatus | None = None,
        **fields: object,
    ) -> None:
        await self.settle()
        await self._write(*self._checkpoint(events, status, fields))

    def checkpoint_behind(self, events: Sequence[TaskEvent]) -> None:
        """Starts a checkpoint without waiting for it; `settle()` waits for it.

        Only read-only calls (BuildContext, DiscoverTools) may overlap it: whatever has an effect,
        or costs money (Generate), comes after `settle()`, so a stale owner is still stopped before
        it does anything, and a crash meanwhile resumes from the previous checkpoint as before.
        """
        assert self._in_flight is None, "one checkpoint in flight at a time"
        # Serialised now: the cursor changes while the write is on its way.
        self._in_flight = asyncio.ensure_future(self._write(*self._checkpoint(events, None, {})))

    async def settle(self) -> None:
        """Waits for the checkpoint in flight, if any, raising what it raised (StaleOwnerError)."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            await in_flight

    def _abandon_in_flight(self) -> None:
        """The run ends with a checkpoint still in flight: it completes on its own (a commit is
        atomic); its outcome no longer matters to this run, but must not go unobserved."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            in_flight.add_done_callback(lambda done: done.cancelled() or done.exception())

    def _checkpoint(
        self, events: Sequence[TaskEvent], status: TaskStatus | None, fields: dict[str, object]
    ) -> tuple[dict[str, str], Sequence[TaskEvent], int]:
        """The hash fields, events and TTL of a commit of the current state."""
        if status is not None:
            self.status = status
        values = fields_of(
            status=status,
            step=self.cursor.step,
            usage=self.usage,
            cursor=self.cursor,
            update_ms=now_ms(),
            **fields,  # type: ignore[arg-type]
        )
        terminal = status is not None and status.terminal
        parked = status == TaskStatus.WAITING_APPROVAL
        if terminal or parked:
            values["lease_until"] = "0"
        return values, tuple(events), self.settings.task_ttl_s if terminal else 0

    async def _write(self, values: dict[str, str], events: Sequence[TaskEvent], ttl_s: int) -> None:
        result = await self.loop.tasks.commit(
            self.record.task_id, fence=self.fence, fields=values, events=events, ttl_s=ttl_s
        )
        self.record.last_sequence = result.last_sequence

    async def call(self, what: str, fn: Callable[[CallOptions], Awaitable[T]]) -> T:
        """A downstream call with bounded retries of UNAVAILABLE / OVERLOADED; PortFailure after."""
        attempts = self.settings.service_retry_attempts
        delay = self.settings.service_retry_backoff_s
        for attempt in range(1, attempts + 1):
            opts = await self.ready()
            try:
                return await fn(opts)
            except AgentmeshError as err:
                if err.code in _RETRY_CODES and attempt < attempts:
                    log.info("%s: %s (attempt %d of %d); retrying", what, err.code.name, attempt, attempts)
                    await asyncio.sleep(err.retry_after if err.retry_after else delay)
                    delay *= 2
                    continue
                raise PortFailure(what, err) from err
        raise AssertionError("unreachable")

    async def append_once(self, what: str, fn: Callable[[CallOptions], Awaitable[Appended]]) -> int:
        """Appends to the session log exactly once; returns the tokens it took (0 if found already there).

        Before the first append of a run, and after any failure that leaves it uncertain whether
        the append landed, the session's message count is compared with the checkpoint's.
        """
        attempts = self.settings.service_retry_attempts
        delay = self.settings.service_retry_backoff_s
        for attempt in range(1, attempts + 1):
            if not self._count_verified:
                info = await self.call(
                    "GetSession", lambda o: self.ports.context.get_session(self.record.session_id, o)
                )
                self._count_verified = True
                if info.message_count > self.cursor.ctx_count:
                    log.info("%s: already in the session log (count %d)", what, info.message_count)
                    self.cursor.ctx_count = info.message_count
                    return 0
            opts = await self.ready()
            try:
                appended = await fn(opts)
            except AgentmeshError as err:
                if err.code in _UNCERTAIN_CODES and attempt < attempts:
                    self._count_verified = False
                    await asyncio.sleep(err.retry_after if err.retry_after else delay)
                    delay *= 2
                    continue
                raise PortFailure(what, err) from err
            self.cursor.ctx_count = appended.index + 1
            return appended.token_count
        raise AssertionError("unreachable")

    async def reached(self, point: str) -> None:
        if self.loop.hook is not None:
            await self.loop.hook(point, self.record)

    # -- endings -------------------------------------------------------------------------------

    def _mark_error(self, err: AgentmeshError) -> None:
        self.error = err
        span = trace.get_current_span()
        span.set_attributes({ATTR_ERROR_CODE: err.code.name, ATTR_ERROR_CLASS: err.error_class.name})
        span.set_status(Status(StatusCode.ERROR, f"{err.code.name}: {clip(err.message, 200)}"))

    async def fail(self, err: AgentmeshError, *, prefix: Sequence[TaskEvent] = ()) -> None:
        if err.error_class == ErrorClass.FATAL:
            await self.abort(err, prefix=prefix)
        self._mark_error(err)
        status = TaskStatus.FAILED
        await self.commit(
            [*prefix, self.event(EventKind.STATUS, f"status FAILED: {err}", status=status, error=err)],
            status=status,
            error=err,
        )
        raise _Stop(RunResult.FINISHED)

    async def abort(self, err: AgentmeshError, *, prefix: Sequence[TaskEvent] = ()) -> None:
        status = TaskStatus.ABORTED
        self._mark_error(err)
        await self.commit(
            [
                *prefix,
                self.event(
                    EventKind.INCIDENT,
                    f"incident: {err.code.name}: {clip(err.message, 200)}; task aborted, a human decides what next",
                    status=status,
                    error=err,
                ),
                self.event(EventKind.STATUS, f"status ABORTED: {err.code.name}", status=status, error=err),
            ],
            status=status,
            error=err,
        )
        raise _Stop(RunResult.FINISHED)

    # -- the loop ------------------------------------------------------------------------------

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
        except _Stop as stop:
            return stop.result
        except StaleOwnerError as exc:
            log.info("task %s: stopping, %s", self.record.task_id, exc)
            return RunResult.STALE
        finally:
            self._abandon_in_flight()
        raise AssertionError("unreachable")

    async def advance(self) -> None:
        phase = self.cursor.phase
        if phase == "init":
            await self.setup()
        elif phase == "thinking":
            await self.think()
        elif phase == "acting":
            await self.act()
        else:
            raise AssertionError(f"unknown phase {phase!r}")

    async def setup(self) -> None:
        """Creates the session and records the goal, then starts step 1."""
        record = self.record
        spec = SessionSpec(
            session_id=record.session_id,
            agent_id=self.agent.id,
            goal=record.goal,
            system_prompt=self.agent.system_prompt,
            max_context_tokens=self.agent.max_context_tokens,
        )
        if self.cursor.ctx_count == 0:
            info = await self.call("CreateSession", lambda o: self.ports.context.create_session(spec, o))
            self.cursor.ctx_count = info.message_count
            self._count_verified = True
        tokens = await self.append_once(
            "AppendMessage(goal)",
            lambda o: self.ports.context.append_message(record.session_id, "user", record.goal, (), o),
        )
        self.cursor.raw_tokens += tokens
        await self.begin_step()

    async def begin_step(self, prefix: Sequence[TaskEvent] = ()) -> None:
        """Guards, then the next step starts (one commit with the previous step's last events)."""
        stop = guards.max_steps(steps_done=self.cursor.step, limit=self.record.max_steps)
        if stop is not None:
            await self.abort(stop, prefix=prefix)
        late = guards.deadline(now_ms=now_ms(), deadline_ms=self.deadline_ms)
        if late is not None:
            await self.fail(late, prefix=prefix)
        c = self.cursor
        c.step += 1
        c.phase = "thinking"
        c.reply = None
        c.reply_appended = False
        c.calls = []
        # Overlaps the step's BuildContext and DiscoverTools; think() settles it before Generate.
        await self.settle()
        self.checkpoint_behind([*prefix, self.event(EventKind.STEP_STARTED, f"step {c.step}")])

    async def think(self) -> None:
        """BuildContext, DiscoverTools, budget guard, Generate; the reply is checkpointed before any tool runs."""
        record, agent, c = self.record, self.agent, self.cursor
        build = self.call(
            "BuildContext",
            lambda o: self.ports.context.build_context(record.session_id, agent.max_context_tokens, o),
        )
        if self.tools_known():
            view = await build
            offered = await self.offer_tools()
        else:
            # Both only read, and neither needs the other's answer: one round trip instead of two.
            view, offered = await _alongside(build, self.offer_tools())
        await self.settle()
        over = guards.budget(
            spent=self.usage.total_tokens,
            prompt_tokens=view.total_tokens,
            reserve_tokens=agent.max_output_tokens,
            token_budget=record.token_budget,
        )
        if over is not None:
            await self.abort(over)
        reply = await self.call(
            "Generate",
            lambda o: self.ports.provider.generate(
                model=agent.model,
                task_tag=agent.task_tag,
                messages=view.messages,
                tools=offered,
                temperature=agent.temperature,
                max_tokens=agent.max_output_tokens,
                agent_id=agent.id,
                opts=o,
            ),
        )
        reply = _normalise(reply, c.step)
        self.usage = self.usage + reply.usage
        system_tokens = sum(b.tokens for b in view.blocks if b.kind == "SYSTEM")
        raw_context = c.raw_tokens + system_tokens
        events = [
            self.event(
                EventKind.CONTEXT,
                f"context {view.total_tokens} tokens (budget {view.budget_tokens}; raw would be ~{raw_context}); "
                f"{len(offered)} tools offered",
                usage=Usage(view.total_tokens, 0),
                attributes={
                    "context_tokens": str(view.total_tokens),
                    "budget_tokens": str(view.budget_tokens),
                    "raw_tokens": str(raw_context),
                    "summarized_messages": str(view.summarized_messages),
                    "dropped_messages": str(view.dropped_messages),
                    "tools_offered": ",".join(t.name for t in offered),
                    **{f"block_{b.kind.lower()}_tokens": str(b.tokens) for b in view.blocks},
                },
            )
        ]
        if reply.tool_calls:
            names = ", ".join(call.name for call in reply.tool_calls)
            text = f"model asked for {len(reply.tool_calls)} tool call(s): {names}"
        else:
            text = f"model answered: {clip(reply.text, 120)}" if reply.text.strip() else "model replied with nothing"
        events.append(
            self.event(
                EventKind.MODEL_REPLY,
                text,
                usage=reply.usage,
                attributes={"model": reply.model, "finish_reason": reply.finish_reason},
            )
        )
        if not reply.tool_calls:
            if not reply.text.strip():
                empty = AgentmeshError(
                    ErrorCode.INTERNAL,
                    "the model replied with neither text nor a tool call",
                    metadata={"reason": "empty_reply", "finish_reason": reply.finish_reason},
                )
                await self.fail(empty, prefix=events)
            await self.succeed(reply, prefix=events)
        c.reply = reply
        c.reply_appended = False
        c.calls = [CallState(call) for call in reply.tool_calls]
        c.phase = "acting"
        events += await self.start_call(0, prefix=events)
        await self.commit(events)
        await self.reached("after_reply_checkpoint")

    async def succeed(self, reply: ModelReply, *, prefix: Sequence[TaskEvent]) -> None:
        """The final answer: checkpointed with the reply, then recorded in the session (best effort)."""
        status = TaskStatus.SUCCEEDED
        await self.commit(
            [
                *prefix,
                self.event(EventKind.ANSWER, reply.text, status=status),
                self.event(EventKind.STATUS, "status SUCCEEDED", status=status),
            ],
            status=status,
            answer=reply.text,
            error=None,
        )
        try:
            opts = await self.ready()
            await self.ports.context.append_message(self.record.session_id, "assistant", reply.text, (), opts)
        except (AgentmeshError, PortFailure) as exc:
            log.info("task %s: answer not recorded in the session: %s", self.record.task_id, exc)
        raise _Stop(RunResult.FINISHED)

    def tools_known(self) -> bool:
        """Whether `offer_tools` can answer without asking tool_svc."""
        if self._discovered is None:
            return False
        names = {t.name for t in self._discovered}
        return self._all_tools is not None or all(name in names for name in self.cursor.pinned)

    async def offer_tools(self) -> list[ToolInfo]:
        """Top-k tools for the goal (asked once per run: the goal does not change), narrowed to the
        agent's list, plus the pinned ones (fallbacks, read_payload)."""
        record, agent = self.record, self.agent
        if self._discovered is None:
            found = await self.call(
                "DiscoverTools", lambda o: self.ports.tools.discover(record.goal, agent.discover_k, o)
            )
            for info in found:
                self._tools_seen[info.name] = info
            self._discovered = [info for info in found if agent.allows_tool(info.name, info.group)]
        offered = list(self._discovered)
        names = {t.name for t in offered}
        missing = [name for name in self.cursor.pinned if name not in names]
        if missing:
            if self._all_tools is None:
                self._all_tools = await self.call("ListTools", self.ports.tools.list_tools)
                for info in self._all_tools:
                    self._tools_seen.setdefault(info.name, info)
            for info in self._all_tools:
                allowed = info.name == READ_PAYLOAD_TOOL or agent.allows_tool(info.name, info.group)
                if info.name in missing and allowed:
                    offered.append(info)
        return offered

    async def start_call(self, index: int, *, prefix: Sequence[TaskEvent]) -> list[TaskEvent]:
        """Marks call `index` as issued (its TOOL_CALL event, for the next commit) after the loop guard;
        a repeat of an ENGINEERING failure is answered at once without running it."""
        c = self.cursor
        cs = c.calls[index]
        call = cs.call
        signature = call.signature()
        times = c.signatures.get(signature, 0) + 1
        c.signatures[signature] = times
        tool_event = self.event(EventKind.TOOL_CALL, f"{call.name} {clip(call.arguments_json, 120)}", tool_call=call)
        looping = guards.loop(call, times=times, threshold=self.settings.loop_threshold)
        if looping is not None:
            await self.abort(looping, prefix=[*prefix, tool_event])
        if signature not in c.failed:
            cs.state = "running"
            return [tool_event]
        # ENGINEERING: the same failing call is never re-issued; the model hears why.
        fallback = self.fallback_for(call.name, "")
        error = policy.repeat_of_failure(call, c.failed[signature], fallback)
        not_repeated = Correction(NextStep.NOT_REPEATED, fallback_tool=fallback, failed_with=error.code)
        cs.outcome = ToolOutcome(call.id, call.name, error=error, correction=not_repeated)
        cs.state = "done"
        fallback_event = self.event(
            EventKind.FALLBACK,
            f"{call.name}: repeat of a failed call not run; "
            + (f"fallback_tool: {fallback}" if fallback else "no fallback tool"),
            tool_call=call,
            error=error,
        )
        return [tool_event, fallback_event]

    async def act(self) -> None:
        """Records the reply in the session, then runs its tool calls in order.

        Per call: ExecuteTool -> policy -> AppendToolResult -> one commit with its outcome events
        and the next call's TOOL_CALL (or the next step's start). A crash anywhere in between
        resumes at the call: it is re-sent with its idempotency key (replayed, not re-run) and
        the append is detected by the session's message count.
        """
        record, c = self.record, self.cursor
        reply = c.reply
        assert reply is not None

        async def record_reply() -> None:
            # Marked as soon as it lands, whatever happens to a call beside it: a resumed run
            # must not append it again.
            c.raw_tokens += await self.append_once(
                "AppendMessage(reply)",
                lambda o: self.ports.context.append_message(
                    record.session_id, "assistant", reply.text, reply.tool_calls, o
                ),
            )
            c.reply_appended = True

        early: ToolOutcome | None = None
        if not c.reply_appended:
            first = c.calls[0]
            if first.state == "running" and first.resolved is None:
                # Recording the reply and running its first call are independent: the call's
                # result is appended only after both, so the session keeps its order.
                _, early = await _alongside(record_reply(), self.fetch_outcome(0, first))
            else:
                await record_reply()
        for index, cs in enumerate(c.calls):
            if cs.state == "appended":
                continue
            if cs.state == "waiting":
                # Acquired while still parked (a stray queue entry): park again without writing.
                raise _Stop(RunResult.PARKED)
            events: list[TaskEvent] = []
            if cs.state == "new":
                events += await self.start_call(index, prefix=())
            if cs.state == "running":
                outcome = early if early is not None else await self.fetch_outcome(index, cs)
                early = None
                events += await self.apply(cs, outcome)
            assert cs.state == "done" and cs.outcome is not None
            tokens = await self.append_result(cs.outcome)
            c.raw_tokens += raw_tokens_of(cs.outcome, tokens)
            cs.state = "appended"
            if index + 1 < len(c.calls):
                events += await self.start_call(index + 1, prefix=events)
                await self.commit(events)
            else:
                await self.begin_step(prefix=events)
                return
        await self.begin_step()

    async def append_result(self, outcome: ToolOutcome) -> int:
        session_id = self.record.session_id
        return await self.append_once(
            f"AppendToolResult({outcome.tool_name})",
            lambda o: self.ports.context.append_tool_result(session_id, outcome, o),
        )

    async def fetch_outcome(self, index: int, cs: CallState) -> ToolOutcome:
        """Executes a call, or takes the outcome an approval delivered."""
        record, c, call = self.record, self.cursor, cs.call
        if cs.resolved is not None:
            outcome = cs.resolved
            cs.resolved = None
            return outcome
        key = idempotency_key(record.task_id, c.step, index, call)
        outcome = await self.call(
            f"ExecuteTool({call.name})",
            lambda o: self.ports.tools.execute(
                call, session_id=record.session_id, idempotency_key=key, goal=record.goal, opts=o
            ),
        )
        await self.reached("after_tool_call")
        return outcome

    def fallback_for(self, tool: str, named: str) -> str:
        if named:
            return named
        info = self._tools_seen.get(tool)
        return info.fallback_tool if info is not None else ""

    async def apply(self, cs: CallState, outcome: ToolOutcome) -> list[TaskEvent]:
        """Applies the policy to a tool outcome: the events to commit with it, or parks / aborts."""
        c, call = self.cursor, cs.call
        if outcome.tool_call_id != call.id or outcome.tool_name != call.name:
            outcome = replace(outcome, tool_call_id=call.id, tool_name=call.name)
        decision = policy.decide(
            outcome,
            contract_failures=c.contract_failures.get(call.name, 0),
            max_contract_retries=self.settings.max_contract_retries,
            spec_fallback=self.fallback_for(call.name, ""),
        )
        result_event = self.event(EventKind.TOOL_RESULT, outcome_summary(outcome), tool_call=call, tool_result=outcome)
        action = decision.action
        if action == policy.Action.PARK:
            pending = outcome.pending
            assert pending is not None
            cs.state = "waiting"
            # Indexed before it is parked: the expiry sweeper must find every parked task.
            await self.loop.tasks.index_approval(self.record.task_id, pending.approval_id, pending.expire_time_ms)
            await self.commit(
                [
                    self.event(
                        EventKind.APPROVAL_REQUIRED,
                        f"{call.name} needs approval {pending.approval_id}: {clip(pending.impact, 140)}",
                        status=TaskStatus.WAITING_APPROVAL,
                        tool_call=call,
                        pending_approval=pending,
                    ),
                    self.event(EventKind.STATUS, "status WAITING_APPROVAL", status=TaskStatus.WAITING_APPROVAL),
                ],
                status=TaskStatus.WAITING_APPROVAL,
                pending=pending,
            )
            raise _Stop(RunResult.PARKED)
        if action == policy.Action.FALLBACK and outcome.error is not None and decision.fallback_tool:
            # The model sees the fallback even when only the registry named it.
            outcome = replace(outcome, error=_with_fallback(outcome.error, decision.fallback_tool))
        cs.outcome = replace(outcome, correction=decision.correction)
        cs.state = "done"
        if action == policy.Action.ABORT:
            assert decision.error is not None
            await self.abort(decision.error, prefix=[result_event])
        events = [result_event]
        signature = call.signature()
        if action == policy.Action.OK:
            c.contract_failures.pop(call.name, None)
            output = outcome.output
            if output is not None and output.ref is not None and READ_PAYLOAD_TOOL not in c.pinned:
                c.pinned.append(READ_PAYLOAD_TOOL)
        elif action == policy.Action.CORRECT:
            err = decision.error
            assert err is not None
            c.contract_failures[call.name] = decision.retries_used
            hints = "; ".join(
                f"{v.path} {v.rule}: {v.hint or v.expected}" for v in err.violations if v.hint or v.expected
            )
            events.append(
                self.event(
                    EventKind.CORRECTION,
                    f"{call.name}: {err.code.name}, correction {decision.retries_used} of "
                    f"{self.settings.max_contract_retries}" + (f" ({clip(hints, 140)})" if hints else ""),
                    tool_call=call,
                    error=err,
                )
            )
        else:  # FALLBACK
            err = outcome.error
            assert err is not None
            c.contract_failures.pop(call.name, None)
            c.failed[signature] = err.code.name
            if decision.fallback_tool and decision.fallback_tool not in c.pinned:
                c.pinned.append(decision.fallback_tool)
            events.append(
                self.event(
                    EventKind.FALLBACK,
                    f"{call.name}: {err.code.name} ({err.error_class.name}); "
                    + (f"fallback_tool: {decision.fallback_tool}" if decision.fallback_tool else "no fallback tool"),
                    tool_call=call,
                    error=err,
                )
            )
        return events


async def _alongside(first: Awaitable[T], second: Awaitable[U]) -> tuple[T, U]:
    """Both results of two independent calls made at once. If the first fails, the second is
    cancelled and waited for, so no call outlives the step that made it; its own outcome is then
    moot (the first failure is what the run acts on)."""
    other = asyncio.ensure_future(second)
    try:
        result = await first
    except BaseException:
        other.cancel()
        await asyncio.wait((other,))
        if not other.cancelled():
            other.exception()  # observed: never "exception was never retrieved"
        raise
    return result, await other


def _normalise(reply: ModelReply, step: int) -> ModelReply:
    """Gives every tool call a non-empty id unique within the reply (the protocol needs one)."""
    seen: set[str] = set()
    calls = []
    for index, call in enumerate(reply.tool_calls):
        call_id = call.id
        if not call_id or call_id in seen:
            call_id = f"call_{step}_{index}"
        seen.add(call_id)
        calls.append(call if call_id == call.id else replace(call, id=call_id))
    return replace(reply, tool_calls=tuple(calls))


def _with_fallback(err: AgentmeshError, fallback: str) -> AgentmeshError:
    if not fallback or err.fallback_tool == fallback:
        return err
    return AgentmeshError(
        err.code,
        err.message,
        violations=err.violations,
        retryable=err.retryable,
        retry_after=err.retry_after,
        fallback_tool=fallback,
        missing_permission=err.missing_permission,
        metadata=err.metadata,
    )
