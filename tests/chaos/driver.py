"""Driving one chaos task as an operator would: start it, follow it, settle it, resume it.

`Client` talks to whichever dispatcher replica answers (kills make any of them vanish for a while).
`drive` starts a task with StartTask (client-chosen id, so a retried start is idempotent), follows it
with WatchTask (reconnecting after the last sequence seen when a stream breaks or goes silent),
settles every settlement request truthfully from the upstream's counter, approves ordinary
approvals, and resumes a task that FAILED with a resumable error (StartTask with the same id), at
most `max_resumes` times (0, `--no-resume`: never; the dispatcher waits out our own outages itself).
Every live event is recorded for the checks.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc
import grpc.aio

from agentmesh.authenticator import Authenticator
from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.config import AuthSettings
from agentmesh.v1 import common_pb2, dispatcher_pb2, dispatcher_pb2_grpc
from tests.chaos.mesh import AGENT_ID
from tests.chaos.upstreams import Upstreams
from tests.e2e.conftest import AUTH_KEY

D = dispatcher_pb2
T = TypeVar("T")
Stub = dispatcher_pb2_grpc.DispatcherServiceStub
TERMINAL = frozenset({D.TASK_STATUS_SUCCEEDED, D.TASK_STATUS_FAILED, D.TASK_STATUS_ABORTED, D.TASK_STATUS_CANCELLED})
RESUMABLE = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED", "OVERLOADED", "INTERNAL"})
"""ErrorCode names of a FAILED task the harness resumes (a service was down too long)."""
RETRY_CODES = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED}
)
_CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]
STARTER, SETTLER = "chaos-operator", "chaos-settler"
SETTLEMENT_KIND = getattr(common_pb2, "APPROVAL_KIND_SETTLEMENT", -1)
"""Read with getattr so the harness also runs against a tree from before settlements existed."""


def status_name(status: int) -> str:
    return str(D.TaskStatus.Name(status)).removeprefix("TASK_STATUS_") if status else "UNKNOWN"


def code_name(code: int) -> str:
    return str(common_pb2.ErrorCode.Name(code)).removeprefix("ERROR_CODE_")


@dataclass(frozen=True)
class Seen:
    """An event as a watcher saw it live."""

    sequence: int
    kind: int
    status: int
    message: str


@dataclass
class Settlement:
    task_id: str
    approval_id: str
    tool: str
    nonce: str
    outcome: str
    """RAN or NOT_RAN, from the upstream's counter when settled."""
    effects: int
    resolved: bool = False
    error: str = ""


@dataclass
class TaskRun:
    """One task as the harness knows it."""

    task_id: str
    goal: str
    plan: list[list[str]]
    live: list[Seen] = field(default_factory=list)
    live_problems: list[str] = field(default_factory=list)
    resumes: list[str] = field(default_factory=list)
    """The error code of each resume."""
    settlements: list[Settlement] = field(default_factory=list)
    approvals: list[str] = field(default_factory=list)
    """Ordinary (CALL) approvals the harness approved."""
    notes: list[str] = field(default_factory=list)
    started: bool = False
    status: int = 0
    done: bool = False
    _tried: dict[str, int] = field(default_factory=dict)

    def note(self, text: str) -> None:
        if not self.notes or self.notes[-1] != text:
            self.notes.append(text)

    @property
    def last_sequence(self) -> int:
        return self.live[-1].sequence if self.live else 0

    def saw(self, event: D.TaskEvent) -> None:
        last = self.last_sequence
        if event.sequence <= last:
            self.live_problems.append(f"{self.task_id}: live stream repeated sequence {event.sequence} after {last}")
            return
        if event.sequence != last + 1:
            self.live_problems.append(f"{self.task_id}: live stream jumped from {last} to {event.sequence}")
        self.live.append(Seen(event.sequence, event.kind, event.status, event.message))
        self.status = event.status


class Client:
    """The dispatcher replicas, tried in turn; operator tokens per subject."""

    def __init__(self, targets: list[str]) -> None:
        self.channels = [grpc.aio.insecure_channel(t, options=_CHANNEL_OPTIONS) for t in targets]
        self.stubs = [Stub(c) for c in self.channels]  # type: ignore[no-untyped-call]
        self._turn = itertools.cycle(range(len(self.stubs)))
        self._auth = Authenticator(AuthSettings(key=AUTH_KEY), "dev")
        self._tokens: dict[str, tuple[float, str]] = {}

    def metadata(self, subject: str) -> tuple[tuple[str, str], ...]:
        minted = self._tokens.get(subject)
        if minted is None or time.monotonic() - minted[0] > 600:
            token = self._auth.mint(subject=subject, roles=("operator",))
            minted = self._tokens[subject] = (time.monotonic(), token)
        return ((IDENTITY_HEADER, minted[1]),)

    def stub(self) -> Stub:
        return self.stubs[next(self._turn)]

    async def call(self, fn: Callable[[Stub], Awaitable[T]], *, within_s: float = 30.0) -> T:
        """`fn` on a replica; UNAVAILABLE, DEADLINE_EXCEEDED and RESOURCE_EXHAUSTED are retried on the
        next replica until `within_s` has passed."""
        deadline = time.monotonic() + within_s
        while True:
            try:
                return await fn(self.stub())
            except grpc.aio.AioRpcError as exc:
                if exc.code() not in RETRY_CODES or time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.2)

    async def get_task(self, task_id: str, within_s: float = 30.0) -> D.Task:
        request = D.GetTaskRequest(task_id=task_id)
        md = self.metadata(STARTER)
        reply: D.GetTaskResponse = await self.call(
            lambda s: s.GetTask(request, metadata=md, timeout=5), within_s=within_s
        )
        return reply.task

    async def watch(
        self,
        task_id: str,
        after: int,
        idle_s: float,
        on_event: Callable[[D.TaskEvent], Awaitable[None]],
        quiet_s: float = 10.0,
    ) -> str:
        """One WatchTask stream from `after`; returns why it ended: "end", "idle" (nothing, not even a
        heartbeat, for `idle_s`), "quiet" (only heartbeats for `quiet_s`) or an error code."""
        call = self.stub().WatchTask(
            D.WatchTaskRequest(task_id=task_id, after_sequence=after), metadata=self.metadata(STARTER)
        )
        last_event = time.monotonic()
        try:
            while True:
                try:
                    reply = await asyncio.wait_for(call.read(), idle_s)
                except TimeoutError:
                    return "idle"
                if reply is grpc.aio.EOF:  # type: ignore[attr-defined]
                    return "end"
                assert isinstance(reply, D.WatchTaskResponse)
                if reply.event.sequence:
                    last_event = time.monotonic()
                    await on_event(reply.event)
                elif time.monotonic() - last_event > quiet_s:
                    return "quiet"
        except grpc.aio.AioRpcError as exc:
            return str(exc.code().name)
        finally:
            call.cancel()

    async def close(self) -> None:
        for channel in self.channels:
            await channel.close(None)


@dataclass
class Driver:
    client: Client
    upstreams: Upstreams
    max_resumes: int = 5
    idle_s: float = 4.0
    """A watch silent this long (no event, no heartbeat) is dropped and reopened."""

    async def start(self, run: TaskRun, within_s: float = 120.0) -> None:
        request = D.StartTaskRequest(agent_id=AGENT_ID, goal=run.goal, task_id=run.task_id)
        md = self.client.metadata(STARTER)
        await self.client.call(lambda s: s.StartTask(request, metadata=md, timeout=10), within_s=within_s)
        run.started = True

    async def drive(self, run: TaskRun) -> None:
        """Start, follow, settle and resume until the task is terminal for good (or cancelled)."""
        try:
            await self.start(run)
        except grpc.aio.AioRpcError as exc:
            run.notes.append(f"StartTask failed: {exc.code().name}: {exc.details()}")
            return

        async def on_event(event: D.TaskEvent) -> None:
            run.saw(event)
            if event.status == D.TASK_STATUS_WAITING_APPROVAL:
                await self.resolve(run)

        stuck = 0
        while True:
            before = run.last_sequence
            await self.client.watch(run.task_id, before, self.idle_s, on_event)
            try:
                task = await self.client.get_task(run.task_id)
            except grpc.aio.AioRpcError as exc:
                run.note(f"GetTask failed: {exc.code().name}")
                await asyncio.sleep(0.5)
                continue
            stuck = stuck + 1 if run.last_sequence == before else 0
            if task.status == D.TASK_STATUS_WAITING_APPROVAL:
                await self.resolve(run, task)
            elif task.status in TERMINAL and (task.last_sequence <= run.last_sequence or stuck >= 20):
                if task.last_sequence > run.last_sequence:
                    run.notes.append(
                        f"watches stopped delivering at sequence {run.last_sequence} of {task.last_sequence}"
                    )
                run.status = task.status
                if not await self.resume(run, task):
                    run.done = True
                    return
            if stuck:
                await asyncio.sleep(min(0.1 * stuck, 1.0))  # the replica went away, or nothing new yet

    async def resume(self, run: TaskRun, task: D.Task) -> bool:
        if task.status != D.TASK_STATUS_FAILED:
            return False
        code = code_name(task.error.code)
        if code not in RESUMABLE and not task.error.retryable:
            return False
        if len(run.resumes) >= self.max_resumes:
            why = f"{code}: {task.error.message[:160]}" if not self.max_resumes else code
            run.notes.append(f"left FAILED ({why}) after {len(run.resumes)} resumes")
            return False
        # As an operator would: give the failed service time to come back (1, 2, 4, 8, 8 ... s).
        await asyncio.sleep(min(8.0, 2.0 ** len(run.resumes)))
        try:
            await self.start(run)
        except grpc.aio.AioRpcError as exc:
            run.notes.append(f"resume failed: {exc.code().name}: {exc.details()}")
            return False
        run.resumes.append(code)
        return True

    async def resolve(self, run: TaskRun, task: D.Task | None = None) -> None:
        """Settles (or approves) what the task waits for, once per approval."""
        if task is None:
            try:
                task = await self.client.get_task(run.task_id)
            except grpc.aio.AioRpcError:
                return  # the loop looks again
        pending = task.pending_approval
        if task.status != D.TASK_STATUS_WAITING_APPROVAL or not pending.approval_id:
            return
        tries = run._tried.get(pending.approval_id, 0)
        if tries >= 5:
            return
        run._tried[pending.approval_id] = tries + 1
        request = D.DispatcherServiceResolveApprovalRequest(
            task_id=run.task_id, approval_id=pending.approval_id, arguments_sha256=pending.arguments_sha256
        )
        settlement: Settlement | None = None
        if getattr(pending, "kind", 0) == SETTLEMENT_KIND:
            settlement = self.settlement(run, pending)
            request.settlement = (
                common_pb2.SETTLEMENT_OUTCOME_RAN
                if settlement.outcome == "RAN"
                else common_pb2.SETTLEMENT_OUTCOME_NOT_RAN
            )
            request.reason = f"chaos harness: the upstream counted {settlement.effects} effect(s)"
        else:
            request.approve = True
            request.reason = "chaos harness approves"
        md = self.client.metadata(SETTLER)
        try:
            await self.client.call(lambda s: s.ResolveApproval(request, metadata=md, timeout=15), within_s=30)
        except grpc.aio.AioRpcError as exc:
            run.note(f"ResolveApproval {pending.approval_id}: {exc.code().name}: {exc.details()}")
            if not await self.moved_on(run, pending.approval_id):
                if settlement is not None:
                    settlement.error = f"{exc.code().name}: {exc.details()}"
                return
        if settlement is not None:
            settlement.resolved = True
        else:
            run.approvals.append(pending.approval_id)

    async def moved_on(self, run: TaskRun, approval_id: str) -> bool:
        """After a failed ResolveApproval: whether the task waits no more for `approval_id` (an earlier
        attempt of ours was applied but its answer was lost), so the decision counts as made."""
        try:
            task = await self.client.get_task(run.task_id)
        except grpc.aio.AioRpcError:
            return False
        return task.pending_approval.approval_id != approval_id

    def settlement(self, run: TaskRun, pending: common_pb2.PendingApproval) -> Settlement:
        found = next((s for s in run.settlements if s.approval_id == pending.approval_id), None)
        if found is not None:
            return found
        try:
            args: Any = json.loads(pending.plan.arguments_json)
        except ValueError:
            args = {}
        nonce = str(args.get("nonce", "")) if isinstance(args, dict) else ""
        tool = pending.plan.name
        effects = self.upstreams.effects(tool, nonce) if tool in ("put_effect", "post_effect", "keyed_effect") else 0
        settlement = Settlement(run.task_id, pending.approval_id, tool, nonce, "RAN" if effects else "NOT_RAN", effects)
        run.settlements.append(settlement)
        return settlement


async def read_log(client: Client, task_id: str, idle_s: float = 3.0, passes: int = 1) -> tuple[list[D.TaskEvent], str]:
    """A task's events from sequence 0, over at most `passes` watches (each from the last sequence the
    previous one delivered); and how the last watch ended."""
    events: list[D.TaskEvent] = []

    async def keep(event: D.TaskEvent) -> None:
        out = D.TaskEvent()
        out.CopyFrom(event)
        events.append(out)

    ended = ""
    for _ in range(passes):
        before = len(events)
        ended = await client.watch(task_id, events[-1].sequence if events else 0, idle_s, keep, quiet_s=idle_s)
        if ended in ("end", "idle", "quiet") and len(events) == before:
            break
        if ended == "end":
            task = await client.get_task(task_id)
            if events and task.status in TERMINAL and events[-1].sequence >= task.last_sequence:
                break
    return events, ended
