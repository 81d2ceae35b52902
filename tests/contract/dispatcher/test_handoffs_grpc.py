"""Handoffs between agents (issue 44) through the real DispatcherService over gRPC, with fake
context/tool/provider servers whose scripted model plays each agent (picked by its system prompt)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from agentmesh.v1 import common_pb2, dispatcher_pb2, dispatcher_pb2_grpc
from tests.contract.dispatcher.conftest import MakeMesh, Mesh, answer, tool_call

D = dispatcher_pb2

BRIEF = {
    "summary": "payment-svc pods restart",
    "facts": [
        {"statement": "restarts since 09:00", "value": "2259", "citation": {"message_index": 0}},
        {"statement": "memory is the cause", "basis": "OOMKilled seen"},
    ],
    "open_questions": ["which deploy?"],
}


def agent(agent_id: str, *handoffs: Any, **more: Any) -> dict[str, Any]:
    return {
        "id": agent_id,
        "model": "fake/m",
        "system_prompt": f"agent {agent_id}",
        "permissions": ["dev:test:read"],
        "handoffs": list(handoffs),
        **more,
    }


Script = Callable[[list[common_pb2.Message], list[str]], common_pb2.Message]


def by_agent(scripts: dict[str, Script]) -> Script:
    """The policy of the agent whose system prompt the request carries."""

    def policy(messages: list[common_pb2.Message], tools: list[str]) -> common_pb2.Message:
        return scripts[messages[0].content.removeprefix("agent ")](messages, tools)

    return policy


def hand(name: str, brief: dict[str, Any] | None = None) -> Script:
    """Hands off with `name` on the first step; answers with the last tool result after that."""

    def script(messages: list[common_pb2.Message], tools: list[str]) -> common_pb2.Message:
        results = [m for m in messages if m.role == common_pb2.ROLE_TOOL]
        if not results:
            return tool_call(name, brief or BRIEF, "h1")
        return answer(f"done after: {results[-1].content}")

    return script


def stub(mesh: Mesh) -> dispatcher_pb2_grpc.DispatcherServiceStub:
    return dispatcher_pb2_grpc.DispatcherServiceStub(mesh.dispatcher.channel)  # type: ignore[no-untyped-call]


async def start(mesh: Mesh, agent_id: str, goal: str = "triage the alert") -> str:
    reply = await stub(mesh).StartTask(D.StartTaskRequest(agent_id=agent_id, goal=goal), metadata=mesh.md())
    return str(reply.task.task_id)


async def task(mesh: Mesh, task_id: str) -> D.Task:
    found: D.Task = (await stub(mesh).GetTask(D.GetTaskRequest(task_id=task_id), metadata=mesh.md())).task
    return found


async def settled(mesh: Mesh, task_id: str, *statuses: int, timeout_s: float = 15) -> D.Task:
    deadline = time.monotonic() + timeout_s
    while True:
        found = await task(mesh, task_id)
        if found.status in statuses:
            return found
        assert time.monotonic() < deadline, f"task {task_id} is {D.TaskStatus.Name(found.status)}"
        await asyncio.sleep(0.05)


async def events(mesh: Mesh, task_id: str) -> list[D.TaskEvent]:
    call = stub(mesh).WatchTask(D.WatchTaskRequest(task_id=task_id), metadata=mesh.md(), timeout=15)
    return [reply.event async for reply in call if reply.event.sequence]


ENDED = (D.TASK_STATUS_SUCCEEDED, D.TASK_STATUS_FAILED, D.TASK_STATUS_ABORTED, D.TASK_STATUS_CANCELLED)


async def test_a_transfer_chain_of_three_agents_completes(make_mesh: MakeMesh) -> None:
    policy = by_agent(
        {
            "triage": hand("transfer_to_logs"),
            "logs": hand("transfer_to_report"),
            "report": lambda messages, tools: answer("report: " + messages[1].content.splitlines()[0]),
        }
    )
    mesh = await make_mesh(policy, agents=[agent("triage", "logs"), agent("logs", "report"), agent("report")])
    root_id = await start(mesh, "triage")
    root = await settled(mesh, root_id, D.TASK_STATUS_HANDED_OFF, *ENDED)
    assert root.status == D.TASK_STATUS_HANDED_OFF and root.child_task_id
    middle = await settled(mesh, root.child_task_id, D.TASK_STATUS_HANDED_OFF, *ENDED)
    assert middle.status == D.TASK_STATUS_HANDED_OFF
    last = await settled(mesh, middle.child_task_id, *ENDED)
    assert last.status == D.TASK_STATUS_SUCCEEDED, last.error
    assert last.answer == "report: Handoff: payment-svc pods restart"
    assert (middle.parent_task_id, middle.root_task_id) == (root_id, root_id)
    assert (last.parent_task_id, last.root_task_id, last.agent_id) == (middle.task_id, root_id, "report")
    assert root.root_task_id == root_id and not root.parent_task_id
    # The root's creator created the whole tree (separation of duties holds across it).
    assert {t.created_by for t in (root, middle, last)} == {"alice"}
    # HANDOFF events in both tasks' streams, the hop's tokens carried.
    parent_hop = next(e for e in await events(mesh, root_id) if e.kind == D.TASK_EVENT_KIND_HANDOFF)
    child_hop = next(e for e in await events(mesh, middle.task_id) if e.kind == D.TASK_EVENT_KIND_HANDOFF)
    for hop in (parent_hop, child_hop):
        assert hop.attributes["parent_task_id"] == root_id and hop.attributes["child_task_id"] == middle.task_id
        assert hop.attributes["mode"] == "transfer" and int(hop.attributes["hop_tokens"]) > 0
        assert (hop.attributes["confirmed"], hop.attributes["inferred"]) == ("1", "1")
    # The child session got the hop summary, built from the parent's session, granted to the child's.
    request = mesh.context.handoffs[0]
    assert (request.session_id, request.child_session_id) == (root_id, middle.task_id)
    assert request.brief.facts[0].citation.message_index == 0
    # ListTasks by root lists the tree.
    listed = await stub(mesh).ListTasks(D.ListTasksRequest(root_task_id=root_id), metadata=mesh.md())
    assert {t.task_id for t in listed.tasks} == {root_id, middle.task_id, last.task_id}


async def test_ask_returns_the_childs_answer_to_the_parent(make_mesh: MakeMesh) -> None:
    policy = by_agent(
        {
            "boss": hand("ask_helper"),
            "helper": lambda messages, tools: answer("the deploy at 08:55"),
        }
    )
    mesh = await make_mesh(policy, agents=[agent("boss", {"to": "helper", "mode": "ask"}), agent("helper")])
    root_id = await start(mesh, "boss")
    root = await settled(mesh, root_id, *ENDED, D.TASK_STATUS_HANDED_OFF)
    assert root.status == D.TASK_STATUS_SUCCEEDED, root.error
    assert root.answer == "done after: the deploy at 08:55"
    kinds = [e.kind for e in await events(mesh, root_id)]
    assert D.TASK_STATUS_WAITING_CHILD in [e.status for e in await events(mesh, root_id)]
    assert kinds.count(D.TASK_EVENT_KIND_HANDOFF) == 2  # the ask, and the answer back
    child = await task(mesh, root.child_task_id)
    assert child.status == D.TASK_STATUS_SUCCEEDED and child.parent_task_id == root_id


async def test_a_failed_delegate_is_an_engineering_error_for_the_parent(make_mesh: MakeMesh) -> None:
    policy = by_agent(
        {
            "boss": hand("ask_helper"),
            "helper": lambda messages, tools: common_pb2.Message(),  # an empty reply: the task fails
        }
    )
    mesh = await make_mesh(policy, agents=[agent("boss", {"to": "helper", "mode": "both"}), agent("helper")])
    root = await settled(mesh, await start(mesh, "boss"), *ENDED)
    assert root.status == D.TASK_STATUS_SUCCEEDED
    assert "HANDOFF_FAILED" in root.answer and "FAILED" in root.answer


async def test_a_handoff_to_an_agent_not_listed_is_a_contract_error_naming_the_allowed_ones(
    make_mesh: MakeMesh,
) -> None:
    seen: list[str] = []

    def triage(messages: list[common_pb2.Message], tools: list[str]) -> common_pb2.Message:
        results = [m for m in messages if m.role == common_pb2.ROLE_TOOL]
        seen.append(",".join(tools))
        if not results:
            return tool_call("transfer_to_report", BRIEF, "h1")
        return answer("corrected: " + results[-1].content)

    mesh = await make_mesh(
        by_agent({"triage": triage}), agents=[agent("triage", "logs"), agent("logs"), agent("report")]
    )
    root = await settled(mesh, await start(mesh, "triage"), *ENDED, D.TASK_STATUS_HANDED_OFF)
    assert root.status == D.TASK_STATUS_SUCCEEDED
    assert "UNKNOWN_TOOL" in root.answer and "allowed: transfer_to_logs" in root.answer
    assert seen[0] == "transfer_to_logs"  # one tool per target, nothing else
    assert not mesh.context.handoffs


async def test_an_invalid_brief_is_a_contract_error_back_to_the_model(make_mesh: MakeMesh) -> None:
    mesh = await make_mesh(
        by_agent({"triage": hand("transfer_to_logs", {"facts": "none"})}),
        agents=[agent("triage", "logs"), agent("logs")],
    )
    root = await settled(mesh, await start(mesh, "triage"), *ENDED, D.TASK_STATUS_HANDED_OFF)
    assert root.status == D.TASK_STATUS_SUCCEEDED
    assert "SCHEMA_INVALID" in root.answer
    correction = next(e for e in await events(mesh, root.task_id) if e.kind == D.TASK_EVENT_KIND_CORRECTION)
    assert correction.error.code == common_pb2.ERROR_CODE_SCHEMA_INVALID


async def test_a_handoff_cycle_is_loop_detected(make_mesh: MakeMesh) -> None:
    policy = by_agent({"a": hand("transfer_to_b"), "b": hand("transfer_to_a")})
    mesh = await make_mesh(policy, agents=[agent("a", "b"), agent("b", "a")])
    root_id = await start(mesh, "a")
    current = await settled(mesh, root_id, D.TASK_STATUS_HANDED_OFF, *ENDED)
    chain = [current]
    while current.status == D.TASK_STATUS_HANDED_OFF:
        current = await settled(mesh, current.child_task_id, D.TASK_STATUS_HANDED_OFF, *ENDED)
        chain.append(current)
    # a -> b -> a, then a's hop to b again repeats a->b: the third task aborts LOOP_DETECTED.
    assert [t.agent_id for t in chain] == ["a", "b", "a"]
    assert current.status == D.TASK_STATUS_ABORTED
    assert current.error.code == common_pb2.ERROR_CODE_LOOP_DETECTED
    assert "a->b->a->b" in current.error.message


async def test_the_depth_limit_is_typed(make_mesh: MakeMesh) -> None:
    policy = by_agent({"a": hand("transfer_to_b"), "b": hand("transfer_to_c"), "c": hand("transfer_to_d")})
    mesh = await make_mesh(
        policy,
        agents=[agent("a", "b"), agent("b", "c"), agent("c", "d"), agent("d")],
        dispatcher={"max_handoff_depth": 2},
    )
    current = await settled(mesh, await start(mesh, "a"), D.TASK_STATUS_HANDED_OFF, *ENDED)
    while current.status == D.TASK_STATUS_HANDED_OFF:
        current = await settled(mesh, current.child_task_id, D.TASK_STATUS_HANDED_OFF, *ENDED)
    # c is at depth 2: its hop to d would be the third; it is told, and answers itself.
    assert current.agent_id == "c" and current.status == D.TASK_STATUS_SUCCEEDED
    assert "HANDOFF_DEPTH_EXCEEDED" in current.answer


async def test_cancelling_the_root_cancels_the_tree(make_mesh: MakeMesh) -> None:
    def helper(messages: list[common_pb2.Message], tools: list[str]) -> common_pb2.Message:
        return tool_call("restart", {"pod": "p-1"}, "r1")  # parks on its approval

    mesh = await make_mesh(
        by_agent({"boss": hand("ask_helper"), "helper": helper}),
        {"restart": lambda args: "restarted"},
        needs_approval={"restart"},
        agents=[agent("boss", {"to": "helper", "mode": "ask"}), agent("helper")],
    )
    root_id = await start(mesh, "boss")
    root = await settled(mesh, root_id, D.TASK_STATUS_WAITING_CHILD, *ENDED)
    assert root.status == D.TASK_STATUS_WAITING_CHILD
    child_id = root.child_task_id
    await settled(mesh, child_id, D.TASK_STATUS_WAITING_APPROVAL)
    cancelled = await stub(mesh).CancelTask(D.CancelTaskRequest(task_id=root_id, reason="stop"), metadata=mesh.md())
    assert cancelled.task.status == D.TASK_STATUS_CANCELLED
    child = await task(mesh, child_id)
    assert child.status == D.TASK_STATUS_CANCELLED
    assert f"root task {root_id} was cancelled" in child.error.message


async def test_an_ask_gets_the_typed_answer_of_the_chain_it_started(make_mesh: MakeMesh) -> None:
    """boss asks helper, helper transfers to expert: expert's typed answer is the result of boss's call."""
    schema = {"type": "object", "properties": {"deploy": {"type": "string"}}, "required": ["deploy"]}
    policy = by_agent(
        {
            "boss": hand("ask_helper"),
            "helper": hand("transfer_to_expert"),
            "expert": lambda messages, tools: answer('{"deploy": "08:55"}'),
        }
    )
    mesh = await make_mesh(
        policy,
        agents=[
            agent("boss", {"to": "helper", "mode": "ask"}),
            agent("helper", "expert"),
            agent("expert", output_schema=schema),
        ],
    )
    root = await settled(mesh, await start(mesh, "boss"), *ENDED, D.TASK_STATUS_HANDED_OFF)
    assert root.status == D.TASK_STATUS_SUCCEEDED, root.error
    assert root.answer == 'done after: {"deploy":"08:55"}'
    helper = await task(mesh, root.child_task_id)
    assert helper.status == D.TASK_STATUS_HANDED_OFF
    expert = await task(mesh, helper.child_task_id)
    assert expert.output_json == '{"deploy":"08:55"}' and expert.root_task_id == root.task_id
    back = [e for e in await events(mesh, root.task_id) if e.attributes.get("mode") == "answer"]
    assert len(back) == 1 and back[0].attributes["child_task_id"] == expert.task_id


async def test_a_handoff_to_a_capability_goes_to_the_carrier_routing_picks(make_mesh: MakeMesh) -> None:
    policy = by_agent(
        {
            "triage": hand("transfer_to_log_analysis"),
            "logs-a": lambda messages, tools: answer("analysed by a"),
            "logs-b": lambda messages, tools: answer("analysed by b"),
        }
    )
    carriers = [agent(a, capabilities=["log_analysis"]) for a in ("logs-b", "logs-a")]
    mesh = await make_mesh(
        policy, agents=[agent("triage", {"capability": "log_analysis", "mode": "transfer"}), *carriers]
    )
    root = await settled(mesh, await start(mesh, "triage"), D.TASK_STATUS_HANDED_OFF, *ENDED)
    assert root.status == D.TASK_STATUS_HANDED_OFF, root.error
    child = await settled(mesh, root.child_task_id, *ENDED)
    # Both carriers healthy with no unfinished task: the tie goes to the smaller id.
    assert (child.agent_id, child.answer, child.status) == ("logs-a", "analysed by a", D.TASK_STATUS_SUCCEEDED)
    hop = next(e for e in await events(mesh, root.task_id) if e.kind == D.TASK_EVENT_KIND_HANDOFF)
    assert hop.attributes["to_agent"] == "logs-a"
