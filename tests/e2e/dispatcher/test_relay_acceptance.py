"""Issue 44's acceptance relay across four service processes on one real Redis: four agents on the relay
policy (provider_svc/scenarios/relay.py), in both modes (transfer: control moves; ask: delegate and
wait). The first agent reads the service's log (where pod, heap and build are planted), the user's
words hold the ticket and the change window; the second agent adds a fact whose citation is fabricated.

Checked from outside the dispatcher: each hop summary under its cap; every confirmed fact's citation,
re-read from the parent session in Redis, holds the stated value; the fabricated one demoted and counted
(in the hop's event and the offloaded record); every planted value in the last agent's goal.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import grpc.aio
import pytest
import yaml

from agentmesh.cli.demo_relay import GOAL, HOP_CAP, PLANTED, write_log
from agentmesh.config import RedisSettings
from agentmesh.store import Store
from agentmesh.v1 import common_pb2, context_pb2, context_pb2_grpc, dispatcher_pb2, dispatcher_pb2_grpc
from context_svc.sessions import SessionStore
from tests.e2e.dispatcher.conftest import SERVICE_ORDER, Mesh

pytestmark = pytest.mark.e2e
D = dispatcher_pb2
ENDED = (D.TASK_STATUS_SUCCEEDED, D.TASK_STATUS_FAILED, D.TASK_STATUS_ABORTED, D.TASK_STATUS_CANCELLED)
ROLES = ("triage", "logs", "remediation", "reporter")
FABRICATED = "a cache leak in v2.1"
"""Stated by the second agent as confirmed, cited to the user's first message, which never said it."""
POLICY = "provider_svc.scenarios.relay"
RECORD_REF = re.compile(r'read_payload\(ref_id="([^"]+)"\)')


def overlay(tmp: Path) -> Path:
    """Both relays' agents (ids `<mode>_<role>`), each a scripted model of its own on the relay policy."""
    models: list[dict[str, Any]] = []
    agents: list[dict[str, Any]] = []

    def add(agent_id: str, args: dict[str, Any], tools: list[str], **more: Any) -> None:
        models.append({"name": agent_id, "policy": f"{POLICY}:relay_policy", "policy_args": args})
        agents.append(
            {"id": agent_id, "model": f"scripted/{agent_id}", "permissions": ["*:*:*"], "max_steps": 8}
            | {"tools": tools}
            | more
        )

    # `verified`: transfers, the second agent's checked by a verifier (`verify_with`) before they go on.
    for mode, verb in (("transfer", "transfer_to"), ("ask", "ask"), ("verified", "transfer_to")):
        chain = [f"{mode}_{role}" for role in ROLES]
        for i, (agent_id, role) in enumerate(zip(chain, ROLES, strict=True)):
            nxt = chain[i + 1] if i + 1 < len(chain) else ""
            args = {"role": role, "next_tool": f"{verb}_{nxt}" if nxt else ""}
            more: dict[str, Any] = {"handoffs": [{"to": nxt, "mode": verb.removesuffix("_to")}] if nxt else []}
            if role == "logs":
                args["fabricate"] = FABRICATED
                if mode == "verified":
                    more["verify_with"] = "checker"
            add(agent_id, args, ["query_logs"] if role == "triage" else ["none_here"], **more)
    add("checker", {"role": "verify"}, ["read_payload"], role="verifier")
    # A producer that keeps its fabricated fact after the verifier's correction: its task fails typed.
    add(
        "stubborn_triage",
        {"role": "triage", "next_tool": "transfer_to_stubborn_logs"},
        ["query_logs"],
        handoffs=["stubborn_logs"],
    )
    add(
        "stubborn_logs",
        {"role": "logs", "next_tool": "transfer_to_verified_remediation", "fabricate": FABRICATED, "stubborn": True},
        ["none_here"],
        handoffs=["verified_remediation"],
        verify_with="checker",
    )
    config = {
        "providers": {
            "backends": [{"name": "scripted", "type": "scripted", "rate_limit_per_min": None, "models": models}]
        },
        "agents": agents,
    }
    path = tmp / "relay_acceptance.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


async def _settled(stub: dispatcher_pb2_grpc.DispatcherServiceStub, mesh: Mesh, task_id: str) -> D.Task:
    deadline = time.monotonic() + 90
    while True:
        reply: D.GetTaskResponse = await stub.GetTask(
            D.GetTaskRequest(task_id=task_id), metadata=mesh.operator_metadata()
        )
        if reply.task.status in (*ENDED, D.TASK_STATUS_HANDED_OFF):
            return reply.task
        assert time.monotonic() < deadline, D.TaskStatus.Name(reply.task.status)
        await asyncio.sleep(0.1)


async def _events(stub: dispatcher_pb2_grpc.DispatcherServiceStub, mesh: Mesh, task_id: str) -> list[D.TaskEvent]:
    call = stub.WatchTask(D.WatchTaskRequest(task_id=task_id), metadata=mesh.operator_metadata(), timeout=30)
    return [r.event async for r in call if r.event.sequence]


async def relay(stub: dispatcher_pb2_grpc.DispatcherServiceStub, mesh: Mesh, mode: str) -> list[D.Task]:
    """The chain from the first agent's task to the last, each settled."""
    started = await stub.StartTask(
        D.StartTaskRequest(agent_id=f"{mode}_triage", goal=GOAL), metadata=mesh.operator_metadata()
    )
    return await chain_from(stub, mesh, started.task.task_id)


async def chain_from(stub: dispatcher_pb2_grpc.DispatcherServiceStub, mesh: Mesh, root_id: str) -> list[D.Task]:
    """The chain of `child_task_id`s from `root_id`, each task settled."""
    chain = [await _settled(stub, mesh, root_id)]
    followed = (D.TASK_STATUS_HANDED_OFF, D.TASK_STATUS_SUCCEEDED)  # a FAILED task's child: its verifier's
    while chain[-1].child_task_id and chain[-1].status in followed and len(chain) <= len(ROLES):
        chain.append(await _settled(stub, mesh, chain[-1].child_task_id))
    return chain


async def hop_record(mesh: Mesh, child: D.Task) -> dict[str, Any]:
    """The full record BuildHandoff offloaded, read as the child's task reads it (through its grant)."""
    found = RECORD_REF.search(child.goal)
    assert found, child.goal
    async with grpc.aio.insecure_channel(mesh.target("context")) as channel:
        stub = context_pb2_grpc.ContextServiceStub(channel)  # type: ignore[no-untyped-call]
        reply = await stub.GetPayload(
            context_pb2.GetPayloadRequest(session_id=child.task_id, ref_id=found.group(1)),
            metadata=mesh.agent_metadata(child.agent_id, ["*:*:*"], task_id=child.task_id),
            timeout=10,
        )
    record: dict[str, Any] = json.loads(reply.content)
    return record


async def check_citations(sessions: SessionStore, record: dict[str, Any]) -> tuple[int, list[dict[str, Any]]]:
    """Re-reads every confirmed fact's cited message from the parent session: it must hold the value.
    (confirmed count, the demoted facts with their check)."""
    facts, checked = record["brief"]["facts"], record["checked"]
    assert len(facts) == len(checked)
    confirmed, demoted = 0, []
    for fact, check in zip(facts, checked, strict=True):
        if check["kind"] == "confirmed":
            index = fact["citation"]["message_index"]
            [message] = await sessions.messages(record["session_id"], index, index)
            assert fact["value"] in message.content, (fact, message.content[:300])
            confirmed += 1
        elif check["reason"]:
            demoted.append({**fact, **check})
    return confirmed, demoted


@pytest.mark.parametrize("mode", ["transfer", "ask"])
async def test_a_four_agent_relay_checks_what_crosses_each_hop(mesh_env: Mesh, tmp_path: Path, mode: str) -> None:
    mesh_env.env["AGENTMESH_CONFIG"] = os.pathsep.join([mesh_env.env["AGENTMESH_CONFIG"], str(overlay(tmp_path))])
    write_log(tmp_path / "logs")  # the mesh's logs_dir: the log query_logs reads for the alert's service
    for name in SERVICE_ORDER:
        await asyncio.to_thread(mesh_env.start, name)
    store = await Store.connect(RedisSettings(url=mesh_env.env["AGENTMESH_REDIS_URL"]), "dev")
    sessions = SessionStore(store)
    async with store, grpc.aio.insecure_channel(mesh_env.target("dispatcher")) as channel:
        stub = dispatcher_pb2_grpc.DispatcherServiceStub(channel)  # type: ignore[no-untyped-call]
        chain = await relay(stub, mesh_env, mode)
        described = [(t.agent_id, D.TaskStatus.Name(t.status), t.error.message) for t in chain]
        assert [t.agent_id for t in chain] == [f"{mode}_{r}" for r in ROLES], described
        ends = [D.TASK_STATUS_SUCCEEDED] * 4 if mode == "ask" else [D.TASK_STATUS_HANDED_OFF] * 3
        assert [t.status for t in chain] == [*ends[:3], D.TASK_STATUS_SUCCEEDED], described
        assert {t.root_task_id for t in chain} == {chain[0].task_id}
        for i, (parent, child) in enumerate(itertools.pairwise(chain)):
            hops = [
                e
                for e in await _events(stub, mesh_env, parent.task_id)
                if e.kind == D.TASK_EVENT_KIND_HANDOFF
                and e.attributes.get("mode") == mode
                and e.attributes["parent_task_id"] == parent.task_id  # its own hop, not the one it came by
            ]
            assert len(hops) == 1, [e.message for e in hops]
            hop = hops[0].attributes
            assert hop["child_task_id"] == child.task_id
            assert 0 < int(hop["hop_tokens"]) <= HOP_CAP, hop
            record = await hop_record(mesh_env, child)
            assert record["session_id"] == parent.task_id and record["child_session_id"] == child.task_id
            confirmed, demoted = await check_citations(sessions, record)
            assert int(hop["confirmed"]) == confirmed > 0, hop
            assert int(hop["demoted"]) == len(demoted), (hop, demoted)
            if ROLES[i] == "logs":  # the fabricated citation: demoted, counted, never shown as confirmed
                assert [(d["value"], d["kind"], d["reason"]) for d in demoted] == [
                    (FABRICATED, "inferred", "value_not_in_source")
                ]
                confirmed_part = child.goal.split("Inferred facts")[0]
                assert FABRICATED not in confirmed_part
            else:
                assert demoted == []
        last = chain[-1]
        missing = [name for name, value in PLANTED.items() if value not in last.goal]
        assert not missing, (missing, last.goal)
        if mode == "ask":  # the delegated answers came back up to the first agent
            assert "--- delegated answer ---" in chain[0].answer and "Report:" in chain[0].answer


async def test_a_verifier_rejects_an_unsupported_conclusion_once(mesh_env: Mesh, tmp_path: Path) -> None:
    """The second agent's transfers go to a verifier first (`verify_with`): it re-reads the hop's record
    through read_payload and rejects the fabricated fact; told so (VERIFICATION_REJECTED, CONTRACT), the
    producer hands over without it, the verifier accepts and the relay completes. A producer that keeps
    the fact is rejected again and fails with that code; nothing goes past it."""
    mesh_env.env["AGENTMESH_CONFIG"] = os.pathsep.join([mesh_env.env["AGENTMESH_CONFIG"], str(overlay(tmp_path))])
    write_log(tmp_path / "logs")
    for name in SERVICE_ORDER:
        await asyncio.to_thread(mesh_env.start, name)
    md = mesh_env.operator_metadata()
    async with grpc.aio.insecure_channel(mesh_env.target("dispatcher")) as channel:
        stub = dispatcher_pb2_grpc.DispatcherServiceStub(channel)  # type: ignore[no-untyped-call]
        chain, stubborn = await asyncio.gather(relay(stub, mesh_env, "verified"), relay(stub, mesh_env, "stubborn"))

        described = [(t.agent_id, D.TaskStatus.Name(t.status), t.error.message) for t in chain]
        assert [t.agent_id for t in chain] == [f"verified_{r}" for r in ROLES], described
        assert chain[-1].status == D.TASK_STATUS_SUCCEEDED, described
        assert all(value in chain[-1].goal for value in PLANTED.values())
        assert FABRICATED not in chain[2].goal and FABRICATED not in chain[-1].goal  # dropped on correction
        listed = await stub.ListTasks(D.ListTasksRequest(root_task_id=chain[0].task_id), metadata=md)
        checks = sorted(
            (t for t in listed.tasks if t.agent_id == "checker"), key=lambda t: t.create_time.ToNanoseconds()
        )
        verdicts = [json.loads(t.output_json) for t in checks]
        assert [v["verdict"] for v in verdicts] == ["rejected", "accepted"], verdicts
        assert FABRICATED in verdicts[0]["reasons"][0] and "value_not_in_source" in verdicts[0]["reasons"][0]
        assert {t.parent_task_id for t in checks} == {chain[1].task_id}
        events = await _events(stub, mesh_env, chain[1].task_id)
        assert [e.sequence for e in events] == list(range(1, len(events) + 1))
        asked = [e for e in events if e.kind == D.TASK_EVENT_KIND_HANDOFF and e.attributes.get("mode") == "verify"]
        assert [e.attributes["child_task_id"] for e in asked] == [t.task_id for t in checks]
        told = [e for e in events if "VERIFICATION_REJECTED" in e.message]
        # The rejection is the transfer call's typed result, and the model is corrected once.
        assert [e.kind for e in told] == [D.TASK_EVENT_KIND_TOOL_RESULT, D.TASK_EVENT_KIND_CORRECTION], told

        described = [(t.agent_id, D.TaskStatus.Name(t.status), t.error.message) for t in stubborn]
        assert [t.agent_id for t in stubborn] == ["stubborn_triage", "stubborn_logs"], described
        failed = stubborn[-1]
        assert failed.status == D.TASK_STATUS_FAILED, described
        assert failed.error.code == common_pb2.ERROR_CODE_VERIFICATION_REJECTED, failed.error
        assert "verifier checker rejected the handoff" in failed.error.message
        listed = await stub.ListTasks(D.ListTasksRequest(root_task_id=stubborn[0].task_id), metadata=md)
        agents = sorted(t.agent_id for t in listed.tasks)
        assert agents == ["checker", "checker", "stubborn_logs", "stubborn_triage"]  # nothing went past it
