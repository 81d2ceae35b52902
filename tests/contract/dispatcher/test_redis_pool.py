"""200 tasks at once over a Redis pool of 20 connections (issue 19; agentmesh/store.py).

The pool blocks for a free connection (up to `redis.pool_timeout_s`) instead of raising
MaxConnectionsError at once, so no task run is interrupted and none is re-claimed by the
idle-owner sweep (a task's `runs` counts its acquisitions: 1 means it ran once, start to end).
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from agentmesh.store import Store
from agentmesh.v1 import dispatcher_pb2
from dispatcher_svc import testhooks
from dispatcher_svc.tasks import TaskRecord
from tests.contract.dispatcher.conftest import MakeMesh
from tests.contract.dispatcher.test_dispatcher_grpc import calc_policy, run

D = dispatcher_pb2
TASKS = 200
POOL = 20


async def test_200_concurrent_tasks_share_20_redis_connections(
    make_mesh: MakeMesh, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.WARNING)
    monkeypatch.setenv("AGENTMESH_REDIS_MAX_CONNECTIONS", str(POOL))  # redis.max_connections: 20
    mesh = await make_mesh(
        calc_policy,
        {"calc": lambda a: str(a["a"] + a["b"])},
        dispatcher={"max_concurrent_tasks": TASKS, "claim_idle_s": 5.0, "claim_interval_s": 0.5},
    )
    assert mesh.dispatcher.settings.redis.max_connections == POOL
    store = mesh.dispatcher.host.store
    assert isinstance(store, Store)
    assert store.connection_limit == POOL

    results = await asyncio.gather(*(run(mesh, f"add {i}") for i in range(TASKS)))

    assert [r[-1].status for r in results] == [D.TASK_STATUS_SUCCEEDED] * TASKS
    assert mesh.tools.runs["calc"] == TASKS
    for events in results:
        task_id = events[0].task_id
        runs = int(await store.redis.hget(store.keys.task(task_id), "runs") or 0)
        assert runs == 1, f"task {task_id} was interrupted and ran {runs} times"
        assert not [e for e in events if e.kind == D.TASK_EVENT_KIND_INCIDENT]
    logged = caplog.text
    assert "MaxConnectionsError" not in logged and "Too many connections" not in logged
    assert "pool exhausted" not in logged


async def test_a_run_that_makes_no_progress_gives_up_its_claim(
    make_mesh: MakeMesh, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 39: a run stuck where it can make no progress (as on a Redis pool that never frees a
    connection for it) kept its claim renewed and its task RUNNING for good. Past the liveness window
    its claim is given up: the run is cancelled, the task handed back and resumed from its last
    checkpoint (the call is sent again with its key: replayed, not run twice)."""
    caplog.set_level(logging.WARNING)
    stuck: list[str] = []

    async def hang_once(point: str, record: TaskRecord) -> None:
        if point == "after_tool_call" and not stuck:
            stuck.append(record.task_id)
            await asyncio.Event().wait()  # no progress, ever; the renewer alone would keep the claim

    monkeypatch.setattr(testhooks, "from_env", lambda: hang_once)
    mesh = await make_mesh(
        calc_policy,
        {"calc": lambda a: str(a["a"] + a["b"])},
        dispatcher={"claim_idle_s": 1.0, "liveness_s": 2.0},
    )
    events = await run(mesh, "add 20 and 22")

    assert stuck and events[-1].status == D.TASK_STATUS_SUCCEEDED, [e.message for e in events]
    assert mesh.tools.runs["calc"] == 1
    store = mesh.dispatcher.host.store
    assert isinstance(store, Store)
    assert int(await store.redis.hget(store.keys.task(stuck[0]), "runs") or 0) == 2
    assert "no progress for" in caplog.text and "giving up its claim" in caplog.text
    assert not [e for e in events if e.status == D.TASK_STATUS_FAILED]
