"""The Store on a real Redis Cluster, in `make test` (issue 28): a whole task on 3 primaries and 3
replicas with `redis.cluster_wait_replicas: 1`, every Lua script of the code base once (each in one
slot), a primary killed with -9 under durable writes, and the misconfigurations refused typed.
`make test-cluster` runs the contract and end-to-end suites on a cluster as well."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis.exceptions as rexc
from redis.crc import key_slot

from agentmesh import clusterclient, payload_grants
from agentmesh.apikeys import ApiKeys
from agentmesh.config import DispatcherSettings, GatewaySettings, QuotaLimits, RedisSettings, RoutingSettings
from agentmesh.dev.localredis import LocalRedis
from agentmesh.errors import ErrorCode, NotFoundError, UnavailableError
from agentmesh.payloads import PayloadStore
from agentmesh.store import SCRIPTS, Store, StoreMisconfiguredError, StoreScript
from agentmesh.v1 import dispatcher_pb2
from agentmesh.workflow_config import WorkflowsSettings
from context_svc.model import Summary
from context_svc.sessions import SessionStore
from dispatcher_svc.agent_load import AgentLoad
from dispatcher_svc.model import EventKind, TaskEvent, TaskStatus
from dispatcher_svc.queue import TaskQueue
from dispatcher_svc.task_index import TaskIndex
from dispatcher_svc.tasks import TaskStore
from dispatcher_svc.workflows.catalog import definition_from_data
from dispatcher_svc.workflows.runs import RunStore
from dispatcher_svc.workflows.state import RunStatus
from dispatcher_svc.workflows.validate import Names, compile_workflow
from provider_svc.quotas import Quotas
from tests.contract.stack import AGENT, Stack
from tests.rediscluster import LocalRedisCluster
from tool_svc import approvals as approvals_mod
from tool_svc import idempotency as idempotency_mod
from tool_svc.breaker import BreakerConfig
from tool_svc.shared_breaker import SharedBreakers

REPO = Path(__file__).resolve().parents[2]
SCRIPT_NAME = re.compile(r"\.script\(\s*\"([a-z0-9_]+)\",\s*[A-Z_]*LUA\b")  # (name, its *_LUA source)
D = dispatcher_pb2
SINGLE_REDIS_ONLY = {"dispatcher_create_take"}
"""Scripts whose keys span slots, run only on a single Redis (task_create.py: a Cluster creates, queues
and acquires a task apart): never run here."""


def scripts_in_the_code() -> set[str]:
    """Every Lua script the services register (`store.script("<name>", ...)`), and the Store's own."""
    found = set(SCRIPTS)
    for folder in ("agentmesh", "context_svc", "tool_svc", "provider_svc", "dispatcher_svc"):
        for path in (REPO / folder).rglob("*.py"):
            found.update(SCRIPT_NAME.findall(path.read_text(encoding="utf-8")))
    return found


def slot_of(key: str | bytes) -> int:
    return key_slot(key.encode() if isinstance(key, str) else key)


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[str, ...]]]:
    """Every script run in this process: (name, keys)."""
    runs: list[tuple[str, tuple[str, ...]]] = []
    original = StoreScript.__call__

    async def record(self: StoreScript, keys: Any = (), args: Any = ()) -> Any:
        runs.append((self.name, tuple(keys)))
        return await original(self, keys, args)

    monkeypatch.setattr(StoreScript, "__call__", record)
    return runs


async def the_other_scripts(store: Store) -> None:
    """The scripts a plain task run does not need, run once through their owners."""
    sessions = SessionStore(store)
    session = "s-cluster"
    summary = Summary((), (), (), (), 0, 0, "extractive")
    with pytest.raises(NotFoundError):  # no such session: the script ran all the same
        await sessions.commit_summary(session, -1, summary)
    await sessions.count_rejection(session)
    token = await sessions.lease(session, 5)
    assert token is not None
    await sessions.release(session, token)
    assert await sessions.seen(session, "c:none") is None
    tasks = TaskStore(store, DispatcherSettings())
    assert await tasks.due_approvals(10, 1000) == []
    assert "t-cluster" in [e.task_id for e in await TaskIndex(store).page(10, min_ms=0)]  # ListTasks' page
    queue = TaskQueue(store, "dispatchers", "c1")
    await queue.ensure_group()
    assert await queue.touch("0-1") is False
    assert await queue.ack_if_mine("0-1") is False  # a finished run's entry goes by XACK + XDEL instead
    assert (await queue.stats()).oldest_waiting_s >= 0  # the metrics' sample (no pipelined TIME on a cluster)
    approval = store.keys.approval("a-cluster")
    record = json.dumps({"tool": "x"})
    for name, source in (
        ("approval_create", approvals_mod._CREATE_LUA),
        ("approval_create_nx", approvals_mod._CREATE_NX_LUA),
    ):
        async with store.guard(name):
            await store.script(name, source, durable=True)(keys=[approval], args=[record, 60, 60])
    async with store.guard("approval"):
        assert await store.script("approval_get", approvals_mod._GET_LUA)(keys=[approval])
        decided = await store.script("approval_decide", approvals_mod._DECIDE_LUA, durable=True)(
            keys=[approval], args=["approved", "op", "ok", ""]
        )
        assert decided[0] == b"decided"
        idem = store.keys.idempotency("k-cluster")
        hb = await store.script("idempotency_heartbeat", idempotency_mod._HEARTBEAT_LUA)(
            keys=[idem, idem + ":hb"], args=["t", 1000]
        )
        assert hb == 0
    breakers = SharedBreakers(store, BreakerConfig(failure_threshold=2))
    assert await breakers.admit("a", "t") is None
    await breakers.record("a", "t", success=False)
    stored = await PayloadStore(store).put(session, b"x" * 3000, "text/plain")
    # BuildHandoff's grant of a parent's payload to a child session (issue 44): the child's slot.
    await payload_grants.grant(store, "cluster-child", {stored.ref_id: session}, 60)
    await store.take_token(store.keys.ratelimit("cluster"), 10, 1)
    # provider_svc's quotas (issue 43): an API key's scope reads its record in the same slot.
    _, key = await ApiKeys(store).create(agent_id="cluster-bot", environment="dev", limits=QuotaLimits(rpm=5))
    quotas = Quotas(store, GatewaySettings(agents={"cluster-bot": QuotaLimits(budget_usd_day=1.0)}))
    scopes = quotas.scopes(key_id=key.key_id, agent="cluster-bot", subject="acme:cluster-bot")
    held = await quotas.reserve(scopes, reserve_usd=0.01, tokens=10)
    await quotas.settle(held, cost_usd=0.005, tokens=8)
    # Workflow runs (issue 46): create, acquire and a fenced commit touch one run's keys (one slot).
    runs = RunStore(store, ttl_s=60)
    one_node = {"name": "cw", "nodes": [{"id": "a", "type": "agent", "agent": "bot", "goal": "g"}]}
    flow = compile_workflow(definition_from_data(one_node), Names(frozenset({"bot"}), frozenset()), WorkflowsSettings())
    run_id = f"cluster-run-{time.time_ns()}"
    await runs.create(run_id, flow, {}, now_ms=1)
    fence = await runs.acquire(run_id, "c1", 1000)
    assert fence is not None
    run = await runs.load(run_id)
    await runs.commit(run_id, fence, run.state, RunStatus.SUCCEEDED, [{"kind": "run"}])
    assert [seq for seq, _ in await runs.events(run_id)] == [1, 2]
    # Capability routing's load (issue 44): a member whose task is gone is dropped by repair's script.
    load = AgentLoad(store, RoutingSettings())
    await load.entered("cluster-agent", "t-gone")
    assert await load.repair("cluster-agent", grace_ms=-1000) == 1
    await load.ended("cluster-agent", "t-gone", TaskStatus.FAILED, first=True)
    # The stack's two tasks ended: its agent's depth is back to 0, two ended, none FAILED.
    assert await load.signals(["cluster-agent", AGENT]) == (
        {"cluster-agent": 0, AGENT: 0},
        {"cluster-agent": (1, 1), AGENT: (2, 0)},
    )


async def test_a_task_and_every_lua_script_run_on_the_cluster_each_in_one_slot(
    cluster_url: str, redis_cluster: LocalRedisCluster, recorded: list[tuple[str, tuple[str, ...]]], tmp_path: Path
) -> None:
    durable = {"redis": {"cluster_wait_replicas": 1}}
    async with Stack(cluster_url, tmp_path, durable) as stack:
        events = [e for e in await stack.run("compute 6*7 please", task_id="t-cluster") if e.sequence]
        assert events[-1].status == D.TASK_STATUS_SUCCEEDED, events[-1]
        assert any(e.message.startswith("ANSWER:") and "42" in e.message for e in events), events
        assert [e.sequence for e in events] == list(range(1, len(events) + 1))
        # A second turn on the same session (issue 24): context_svc's attach script on the cluster.
        turn = [e for e in await stack.run("compute 2*3 please", session_id="t-cluster") if e.sequence]
        assert turn[-1].status == D.TASK_STATUS_SUCCEEDED, turn[-1]
        await the_other_scripts(stack.store("dispatcher"))
    # (the provider's usage ledger flushed at shutdown: usage_record ran too)

    ran = {name for name, _ in recorded}
    missing = scripts_in_the_code() - SINGLE_REDIS_ONLY - ran
    assert not missing, f"scripts never run on the cluster: {sorted(missing)}"
    assert not ran & SINGLE_REDIS_ONLY, "a script whose keys span slots ran on the cluster"
    for name, keys in recorded:
        assert len({slot_of(k) for k in keys}) <= 1, f"{name} spans slots: {keys}"
    # Durable writes waited for a replica: WAIT ran on the primaries.
    waits = 0
    for port in redis_cluster.primaries():
        with redis_cluster._client(port) as client:
            waits += int(client.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))
    assert waits > 0


async def test_a_primary_killed_under_durable_writes_fails_over_losing_no_acknowledged_write(
    fresh_cluster: LocalRedisCluster,
) -> None:
    settings = RedisSettings(
        url=fresh_cluster.url, cluster_wait_replicas=1, socket_timeout_s=1.5, cluster_wait_timeout_s=0.5
    )
    store = await Store.connect(settings, "dev")
    tasks = TaskStore(store, DispatcherSettings())
    ids = [f"fo-{i}" for i in range(12)]  # spread over the three primaries
    for task_id in ids:
        event = TaskEvent(task_id, 0, EventKind.STATUS, time_ms=1, message="created")
        await tasks.commit(task_id, fence=None, fields={"status": "1"}, events=[event])
    acked: dict[str, list[str]] = {task_id: [] for task_id in ids}
    errors: Counter[str] = Counter()
    stop = asyncio.Event()

    async def writer(task_id: str) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            text = f"{task_id}#{n}"
            try:
                await tasks.commit(task_id, fence=0, events=[TaskEvent(task_id, 0, EventKind.STATUS, 1, message=text)])
                acked[task_id].append(text)
            except UnavailableError as exc:
                errors[exc.code.name] += 1
            await asyncio.sleep(0.01)

    writers = [asyncio.create_task(writer(t)) for t in ids]
    try:
        # Every writer has a write acknowledged before the kill (durable writes wait for a replica: on a
        # loaded machine 0.5 s was not always enough for all twelve).
        warm_up = time.monotonic() + 20
        while time.monotonic() < warm_up and not all(acked[t] for t in ids):
            await asyncio.sleep(0.05)
        assert all(acked[t] for t in ids), (
            f"writes acknowledged before the failover: { {t: len(acked[t]) for t in ids} }"
        )
        victim_key = store.keys.task(ids[0])
        victim, promoted = await asyncio.to_thread(fresh_cluster.failover)  # kill -9, wait for the replica
        assert fresh_cluster.primary_of_key(victim_key) == promoted or promoted in fresh_cluster.primaries()
        await asyncio.to_thread(fresh_cluster.restart, victim)  # back as the new primary's replica
        await asyncio.to_thread(fresh_cluster.wait_healthy, 30)
        mid = {t: len(a) for t, a in acked.items()}
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not all(len(acked[t]) > mid[t] + 2 for t in ids):
            await asyncio.sleep(0.1)
    finally:
        stop.set()
        await asyncio.gather(*writers)
    assert errors and set(errors) == {"UNAVAILABLE"}, errors  # typed, during the failover
    assert all(len(acked[t]) > mid[t] + 2 for t in ids), "no progress after the failover"
    for task_id in ids:
        stored = {e.message for e in await _events(store, task_id)}
        lost = [text for text in acked[task_id] if text not in stored]
        assert not lost, f"acknowledged but lost in the failover: {lost[:5]}"
    await store.close()


async def _events(store: Store, task_id: str) -> list[Any]:
    from dispatcher_svc.events import EventLog

    log = EventLog(store, TaskStore(store, DispatcherSettings()), 1.0)
    return await log.read(task_id, 0, count=100_000)


# --- configuration and misconfiguration --------------------------------------------------------------


async def test_a_cluster_url_on_a_standalone_server_is_refused_typed(redis_url: str) -> None:
    if redis_url.startswith("redis+cluster"):
        pytest.skip("needs the standalone shared server")
    url = redis_url.replace("redis://", "redis+cluster://")
    with pytest.raises(StoreMisconfiguredError, match="not a Redis Cluster node"):
        await Store.connect(RedisSettings(url=url), "dev")
    with pytest.raises(StoreMisconfiguredError, match="not a Redis Cluster node"):
        await Store.connect(RedisSettings(url=redis_url, cluster=True), "dev")


async def test_the_standalone_client_on_a_cluster_node_is_refused_typed(redis_cluster: LocalRedisCluster) -> None:
    plain = f"redis://127.0.0.1:{redis_cluster.primaries()[0]}/0"
    with pytest.raises(StoreMisconfiguredError, match="is a Redis Cluster node"):
        await Store.connect(RedisSettings(url=plain), "dev")
    # ... while redis.cluster: true makes the same URL a seed of the cluster.
    async with await Store.connect(RedisSettings(url=plain, cluster=True), "dev") as store:
        assert store.cluster is not None and len(store.cluster.get_primaries()) == 3


async def test_unreachable_seeds_are_unavailable_and_bad_urls_misconfigured() -> None:
    with LocalRedis() as server:
        port = server.port
    with pytest.raises(UnavailableError) as caught:
        await Store.connect(
            RedisSettings(url=f"redis+cluster://:hunter2@127.0.0.1:{port}/0", connect_timeout_s=0.5), "dev"
        )
    assert caught.value.code is ErrorCode.UNAVAILABLE and "hunter2" not in caught.value.message
    for bad in ("redis+cluster:///0", "redis+cluster://127.0.0.1:notaport/0", "redis+cluster://127.0.0.1:99999/0"):
        with pytest.raises(StoreMisconfiguredError):
            await Store.connect(RedisSettings(url=bad), "dev")


async def test_wait_without_replicas_fails_the_write_typed(redis_url: str) -> None:
    if redis_url.startswith("redis+cluster"):
        pytest.skip("needs the standalone shared server (no replicas)")
    settings = RedisSettings(url=redis_url, cluster_wait_replicas=1, cluster_wait_timeout_s=0.1)
    async with await Store.connect(settings, "dev") as store:
        tasks = TaskStore(store, DispatcherSettings())
        with pytest.raises(UnavailableError) as caught:
            await tasks.commit("t1", fence=None, fields={"status": "1"})
        assert caught.value.metadata["reason"] == "replication"
        assert "reached 0 of 1 replicas" in caught.value.message
        # Not durable: read-only and best-effort scripts do not wait.
        assert (await store.take_token(store.keys.ratelimit("x"), 5, 1)).allowed


def test_wait_longer_than_a_command_may_take_is_refused() -> None:
    with pytest.raises(ValueError, match="below socket_timeout_s"):
        RedisSettings(cluster_wait_replicas=1, cluster_wait_timeout_s=2.0, socket_timeout_s=2.0)


async def test_a_connection_the_cluster_client_closed_under_a_command_is_a_lost_connection() -> None:
    # redis-py's cluster client may close an idle connection just taken by another command (after a
    # timeout on that node): the command dies with AttributeError in redis.asyncio.connection.
    namespace: dict[str, Any] = {"__name__": "redis.asyncio.connection"}
    exec("def send(writer):\n    writer.writelines([b'PING'])\n", namespace)
    with pytest.raises(rexc.ConnectionError, match="closed under the command"):
        async with clusterclient._closed_under_us():
            namespace["send"](None)
    with pytest.raises(AttributeError):  # ours, or anyone else's, stays a bug
        async with clusterclient._closed_under_us():
            None.writelines([b"PING"])  # type: ignore[attr-defined]
