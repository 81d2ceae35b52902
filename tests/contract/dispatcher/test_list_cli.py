"""`agentmesh tasks` and `agentmesh approvals` against a real dispatcher (fake downstream services)."""

from __future__ import annotations

import asyncio
import io
import json

from agentmesh.cli import build_parser
from agentmesh.cli.list_view import approvals_command, tasks_command
from agentmesh.v1 import common_pb2, dispatcher_pb2
from tests.contract.dispatcher.conftest import MakeMesh, answer, tool_call
from tests.contract.dispatcher.test_run_cli import settings_for

D = dispatcher_pb2


def restart_policy(messages: list[common_pb2.Message], tools: list[str]) -> common_pb2.Message:
    if not [m for m in messages if m.role == common_pb2.ROLE_TOOL]:
        return tool_call("restart", {"service": "payment-svc"}, "c1")
    return answer("done")


async def test_tasks_lists_pages_filters_and_prints_json(make_mesh: MakeMesh) -> None:
    mesh = await make_mesh(lambda m, t: answer("ok"))
    stub = mesh.dispatcher.channel.unary_unary(
        "/agentmesh.v1.DispatcherService/StartTask",
        request_serializer=D.StartTaskRequest.SerializeToString,
        response_deserializer=D.StartTaskResponse.FromString,
    )
    for i in range(5):
        await stub(D.StartTaskRequest(agent_id="ops", goal=f"goal {i}", task_id=f"cli-{i}"), metadata=mesh.md())
    settings = settings_for(mesh)
    out, err = io.StringIO(), io.StringIO()
    code = await asyncio.to_thread(tasks_command, settings, limit=3, out=out, err=err)
    assert code == 0, err.getvalue()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("task") and len(lines) == 4  # header + 3
    assert all(line.split()[2] == "ops" for line in lines[1:])
    assert "--page-token " in err.getvalue()
    token = err.getvalue().split("--page-token ")[1].strip()
    out2, err2 = io.StringIO(), io.StringIO()
    code = await asyncio.to_thread(tasks_command, settings, page_token=token, as_json=True, out=out2, err=err2)
    assert code == 0, err2.getvalue()
    rest = [json.loads(line) for line in out2.getvalue().splitlines()]
    assert len(rest) == 2 and err2.getvalue() == ""
    shown = {line.split()[0] for line in lines[1:]} | {task["taskId"] for task in rest}
    assert shown == {f"cli-{i}" for i in range(5)}
    # Filters; a user's token sees none of alice's tasks; a bad token is reported, exit 1.
    out3 = io.StringIO()
    assert await asyncio.to_thread(tasks_command, settings, agent="nobody", as_json=True, out=out3) == 0
    assert out3.getvalue() == ""
    bob = mesh.dispatcher.token(("agent",), subject="bob", agent_id="bob")
    out4 = io.StringIO()
    assert await asyncio.to_thread(tasks_command, settings, token=bob, as_json=True, out=out4) == 0
    assert out4.getvalue() == ""
    err5 = io.StringIO()
    assert await asyncio.to_thread(tasks_command, settings, page_token="junk", out=io.StringIO(), err=err5) == 1
    assert "INVALID_ARGUMENT" in err5.getvalue()


async def test_approvals_lists_the_waiting_tasks(make_mesh: MakeMesh) -> None:
    mesh = await make_mesh(restart_policy, {"restart": lambda a: "restarted"}, needs_approval={"restart"})
    start = mesh.dispatcher.channel.unary_unary(
        "/agentmesh.v1.DispatcherService/StartTask",
        request_serializer=D.StartTaskRequest.SerializeToString,
        response_deserializer=D.StartTaskResponse.FromString,
    )
    await start(D.StartTaskRequest(agent_id="ops", goal="restart", task_id="w-1"), metadata=mesh.md())
    settings = settings_for(mesh)
    for _ in range(500):
        out = io.StringIO()
        assert await asyncio.to_thread(approvals_command, settings, as_json=True, out=out) == 0
        if out.getvalue():
            break
        await asyncio.sleep(0.02)
    [item] = [json.loads(line) for line in out.getvalue().splitlines()]
    assert item["taskId"] == "w-1" and item["kind"] == "TASK_APPROVAL_KIND_APPROVAL"
    table = io.StringIO()
    assert await asyncio.to_thread(approvals_command, settings, kind="approval", out=table) == 0
    assert "w-1" in table.getvalue() and 'restart {"service": "payment-svc"}' in table.getvalue()
    none = io.StringIO()
    assert await asyncio.to_thread(approvals_command, settings, kind="settlement", as_json=True, out=none) == 0
    assert none.getvalue() == ""


def test_the_commands_parse() -> None:
    args = build_parser().parse_args(["tasks", "--status", "failed", "--since", "2h", "--limit", "7", "--json"])
    assert (args.status, args.since, args.limit, args.json) == ("failed", "2h", 7, True)
    args = build_parser().parse_args(["approvals", "--kind", "settlement"])
    assert args.kind == "settlement" and args.func.__name__ == "cmd_approvals"
