"""Relays under random kills (issue 44's crash safety at random points): four-agent relays in the three
shapes of test_relay_acceptance (transfer, ask, transfer checked by a verifier) run on two dispatcher
replicas while one of them, picked at random, is killed with -9 at random moments and restarted on its
port. The harness's client is the chaos run's (tests/chaos/driver.py: each call on a replica that
answers). Then every relay must have completed with exactly its tasks (one child a hop, one verifier task
a verification round), every task's events once and in order, every planted value at the last agent.

Its own make target (`make test` has the fixed kill points of test_handoff_crash.py): `make chaos-relay`
(40 relays, 12 kills; `PYTEST_ARGS=--redis=cluster` on a Redis Cluster). The knobs:
AGENTMESH_RELAY_CHAOS_RUNS (unset: skipped), _KILLS, _SEED.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from pathlib import Path

import pytest

from agentmesh.cli.demo_relay import GOAL, PLANTED, write_log
from agentmesh.v1 import dispatcher_pb2
from tests.chaos.driver import Client
from tests.e2e.conftest import free_port
from tests.e2e.dispatcher.conftest import Mesh, kill9
from tests.e2e.dispatcher.test_relay_acceptance import ENDED, ROLES, overlay

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not os.environ.get("AGENTMESH_RELAY_CHAOS_RUNS"), reason="a chaos run: make chaos-relay (over a minute)"
    ),
]
D = dispatcher_pb2
RUNS = int(os.environ.get("AGENTMESH_RELAY_CHAOS_RUNS") or "6")
KILLS = int(os.environ.get("AGENTMESH_RELAY_CHAOS_KILLS", "3"))
SEED = int(os.environ.get("AGENTMESH_RELAY_CHAOS_SEED", "44"))
MODES = ("transfer", "ask", "verified")
SUBJECT = "alice"


async def _settled(client: Client, task_id: str, deadline: float) -> D.Task:
    while True:
        task = await client.get_task(task_id, within_s=60)
        if task.status in (*ENDED, D.TASK_STATUS_HANDED_OFF):
            return task
        assert time.monotonic() < deadline, f"task {task_id} ({task.agent_id}) is {D.TaskStatus.Name(task.status)}"
        await asyncio.sleep(0.2)


async def _events(client: Client, task_id: str) -> list[D.TaskEvent]:
    md = client.metadata(SUBJECT)

    async def watch(stub: object) -> list[D.TaskEvent]:
        call = stub.WatchTask(D.WatchTaskRequest(task_id=task_id), metadata=md, timeout=30)  # type: ignore[attr-defined]
        return [r.event async for r in call if r.event.sequence]

    return await client.call(watch, within_s=60)


async def check_relay(client: Client, mode: str, root_id: str, resumed: list[str]) -> list[str]:
    """The violations of one relay (empty when it is whole); adds to `resumed` its tasks another owner resumed."""
    deadline = time.monotonic() + 180
    chain = [await _settled(client, root_id, deadline)]
    while chain[-1].child_task_id and chain[-1].status in (D.TASK_STATUS_HANDED_OFF, D.TASK_STATUS_SUCCEEDED):
        if len(chain) > len(ROLES):
            break
        chain.append(await _settled(client, chain[-1].child_task_id, deadline))
    where = f"{mode} relay {root_id}"
    agents = [t.agent_id for t in chain]
    if agents != [f"{mode}_{r}" for r in ROLES] or chain[-1].status != D.TASK_STATUS_SUCCEEDED:
        return [f"{where}: ended as {[(t.agent_id, D.TaskStatus.Name(t.status), t.error.message) for t in chain]}"]
    problems = []
    if missing := [name for name, value in PLANTED.items() if value not in chain[-1].goal]:
        problems.append(f"{where}: planted {missing} did not reach the last agent")
    md = client.metadata(SUBJECT)
    listed: D.ListTasksResponse = await client.call(
        lambda s: s.ListTasks(D.ListTasksRequest(root_task_id=root_id), metadata=md, timeout=10)
    )
    extra = sorted(t.agent_id for t in listed.tasks if t.task_id not in {c.task_id for c in chain})
    if extra != (["checker", "checker"] if mode == "verified" else []):
        problems.append(f"{where}: tasks beyond the chain: {extra}")
    for task in chain:
        events = await _events(client, task.task_id)
        if any("resumed on" in e.message for e in events if e.kind == D.TASK_EVENT_KIND_STATUS):
            resumed.append(task.task_id)
        if [e.sequence for e in events] != list(range(1, len(events) + 1)):
            problems.append(f"{where}: {task.agent_id}'s events are {[e.sequence for e in events]}")
        sent = [
            e.attributes["child_task_id"]
            for e in events
            if e.kind == D.TASK_EVENT_KIND_HANDOFF
            and e.attributes.get("parent_task_id") == task.task_id
            and e.attributes.get("mode") in ("transfer", "ask")
        ]
        if sent != ([] if task is chain[-1] else [task.child_task_id]):
            problems.append(f"{where}: {task.agent_id} sent hops to {sent}, its child is {task.child_task_id}")
    return problems


async def test_relays_complete_once_under_random_kills_of_their_dispatchers(mesh_env: Mesh, tmp_path: Path) -> None:
    mesh_env.env["AGENTMESH_CONFIG"] = os.pathsep.join([mesh_env.env["AGENTMESH_CONFIG"], str(overlay(tmp_path))])
    mesh_env.env["AGENTMESH_DISPATCHER"] = json.dumps(
        {"claim_idle_s": 1.5, "claim_interval_s": 0.2, "heartbeat_interval_s": 0.5}
    )
    write_log(tmp_path / "logs")
    for name in ("context", "tool", "provider"):
        await asyncio.to_thread(mesh_env.start, name)
    ports = {"dispatcher-a": mesh_env.ports["dispatcher"], "dispatcher-b": free_port()}
    for label, port in ports.items():
        await asyncio.to_thread(mesh_env.start, "dispatcher", label=label, port=port)
    rng = random.Random(SEED)
    client = Client([f"127.0.0.1:{port}" for port in ports.values()])
    try:
        md = client.metadata(SUBJECT)
        relays: list[tuple[str, str]] = []

        async def start(mode: str) -> None:
            request = D.StartTaskRequest(agent_id=f"{mode}_triage", goal=GOAL)
            reply: D.StartTaskResponse = await client.call(lambda s: s.StartTask(request, metadata=md, timeout=10))
            relays.append((mode, reply.task.task_id))

        async def chaos() -> list[str]:
            kills = []
            for _ in range(KILLS):
                await asyncio.sleep(rng.uniform(0.3, 2.5))
                label = rng.choice(sorted(ports))
                await asyncio.to_thread(kill9, mesh_env.processes[label])
                kills.append(label)
                await asyncio.sleep(rng.uniform(0.2, 2.0))
                await asyncio.to_thread(mesh_env.start, "dispatcher", label=label, port=ports[label])
            return kills

        async def starts() -> None:
            for i in range(RUNS):
                await start(MODES[i % len(MODES)])  # each shape as often
                await asyncio.sleep(rng.uniform(0, 0.5))

        kills, _ = await asyncio.gather(chaos(), starts())
        resumed: list[str] = []
        problems = [p for mode, root in relays for p in await check_relay(client, mode, root, resumed)]
        assert not problems, "\n".join(problems)
        shapes = {m: sum(1 for mode, _ in relays if mode == m) for m in MODES}
        print(
            f"relay chaos (seed {SEED}): {len(relays)} relays {shapes}, {len(kills)} kills {kills}; "
            f"{len(resumed)} relay tasks resumed by another owner; every relay whole"
        )
    finally:
        await client.close()
