"""ApprovalSettler (dispatcher_svc/settling.py) on the test Redis with a fake tool_svc: what resuming a parked
task writes (status, cursor, events, queue entry, expiry index), what a settlement nobody decided ends
with, and what the expiry sweeper does with each kind of due entry. Each result is read back from Redis as
another replica would; no wall-clock waits (expiries are set in the past or far ahead)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import pytest

from agentmesh.chat import ToolCall
from agentmesh.config import AgentSettings, DispatcherSettings
from agentmesh.errors import AgentmeshError, ErrorCode, NotFoundError
from agentmesh.store import Store
from dispatcher_svc.agents import AgentConfig, AgentRegistry
from dispatcher_svc.events import decode_entries, now_ms
from dispatcher_svc.model import (
    ApprovalRecord,
    CallStage,
    EventKind,
    PendingApproval,
    TaskEvent,
    TaskStatus,
    ToolOutcome,
    ToolOutput,
)
from dispatcher_svc.ports import CallOptions, Ports
from dispatcher_svc.queue import TaskQueue
from dispatcher_svc.settling import ApprovalSettler
from dispatcher_svc.tasks import CallState, Cursor, TaskRecord, TaskStore, fields_of
from tests.metricsutil import recorded_metrics
from tests.unit.dispatcher.fakes import FakeContext, FakeProvider, FakeTools, reply

T = "t-parked"
AGENT = AgentSettings.model_validate(
    {
        "id": "ops",
        "system_prompt": "p",
        "model": "fake/m",
        "permissions": ["dev:*:*"],
        "token_budget": 1000,
        "max_steps": 4,
    }
)
PLAN = ToolCall("c1", "restart", '{"svc": "payment-svc"}')
TTL_S = 900
FAR = 2**45  # an expiry far ahead (ms)


@dataclass
class Tools(FakeTools):
    """tool_svc's approvals as `answers` says; NotFoundError for an approval it no longer has."""

    answers: dict[str, ApprovalRecord] = field(default_factory=dict)
    asked: list[tuple[str, float, CallOptions | None]] = field(default_factory=list)
    broken: bool = False

    async def get_approval(self, approval_id: str, timeout_s: float, opts: CallOptions | None = None) -> ApprovalRecord:
        self.asked.append((approval_id, timeout_s, opts))
        if self.broken:
            raise RuntimeError("tool_svc fell over")
        if approval_id not in self.answers:
            raise NotFoundError(f"no approval {approval_id}")
        return self.answers[approval_id]


class Env:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.recorded = recorded_metrics()
        self.tasks = TaskStore(store, DispatcherSettings(), metrics=self.recorded.metrics)
        self.queue = TaskQueue(store, "workers", "c1")
        self.tools = Tools()
        self.minted: list[tuple[str, str]] = []
        self.settler = ApprovalSettler(
            tasks=self.tasks,
            queue=self.queue,
            agents=AgentRegistry([AGENT]),
            ports=Ports(context=FakeContext(), tools=self.tools, provider=FakeProvider(lambda p: reply(text="unused"))),
            task_ttl_s=TTL_S,
            mint_token=self.mint,
        )

    def counted(self, status: TaskStatus) -> float:
        return self.recorded.value("agentmesh.tasks", agent="ops", status=status.name)

    def mint(self, record: TaskRecord, agent: AgentConfig) -> str:
        self.minted.append((record.task_id, agent.id))
        return f"token-of-{record.task_id}"

    async def park(
        self,
        approval_id: str = "ap-1",
        *,
        kind: str = "call",
        expire_ms: int = FAR,
        agent: str = "ops",
        task_id: str = T,
    ) -> TaskRecord:
        """A task parked on `approval_id` at step 2, indexed for the sweeper; its record."""
        pending = PendingApproval(approval_id, PLAN, "restarts it", PLAN.arguments_sha256(), expire_ms, kind=kind)
        cursor = Cursor(step=2, calls=[CallState(PLAN, CallStage.WAITING)])
        fields = fields_of(
            status=TaskStatus.WAITING_APPROVAL,
            pending=pending,
            cursor=cursor,
            task_id=task_id,
            agent_id=agent,
            goal="g",
        )
        await self.tasks.commit(task_id, fence=None, fields={**fields, "request_id": "req-9"}, events=[event(task_id)])
        await self.tasks.index_approval(task_id, approval_id, expire_ms)
        return await self.tasks.load(task_id)

    async def events(self, task_id: str = T) -> list[TaskEvent]:
        raw: Any = await self.store.redis.xrange(self.store.keys.task_events(task_id))
        return decode_entries(task_id, raw)  # packed or not

    async def queued(self) -> list[str]:
        raw: Any = await self.store.redis.xrange(self.queue.key)
        return [f[b"task"].decode() for _, f in raw]

    async def indexed(self) -> list[str]:
        raw: Any = await self.store.redis.zrange(self.tasks.waiting_key, 0, -1)
        return [m.decode() for m in raw]

    async def score(self, member: str) -> float | None:
        found: Any = await self.store.redis.zscore(self.tasks.waiting_key, member)
        return None if found is None else float(found)


def event(task_id: str = T) -> TaskEvent:
    return TaskEvent(task_id, 0, EventKind.STATUS, 1, TaskStatus.WAITING_APPROVAL, message="parked")


def record_of(pending: PendingApproval, state: str, **kw: Any) -> ApprovalRecord:
    return ApprovalRecord(pending, state, **kw)


@pytest.fixture
def env(store: Store) -> Env:
    return Env(store)


async def test_an_approved_call_resumes_the_task_once_with_its_outcome(env: Env) -> None:
    record = await env.park()
    assert record.pending is not None
    outcome = ToolOutcome(PLAN.id, PLAN.name, output=ToolOutput(inline="restarted"))
    approval = record_of(record.pending, "APPROVED", resolved_by="bob")
    before = now_ms()
    with env.tasks.feed.subscribe(T) as watcher:
        assert await env.settler.settle(record, approval, outcome, resolver="carol", reason="looks fine")
    resumed = await env.tasks.load(T)
    assert before <= resumed.update_time_ms <= now_ms() and env.counted(TaskStatus.PENDING) == 1
    assert resumed.status == TaskStatus.PENDING and resumed.pending is None and resumed.fence == record.fence
    (call,) = resumed.cursor.calls
    assert call.state == CallStage.RUNNING and call.resolved == outcome
    resolved, status = (await env.events())[1:]
    assert (resolved.kind, resolved.status, resolved.step) == (EventKind.APPROVAL_RESOLVED, TaskStatus.PENDING, 2)
    assert (status.status, status.step) == (TaskStatus.PENDING, 2)
    assert [(e.task_id, e.sequence) for e in watcher.take()] == [(T, 2), (T, 3)]  # as this replica's watchers see them
    assert resolved.message == "approval ap-1 approved by bob: looks fine"
    assert resolved.attributes == {"state": "APPROVED", "resolved_by": "bob"}
    assert resolved.tool_call == PLAN and resolved.pending_approval == record.pending and resolved.error is None
    assert (status.kind, status.message, status.error) == (
        EventKind.STATUS,
        "status PENDING: resuming after the approval",
        None,
    )
    assert await env.queued() == [T] and await env.indexed() == []
    # The race's loser (a sweeper, a second ResolveApproval) moves nothing.
    assert not await env.settler.settle(record, approval, outcome, resolver="carol", reason="")
    assert await env.queued() == [T] and len(await env.events()) == 3


async def test_a_denied_call_fails_with_approval_denied_naming_the_resolver(env: Env) -> None:
    record = await env.park()
    assert record.pending is not None
    approval = record_of(record.pending, "DENIED", reason="too risky")
    assert await env.settler.settle(record, approval, None, resolver="carol", reason="")
    (call,) = (await env.tasks.load(T)).cursor.calls
    assert call.resolved is not None and call.resolved.error is not None
    assert (call.resolved.tool_call_id, call.resolved.tool_name) == (PLAN.id, PLAN.name)
    assert (call.resolved.error.code, call.resolved.error.message) == (
        ErrorCode.APPROVAL_DENIED,
        "approval ap-1 denied: too risky",
    )
    resolved = (await env.events())[1]
    assert resolved.message == "approval ap-1 denied by carol" and resolved.error is None
    assert resolved.attributes == {"state": "DENIED", "resolved_by": "carol"}


async def test_the_outcome_tool_svc_returned_with_a_denial_is_the_one_the_call_gets(env: Env) -> None:
    record = await env.park()
    assert record.pending is not None
    err = AgentmeshError(ErrorCode.APPROVAL_DENIED, "tool_svc's own words")
    given = ToolOutcome(PLAN.id, PLAN.name, error=err)
    assert await env.settler.settle(record, record_of(record.pending, "DENIED"), given, resolver="carol", reason="")
    (call,) = (await env.tasks.load(T)).cursor.calls
    assert call.resolved is not None and call.resolved.error is not None
    assert call.resolved.error.message == "tool_svc's own words"


async def test_an_expired_call_fails_with_approval_expired(env: Env) -> None:
    record = await env.park()
    assert record.pending is not None
    assert await env.settler.settle(record, record_of(record.pending, "EXPIRED"), None, resolver="", reason="")
    (call,) = (await env.tasks.load(T)).cursor.calls
    assert call.resolved is not None and call.resolved.error is not None
    assert call.resolved.error.code == ErrorCode.APPROVAL_EXPIRED
    assert call.resolved.error.metadata == {"approval_id": "ap-1", "task_id": T}
    assert (
        call.resolved.error.message == "approval ap-1 for restart expired before anyone decided; the call did not run"
    )
    resolved, status = (await env.events())[1:]
    assert resolved.message == "approval ap-1 expired before anyone decided; restart did not run"
    assert resolved.attributes == {"state": "EXPIRED"}
    assert resolved.error is not None and resolved.error.code == ErrorCode.APPROVAL_EXPIRED
    assert status.message == "status PENDING: resuming after the approval expired" and status.error is None
    assert await env.queued() == [T]


@pytest.mark.parametrize(
    ("state", "settlement", "reason", "message"),
    [
        ("APPROVED", "ran", "seen", "RAN (recorded as ran; not re-sent) by bob: seen"),
        ("APPROVED", "not_ran", "seen", "NOT_RAN (sent once more) by bob: seen"),
        ("DENIED", "", "", "denied by bob"),  # no verdict recorded: the state, and no empty reason
    ],
)
async def test_a_settlement_resumes_the_task_with_its_verdict(
    env: Env, state: str, settlement: str, reason: str, message: str
) -> None:
    record = await env.park("stl-1", kind="settlement")
    assert record.pending is not None
    approval = record_of(record.pending, state, resolved_by="bob", settlement=settlement)
    assert await env.settler.settle(record, approval, None, resolver="carol", reason=reason)
    resolved = (await env.events())[1]
    assert resolved.message == f"settlement stl-1 of restart: {message}"
    assert resolved.attributes == {"state": state, "resolved_by": "bob", "settlement": settlement}
    assert (await env.tasks.load(T)).status == TaskStatus.PENDING and await env.queued() == [T]


async def test_a_settlement_nobody_decided_fails_the_task_outcome_unknown(env: Env) -> None:
    record = await env.park("stl-1", kind="settlement", expire_ms=1)
    assert record.pending is not None
    before = now_ms()
    assert await env.settler.settle(record, record_of(record.pending, "EXPIRED"), None, resolver="", reason="")
    failed = await env.tasks.load(T)
    assert failed.status == TaskStatus.FAILED and failed.pending is None
    assert before <= failed.update_time_ms <= now_ms() and env.counted(TaskStatus.FAILED) == 1
    assert failed.error is not None and failed.error.code == ErrorCode.OUTCOME_UNKNOWN
    assert failed.error.metadata == {"settlement_id": "stl-1", "task_id": T}
    assert failed.error.message == (
        "settlement stl-1 for restart expired before anyone settled it; "
        "nothing was re-sent and the outcome stays unknown"
    )
    assert TTL_S - 5 < await env.store.redis.ttl(env.store.keys.task(T)) <= TTL_S
    resolved, status = (await env.events())[1:]
    assert resolved.message == "settlement stl-1 expired unsettled; restart was not re-sent"
    assert resolved.attributes == {"state": "EXPIRED"} and resolved.status == TaskStatus.FAILED
    assert resolved.error is not None and resolved.error.code == ErrorCode.OUTCOME_UNKNOWN
    assert status.message == f"status FAILED: {failed.error}" and status.error is not None
    assert await env.queued() == [] and await env.indexed() == []  # nothing re-sent, nothing left to sweep
    assert not await env.settler.settle(record, record_of(record.pending, "EXPIRED"), None, resolver="", reason="")


async def test_the_sweeper_settles_what_tool_svc_says_and_passes_over_the_rest(env: Env) -> None:
    expired = await env.park("ap-old", expire_ms=1)
    assert expired.pending is not None
    env.tools.answers["ap-old"] = record_of(expired.pending, "EXPIRED")
    await env.park("ap-late", expire_ms=2, task_id="t-late")  # tool_svc's clock: not expired yet
    late = await env.tasks.load("t-late")
    assert late.pending is not None
    env.tools.answers["ap-late"] = record_of(late.pending, "PENDING")
    second = await env.park("ap-2", expire_ms=3, task_id="t-2")
    assert second.pending is not None
    env.tools.answers["ap-2"] = record_of(second.pending, "EXPIRED")
    before = await env.tasks.redis_time_ms()
    assert await env.settler.sweep() == 2
    assert (await env.tasks.load(T)).status == TaskStatus.PENDING and sorted(await env.queued()) == sorted([T, "t-2"])
    # Asked with the task's own identity, request id and the sweep's timeout.
    asked = {a: (timeout, opts) for a, timeout, opts in env.tools.asked}
    assert asked["ap-old"] == (10.0, CallOptions(identity_token=f"token-of-{T}", request_id="req-9", timeout_s=10.0))
    assert (T, "ops") in env.minted
    # The late one is looked at again 5 s on (not at once, not at the sweep's 30 s hold).
    score = await env.score("t-late ap-late")
    assert score is not None and before + 5_000 <= score <= await env.tasks.redis_time_ms() + 5_000
    assert (await env.tasks.load("t-late")).status == TaskStatus.WAITING_APPROVAL


async def test_expire_leaves_an_approval_not_due_and_drops_stale_entries(env: Env) -> None:
    record = await env.park("ap-1", expire_ms=FAR - 1)
    await env.tasks.reindex_approval(T, "ap-1", 5)  # due early (a stale score)
    assert not await env.settler.expire(T, "ap-1")
    assert await env.score(f"{T} ap-1") == FAR - 1 and env.tools.asked == []  # re-scored at its expiry
    # Another approval's entry, and a task that is gone: dropped, nothing queued.
    await env.tasks.index_approval(T, "ap-0", 5)
    assert not await env.settler.expire(T, "ap-0")
    await env.tasks.index_approval("t-gone", "ap-9", 5)
    assert not await env.settler.expire("t-gone", "ap-9")
    assert await env.indexed() == [f"{T} ap-1"] and await env.queued() == []
    # Resumed by a settle that died before queueing it: queued (again), entry dropped.
    await env.tasks.commit(T, fence=record.fence, fields=fields_of(status=TaskStatus.PENDING))
    assert not await env.settler.expire(T, "ap-1")
    assert await env.queued() == [T] and await env.indexed() == []


@pytest.mark.parametrize("why", ["agent removed", "approval gone"])
async def test_an_approval_nobody_can_read_any_more_expires(env: Env, why: str) -> None:
    record = await env.park("ap-1", expire_ms=1, agent="retired" if why == "agent removed" else "ops")
    assert record.pending is not None
    assert await env.settler.expire(T, "ap-1")
    (call,) = (await env.tasks.load(T)).cursor.calls
    assert call.resolved is not None and call.resolved.error is not None
    assert call.resolved.error.code == ErrorCode.APPROVAL_EXPIRED
    assert len(env.tools.asked) == (0 if why == "agent removed" else 1)


async def test_a_decision_tool_svc_holds_is_applied_with_its_reason(env: Env) -> None:
    record = await env.park("ap-1", expire_ms=1)
    assert record.pending is not None
    env.tools.answers["ap-1"] = record_of(record.pending, "DENIED", resolved_by="bob", reason="not today")
    assert await env.settler.expire(T, "ap-1")
    resolved = (await env.events())[1]
    assert resolved.message == "approval ap-1 denied by bob: not today"


async def test_a_sweep_survives_a_failing_entry_and_counts_the_others(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    await env.park("ap-1", expire_ms=1)
    env.tools.broken = True
    with caplog.at_level(logging.WARNING, logger="dispatcher_svc.service"):
        assert await env.settler.sweep() == 0
    warned = f"task {T}: approval ap-1 not settled yet: RuntimeError('tool_svc fell over')"
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [warned]
    assert await env.indexed() == [f"{T} ap-1"]  # comes due again after the hold


async def test_an_unindex_that_fails_is_logged_not_raised(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    async def down(task_id: str, approval_id: str) -> None:
        raise AgentmeshError(ErrorCode.UNAVAILABLE, "redis unavailable")

    env.tasks.unindex_approval = down  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="dispatcher_svc.service"):
        await env.settler.unindex(T, "ap-1")
    assert [r.getMessage() for r in caplog.records] == [
        f"task {T}: approval ap-1 left in the expiry index: UNAVAILABLE: redis unavailable"
    ]


async def test_an_approval_is_due_at_its_expiry_and_applied_as_tool_svc_decided(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = await env.park("ap-1", expire_ms=10_000)
    assert record.pending is not None
    env.tools.answers["ap-1"] = record_of(record.pending, "APPROVED", resolved_by="bob")

    async def now_is_the_expiry() -> int:
        return 10_000

    monkeypatch.setattr(env.tasks, "redis_time_ms", now_is_the_expiry)
    assert await env.settler.expire(T, "ap-1")
    resolved = (await env.events())[1]
    assert resolved.message == "approval ap-1 approved by bob"  # tool_svc's decision, not an expiry
    (call,) = (await env.tasks.load(T)).cursor.calls
    assert call.state == CallStage.RUNNING and call.resolved is None  # re-sent: tool_svc replays its outcome


async def test_a_decision_without_a_resolver_names_none(env: Env) -> None:
    record = await env.park("ap-1", expire_ms=1)
    assert record.pending is not None
    env.tools.answers["ap-1"] = record_of(record.pending, "DENIED", reason="policy")
    assert await env.settler.expire(T, "ap-1")
    resolved = (await env.events())[1]
    assert resolved.attributes == {"state": "DENIED", "resolved_by": ""}
