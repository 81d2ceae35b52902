"""The run's lease (dispatcher_svc/lease.py): what a renewal sends, when a run must renew, and what a
refused renewal leaves behind. A fake TaskStore counts the fenced commits; a fake clock is the monotonic
time the lease reads (no sleeps)."""

from __future__ import annotations

import asyncio
import re
import types
from pathlib import Path
from typing import Any

import pytest

from agentmesh.config import DispatcherSettings
from dispatcher_svc import lease as lease_module
from dispatcher_svc.lease import Lease, NoProgressError, suspended_at
from dispatcher_svc.tasks import StaleOwnerError, TaskStore


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now


class Tasks:
    """Records every commit; the clock moves while a commit is in flight (a round trip to Redis)."""

    def __init__(self, clock: Clock, *, refuse: bool = False, trip_s: float = 0.25) -> None:
        self.clock = clock
        self.refuse = refuse
        self.trip_s = trip_s
        self.commits: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    async def commit(self, *args: Any, **kwargs: Any) -> None:
        self.commits.append((args, kwargs))
        self.clock.now += self.trip_s
        if self.refuse:
            raise StaleOwnerError("the task has another owner")


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock(100.0)
    monkeypatch.setattr(lease_module, "time", types.SimpleNamespace(monotonic=fake.monotonic))
    return fake


def make(tasks: Tasks, *, claim_idle_s: float = 4.0, confirmed_at: float = 100.0) -> Lease:
    store: TaskStore = tasks  # type: ignore[assignment]
    return Lease(store, "task-7", fence=42, claim_idle_s=claim_idle_s, confirmed_at=confirmed_at)


async def test_renew_sends_a_fenced_commit_of_the_whole_lease(clock: Clock) -> None:
    tasks = Tasks(clock)
    await make(tasks, claim_idle_s=4.5).renew()
    assert tasks.commits == [(("task-7",), {"fence": 42, "lease_ms": 4500})]


async def test_renew_counts_the_confirmation_from_when_it_was_sent(clock: Clock) -> None:
    # The lease runs from when Redis applied the renewal, which is no earlier than when it was sent:
    # counting from the answer would overstate how long the lease has left.
    tasks = Tasks(clock, trip_s=0.25)
    lease = make(tasks, confirmed_at=50.0)
    await lease.renew()
    assert lease.confirmed_at == 100.0
    assert clock.now == 100.25


async def test_refused_renewal_raises_and_keeps_the_old_confirmation(clock: Clock) -> None:
    tasks = Tasks(clock, refuse=True)
    lease = make(tasks, confirmed_at=97.0)
    with pytest.raises(StaleOwnerError):
        await lease.renew()
    assert lease.confirmed_at == 97.0
    # A stale owner keeps learning it: every later check renews again (and is refused again).
    with pytest.raises(StaleOwnerError):
        await lease.ensure()
    assert len(tasks.commits) == 2


async def test_ensure_trusts_a_confirmation_up_to_half_the_idle_time(clock: Clock) -> None:
    tasks = Tasks(clock)
    lease = make(tasks, claim_idle_s=4.0, confirmed_at=98.0)  # exactly 2.0 s = claim_idle_s / 2 old
    await lease.ensure()
    assert tasks.commits == []
    assert lease.confirmed_at == 98.0


async def test_ensure_renews_past_half_the_idle_time(clock: Clock) -> None:
    tasks = Tasks(clock)
    lease = make(tasks, claim_idle_s=4.0, confirmed_at=97.99)  # 2.01 s old
    await lease.ensure()
    assert tasks.commits == [(("task-7",), {"fence": 42, "lease_ms": 4000})]
    assert lease.confirmed_at == 100.0


async def test_ensure_does_not_renew_a_fresh_confirmation(clock: Clock) -> None:
    tasks = Tasks(clock)
    lease = make(tasks, claim_idle_s=4.0, confirmed_at=99.5)
    await lease.ensure()
    await lease.ensure()
    assert tasks.commits == []


async def test_ensure_never_renews_a_confirmation_from_the_future(clock: Clock) -> None:
    # A confirmation newer than now (sent, then the clock read again) is fresh, not 'old by its size'.
    tasks = Tasks(clock)
    lease = make(tasks, claim_idle_s=4.0, confirmed_at=103.0)
    await lease.ensure()
    assert tasks.commits == []


async def test_keep_renews_while_the_run_makes_progress_and_gives_up_after_the_liveness_window(clock: Clock) -> None:
    """The liveness rule (issue 39): the background renewal keeps the claim only while the run makes
    progress; past `liveness_s` without any it gives the claim up (NoProgressError), renewing nothing."""
    tasks = Tasks(clock)
    store: TaskStore = tasks  # type: ignore[assignment]
    lease = Lease(store, "task-7", fence=42, claim_idle_s=4.0, confirmed_at=100.0, liveness_s=10.0)
    clock.now = 109.0
    await lease.keep()  # 9 s without progress: still within the window
    clock.now = 115.0
    lease.progressed()  # a call answered at 115
    clock.now = 124.0
    await lease.keep()
    assert len(tasks.commits) == 2
    clock.now = 125.0
    await lease.keep()  # exactly the window without progress: still kept
    assert len(tasks.commits) == 3
    clock.now = 125.5
    with pytest.raises(NoProgressError, match=r"no progress for 10s \(liveness window 10s\)"):
        await lease.keep()
    assert len(tasks.commits) == 3  # no renewal once given up


async def test_keep_without_a_liveness_window_always_renews(clock: Clock) -> None:
    tasks = Tasks(clock)
    lease = make(tasks)
    clock.now = 10_000.0
    await lease.keep()
    assert len(tasks.commits) == 1


def test_the_liveness_window_defaults_to_twice_the_call_timeout_plus_the_claim_idle_time() -> None:
    assert DispatcherSettings().liveness_window_s == 2 * 60 + 15
    assert DispatcherSettings(liveness_s=30).liveness_window_s == 30
    assert DispatcherSettings(call_timeout_s=5, claim_idle_s=2).liveness_window_s == 12


# --- where a run that lost its claim waits (the log line of a claim given up) ------------------------


SOURCE = Path(__file__).read_text(encoding="utf-8").splitlines()


async def _inner(gate: asyncio.Future[None]) -> None:
    await gate


@types.coroutine
def _middle(gate: asyncio.Future[None]) -> Any:
    yield from _inner(gate)  # a generator-based coroutine: gi_frame / gi_yieldfrom


async def _outer(gate: asyncio.Future[None]) -> None:
    await _middle(gate)


async def _ping(n: int, gate: asyncio.Future[None]) -> None:
    await (_pong(n - 1, gate) if n else gate)


async def _pong(n: int, gate: asyncio.Future[None]) -> None:
    await (_ping(n - 1, gate) if n else gate)


async def test_a_waiting_run_is_named_by_its_three_innermost_frames() -> None:
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    run = asyncio.create_task(_outer(gate))
    await asyncio.sleep(0)
    where = suspended_at(run)
    found = re.fullmatch(
        r"_inner \(test_lease\.py:(\d+)\) <- _middle \(test_lease\.py:(\d+)\) <- _outer \(test_lease\.py:(\d+)\)", where
    )
    assert found, where
    assert [SOURCE[int(n) - 1].strip() for n in found.groups()] == [
        "await gate",
        "yield from _inner(gate)  # a generator-based coroutine: gi_frame / gi_yieldfrom",
        "await _middle(gate)",
    ]
    gate.set_result(None)
    await run
    assert suspended_at(run) == "?"  # finished: no frame left


async def test_a_deep_chain_is_read_to_fifty_frames() -> None:
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    run = asyncio.create_task(_ping(60, gate))
    await asyncio.sleep(0)
    # Frames 48..50 from the outside (_ping is even, _pong odd), innermost first.
    assert [part.split(" ")[0] for part in suspended_at(run).split(" <- ")] == ["_pong", "_ping", "_pong"]
    gate.set_result(None)
    await run


async def test_a_frame_of_code_without_a_file_path_is_named_too() -> None:
    namespace: dict[str, Any] = {}
    exec(compile("async def wait(gate):\n    await gate\n", "<generated>", "exec"), namespace)
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    run = asyncio.create_task(namespace["wait"](gate))
    await asyncio.sleep(0)
    assert suspended_at(run) == "wait (<generated>:2)"
    gate.set_result(None)
    await run
