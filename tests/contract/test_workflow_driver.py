"""The workflow driver (issue 46) on the real test Redis with fake step ports: two replicas fire a
schedule tick once; a replica that stops mid-run is replaced by another, which finishes the run
without re-running a finished node."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from agentmesh.store import Store
from agentmesh.workflow_config import WorkflowsSettings
from dispatcher_svc.workflows.catalog import definition_from_data
from dispatcher_svc.workflows.driver import ORPHAN_S, Driver
from dispatcher_svc.workflows.executor import Executor, StepResult
from dispatcher_svc.workflows.runs import RunStore
from dispatcher_svc.workflows.state import NodeStatus, RunStatus
from dispatcher_svc.workflows.validate import Names, Workflow, compile_workflow
from tests.contract.test_workflow_runs import Clock, FakePort

NAMES = Names(frozenset({"bot"}), frozenset())


def flow(name: str, nodes: list[dict[str, Any]], **extra: Any) -> Workflow:
    return compile_workflow(definition_from_data({"name": name, "nodes": nodes, **extra}), NAMES, WorkflowsSettings())


def replica(store: Store, port: FakePort, owner: str, clock: Clock, lease_ms: int = 30_000) -> Driver:
    executor = Executor(
        RunStore(store, ttl_s=3600),
        port,
        owner=owner,
        limits=WorkflowsSettings(),
        clock=clock,
        draw=lambda: 0.0,
        lease_ms=lease_ms,
    )
    return Driver(store, executor, poll_s=0.0)


async def test_two_replicas_fire_a_schedule_tick_once(store: Store) -> None:
    daily = flow(
        "daily",
        [{"id": "report", "type": "agent", "agent": "bot", "goal": "{{ input.what }}"}],
        schedule={"cron": "0 7 * * *", "input": {"what": "the daily report"}},
    )
    clock = Clock()
    clock.now = datetime(2026, 12, 6, 7, 0, 20, tzinfo=UTC).timestamp()
    port = FakePort()
    a, b = replica(store, port, "a", clock, lease_ms=200), replica(store, port, "b", clock, lease_ms=200)
    fired = await asyncio.gather(a.fire_schedules({"daily": daily}), b.fire_schedules({"daily": daily}))
    assert sorted(run for runs in fired for run in runs) == ["daily.schedule.20261206T0700Z"]
    assert await a.fire_schedules({"daily": daily}) == []  # the tick is done
    await asyncio.gather(a.tick(), b.tick())
    assert list(port.started) == ["daily.schedule.20261206T0700Z.report.-.1"]
    assert port.started["daily.schedule.20261206T0700Z.report.-.1"].goal == "the daily report"
    # The next day's tick, while the first run is unfinished: overlap skip fires nothing.
    clock.now += 24 * 3600
    assert await a.fire_schedules({"daily": daily}) == []
    port.results["daily.schedule.20261206T0700Z.report.-.1"] = StepResult("done")
    await asyncio.sleep(0.3)  # whichever replica advanced it last, its lease is over
    assert (await b.tick())["daily.schedule.20261206T0700Z"] == RunStatus.SUCCEEDED
    assert await b.fire_schedules({"daily": daily}) == ["daily.schedule.20261207T0700Z"]


async def test_a_replica_that_stops_mid_run_is_replaced_without_rerunning_finished_nodes(store: Store) -> None:
    chain = flow(
        "chain",
        [
            {"id": "one", "type": "agent", "agent": "bot", "goal": "1"},
            {"id": "two", "type": "agent", "agent": "bot", "goal": "2", "after": ["one"]},
            {"id": "three", "type": "agent", "agent": "bot", "goal": "3", "after": ["two"]},
        ],
    )
    clock = Clock()
    port = FakePort()
    a = replica(store, port, "a", clock, lease_ms=1000)
    b = replica(store, port, "b", clock, lease_ms=1000)
    await a.submit("chain-1", chain, {})
    await a.tick()
    port.results["chain-1.one.-.1"] = StepResult(1)
    await a.tick()  # one finished, two started; then replica a stops (kill -9: no more ticks, lease held)
    assert (await b.tick()) == {"chain-1": None}  # a's lease is live: b leaves the run alone
    await asyncio.sleep(1.1)  # the lease runs out (Redis' clock)
    clock.now += 2  # and b looks again after a lease
    port.results["chain-1.two.-.1"] = StepResult(2)
    assert (await b.tick()) == {"chain-1": RunStatus.RUNNING}
    port.results["chain-1.three.-.1"] = StepResult(3)
    assert (await b.tick()) == {"chain-1": RunStatus.SUCCEEDED}
    assert port.start_calls.count("chain-1.one.-.1") == 1 and port.start_calls.count("chain-1.two.-.1") == 1
    record = await b.executor.runs.load("chain-1")
    assert {record.state[n].status for n in ("one", "two", "three")} == {NodeStatus.SUCCEEDED}
    assert await b.tick() == {}  # a finished run leaves the index


async def test_an_index_entry_without_a_run_waits_then_goes(store: Store) -> None:
    clock = Clock()
    a = replica(store, FakePort(), "a", clock)
    await store.redis.zadd(a.index_key, {"ghost": int(clock.now * 1000)})
    assert await a.tick() == {}
    assert await store.redis.zscore(a.index_key, "ghost") is not None  # a submit may be under way
    clock.now += ORPHAN_S + 1
    await a.tick()
    assert await store.redis.zscore(a.index_key, "ghost") is None
