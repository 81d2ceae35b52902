"""A run's calls to the other services (through `ports.Ports`): deadlines, outages waited out with
backoff and jitter (`decisions.after_outage`: within the outage budget and the task's deadline, each
wait a task event), exactly-once appends to the session log (every append names its message: a
client_message_id, or the tool result's qualified tool_call_id, and context_svc keeps it once), tool
execution by idempotency key, and the tools offered to the model.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from agentmesh.backoff import Backoff
from agentmesh.config import DispatcherSettings
from agentmesh.errors import AgentmeshError, ErrorCode
from dispatcher_svc import guards
from dispatcher_svc.agents import AgentConfig
from dispatcher_svc.events import now_ms
from dispatcher_svc.lease import Lease
from dispatcher_svc.model import ToolOutcome
from dispatcher_svc.ports import Appended, CallOptions, Ports, StoredResult, ToolInfo
from dispatcher_svc.run import decisions
from dispatcher_svc.run.decisions import OUTAGE_CODES, UNCERTAIN_CODES, Outage, OutageWait
from dispatcher_svc.run.names import READ_PAYLOAD_TOOL, idempotency_key, message_id
from dispatcher_svc.run.state import RunState
from dispatcher_svc.run.texts import outcome_summary
from dispatcher_svc.tasks import CallState, TaskRecord

log = logging.getLogger("dispatcher_svc.loop")

T = TypeVar("T")
U = TypeVar("U")

Hook = Callable[[str, TaskRecord], Awaitable[None]]
"""Called at named points of a step ("after_reply_checkpoint", "after_tool_call"): a test hook."""

TokenMinter = Callable[[TaskRecord, AgentConfig], str]

OutageNotice = Callable[[Outage, OutageWait], Awaitable[None]]
"""Told of every outage wait before it starts (the metric; a task event when `reported`)."""

# Reads are safe to send again whatever happened to the last attempt (nothing changes).
_READ_RETRY_CODES = UNCERTAIN_CODES
# A keyed ExecuteTool is safe to repeat whatever happened to the last attempt: tool_svc replays the
# outcome, answers "in progress", or OUTCOME_UNKNOWN; it never sends a write twice.
_KEYED_RETRY_CODES = UNCERTAIN_CODES

SERVICE_OF_CALL = {
    "GetSession": "context_svc",
    "CreateSession": "context_svc",
    "AppendMessage": "context_svc",
    "AppendToolResult": "context_svc",
    "GetToolResult": "context_svc",
    "BuildContext": "context_svc",
    "BuildHandoff": "context_svc",
    "DiscoverTools": "tool_svc",
    "ListTools": "tool_svc",
    "ExecuteTool": "tool_svc",
    "Generate": "provider_svc",
}
"""Which service answers each call a run makes (named in outage events and errors)."""


def service_of(what: str) -> str:
    """The service behind a call named `what` ("ExecuteTool(calc)" -> tool_svc)."""
    return SERVICE_OF_CALL.get(what.split("(", 1)[0], "a service")


class PortFailure(Exception):
    """A downstream call failed for good (an outage past its budget or the deadline, or an error not
    worth a retry); the task fails with `error`."""

    def __init__(self, what: str, error: AgentmeshError) -> None:
        super().__init__(f"{what}: {error}")
        self.what = what
        self.error = error


class AppendConflict(Exception):
    """The session log holds another result for this call (appended by an earlier run whose
    checkpoint did not land): that one is the truth and the run continues with it (issue 39)."""

    def __init__(self, stored: StoredResult) -> None:
        super().__init__(f"tool call {stored.outcome.tool_call_id}: another result is in the session log")
        self.stored = stored


class Downstream:
    """The calls one run makes to context_svc, tool_svc and provider_svc."""

    def __init__(
        self,
        state: RunState,
        ports: Ports,
        settings: DispatcherSettings,
        *,
        lease: Lease | None,
        mint_token: TokenMinter,
        token_ttl_s: float,
        hook: Hook | None,
        on_outage: OutageNotice | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.state = state
        self.ports = ports
        self.settings = settings
        self.lease = lease
        self.mint_token = mint_token
        self.token_ttl_s = token_ttl_s
        self.hook = hook
        self.on_outage = on_outage
        self.rng = rng or random.Random()
        self.backoff = Backoff(
            initial_s=settings.service_retry_backoff_s,
            max_s=max(settings.outage_max_backoff_s, settings.service_retry_backoff_s),
            jitter_s=settings.outage_jitter_s,
        )
        self._token = ""
        self._token_at = 0.0

    async def ready(self) -> CallOptions:
        """Options for the next downstream call, once the lease is known to be ours."""
        if self.lease is not None:
            await self.lease.ensure()
        return self.opts()

    def opts(self) -> CallOptions:
        state = self.state
        now = time.monotonic()
        if not self._token or now - self._token_at > self.token_ttl_s / 2:
            self._token = self.mint_token(state.record, state.agent)
            self._token_at = now
        remaining_s = (state.deadline_ms - now_ms()) / 1000
        if remaining_s <= 0:
            err = guards.deadline(now_ms=now_ms(), deadline_ms=state.deadline_ms)
            assert err is not None
            raise PortFailure("deadline", err)
        return CallOptions(
            identity_token=self._token,
            request_id=state.record.request_id,
            timeout_s=min(self.settings.call_timeout_s, remaining_s),
        )

    async def call(
        self,
        what: str,
        fn: Callable[[CallOptions], Awaitable[T]],
        *,
        retry_on: frozenset[ErrorCode] = OUTAGE_CODES,
        wait_out: bool = True,
    ) -> T:
        """A downstream call; an outage (`retry_on`: UNAVAILABLE, OVERLOADED) is waited out and the
        call sent again (`decisions.after_outage`); PortFailure once it outlasts the budget or the
        deadline, and at once for any other error. `wait_out=False`: the quiet retries only."""
        outage: Outage | None = None
        while True:
            opts = await self.ready()
            try:
                result = await fn(opts)
            except AgentmeshError as err:
                self._answered()
                if err.code not in retry_on:
                    raise PortFailure(what, err) from err
                if outage is None:
                    outage = Outage(service_of(what), what, now_ms())
                outage = await self._wait(outage, err, wait_out=wait_out)
            else:
                self._answered()
                return result

    def _answered(self) -> None:
        """A call answered (whatever it said): the run is alive (the lease's liveness rule)."""
        if self.lease is not None:
            self.lease.progressed()

    async def _wait(self, outage: Outage, err: AgentmeshError, *, wait_out: bool) -> Outage:
        """Waits before the next attempt of a call met by `err`; PortFailure when it should not."""
        settings = self.settings
        step = decisions.after_outage(
            outage,
            err,
            now_ms=now_ms(),
            deadline_ms=self.state.deadline_ms,
            budget_s=settings.outage_budget_s if wait_out else 0.0,
            quiet_retries=settings.service_retry_attempts,
            backoff=self.backoff,
            draw=self.rng.random(),
        )
        if isinstance(step, AgentmeshError):
            raise PortFailure(outage.call, step) from err
        log.info(
            "task %s: %s: %s (%s); retry %d in %.1f s",
            self.state.record.task_id, outage.call, err.code.name, err.message, step.retry, step.delay_s,
        )  # fmt: skip
        if self.on_outage is not None:
            await self.on_outage(outage, step)
        await asyncio.sleep(step.delay_s)
        return Outage(outage.service, outage.call, outage.since_ms, step.retry)

    async def append_once(
        self, what: str, fn: Callable[[CallOptions], Awaitable[Appended]], *, wait_out: bool = True
    ) -> int:
        """Appends a named message to the session log exactly once; returns the tokens it took (0 when
        context_svc already had it). Every append names its message (client_message_id, or the tool
        result's tool_call_id), so an append that may or may not have landed is simply sent again.
        """
        # Whatever view an earlier append brought is stale once this one may have landed; this one's, if
        # it asked for one, is not.
        self.state.next_view = None
        return self.appended(what, await self.call(what, fn, retry_on=UNCERTAIN_CODES, wait_out=wait_out))

    def appended(self, what: str, appended: Appended) -> int:
        """Takes in an append that landed (by `append_once`, or CreateSession's of the goal): the
        tokens it took (0 when context_svc had it already)."""
        self.state.next_view = appended.view
        cursor = self.state.cursor
        cursor.ctx_count = max(cursor.ctx_count, appended.index + 1)
        if appended.already:
            log.info("%s: already in the session log at %d", what, appended.index)
            return 0
        return appended.token_count

    def build_tokens(self, build: bool) -> int | None:
        """What an append asks context_svc to build after it: the step's context (the agent's budget;
        0: the session's), or nothing."""
        return self.state.agent.max_context_tokens if build else None

    async def append_result(self, outcome: ToolOutcome, *, build: bool = False) -> int:
        """Appends a call's result once (0 tokens when it is there already, or was read back from
        there); AppendConflict when the log holds another result for the call. `build`: the answer
        brings the next step's context (`RunState.next_view`)."""
        session_id, call_id = self.state.record.session_id, outcome.tool_call_id
        if call_id in self.state.read_back:
            self.state.next_view = None
            return 0
        build_tokens = self.build_tokens(build)
        try:
            return await self.append_once(
                f"AppendToolResult({outcome.tool_name})",
                lambda o: self.ports.context.append_tool_result(session_id, outcome, o, build_tokens=build_tokens),
            )
        except PortFailure as failure:
            if failure.error.code != ErrorCode.FAILED_PRECONDITION:
                raise
            # "already appended ... with other content": read it back; it is the truth.
            stored = await self.stored_result(outcome.tool_call_id, outcome.tool_name)
            if stored is None:
                raise
            log.warning("task %s: %s", self.state.record.task_id, failure)
            raise AppendConflict(stored) from failure

    async def notes_ran_again(self) -> int:
        """For each call whose own attempt ran (an output) where the log holds an error for it
        (`RunState.ran_again`): a named note, after the reply's last result (tool results follow
        their reply unbroken), saying the call did run, so the model does not send it again under a
        new call id (a write twice). The tokens they took."""
        tokens = 0
        while self.state.ran_again:
            tokens += await self._note_ran(self.state.ran_again[0])
            self.state.ran_again.pop(0)
        return tokens

    async def _note_ran(self, own: ToolOutcome) -> int:
        record = self.state.record
        text = (
            f"[note: tool call {own.tool_call_id} ran after its result above was recorded and took "
            f"effect ({outcome_summary(own)}); do not call it again]"
        )
        note_id = message_id(record.task_id, f"{own.tool_call_id}:ran")
        build_tokens = self.build_tokens(True)  # the notes come last before the next step
        return await self.append_once(
            "AppendMessage(note)",
            lambda o: self.ports.context.append_message(
                record.session_id, "user", text, (), o, client_message_id=note_id, build_tokens=build_tokens
            ),
        )

    async def stored_result(self, call_id: str, tool_name: str) -> StoredResult | None:
        """The result appended for a call, if any (recorded in `read_back`: never appended again)."""
        session_id = self.state.record.session_id
        stored = await self.call(
            f"GetToolResult({tool_name})",
            lambda o: self.ports.context.tool_result(session_id, call_id, o),
            retry_on=_READ_RETRY_CODES,
        )
        if stored is not None:
            cursor = self.state.cursor
            cursor.ctx_count = max(cursor.ctx_count, stored.index + 1)
            self.state.read_back[call_id] = Appended(stored.index, stored.token_count, already=True)
        return stored

    async def fetch_outcome(self, index: int, cs: CallState) -> ToolOutcome:
        """Executes a call, or takes the outcome an approval delivered."""
        record, call = self.state.record, cs.call
        if cs.resolved is not None:
            outcome = cs.resolved
            cs.resolved = None
            return outcome
        if call.id not in self.state.started:
            # Issued by an earlier run: its result may be in the session log already (that run's
            # checkpoint after the append did not land). Then it is the truth: never run again.
            stored = await self.stored_result(call.id, call.name)
            if stored is not None:
                log.info("task %s: %s: result read back from the session log", record.task_id, call.name)
                return stored.outcome
        key = idempotency_key(record.task_id, self.state.cursor.step, index, call)
        outcome = await self.call(
            f"ExecuteTool({call.name})",
            lambda o: self.ports.tools.execute(
                call, session_id=record.session_id, idempotency_key=key, goal=record.goal, opts=o
            ),
            retry_on=_KEYED_RETRY_CODES,
        )
        await self.reached("after_tool_call")
        return outcome

    async def reached(self, point: str) -> None:
        if self.hook is not None:
            await self.hook(point, self.state.record)

    def tools_known(self) -> bool:
        """Whether `offer_tools` can answer without asking tool_svc."""
        state = self.state
        if state.discovered is None:
            return False
        names = {t.name for t in state.discovered}
        return state.all_tools is not None or all(name in names for name in state.cursor.pinned)

    async def offer_tools(self) -> list[ToolInfo]:
        """Top-k tools for the goal (asked once per run: the goal does not change), narrowed to the
        agent's list, plus the pinned ones (fallbacks, read_payload)."""
        state = self.state
        record, agent = state.record, state.agent
        if state.discovered is None:
            found = await self.call(
                "DiscoverTools",
                lambda o: self.ports.tools.discover(record.goal, agent.discover_k, o),
                retry_on=_READ_RETRY_CODES,
            )
            for info in found:
                state.tools_seen[info.name] = info
            state.discovered = [info for info in found if agent.allows_tool(info.name, info.group)]
        offered = list(state.discovered)
        names = {t.name for t in offered}
        missing = [name for name in state.cursor.pinned if name not in names]
        if missing:
            if state.all_tools is None:
                state.all_tools = await self.call("ListTools", self.ports.tools.list_tools, retry_on=_READ_RETRY_CODES)
                for info in state.all_tools:
                    state.tools_seen.setdefault(info.name, info)
            for info in state.all_tools:
                allowed = info.name == READ_PAYLOAD_TOOL or agent.allows_tool(info.name, info.group)
                if info.name in missing and allowed:
                    offered.append(info)
        # The agent's handoffs (issue 44): tools of the dispatcher's own, offered on every step.
        offered += [
            ToolInfo(t.name, description=t.description, input_schema_json=t.input_schema_json)
            for t in agent.handoff_tools.values()
            if t.name not in names
        ]
        return offered

    def fallback_for(self, tool: str) -> str:
        """The registry's fallback for `tool` ("" when it names none or the tool was never seen)."""
        info = self.state.tools_seen.get(tool)
        return info.fallback_tool if info is not None else ""


async def alongside(first: Awaitable[T], second: Awaitable[U]) -> tuple[T, U]:
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
