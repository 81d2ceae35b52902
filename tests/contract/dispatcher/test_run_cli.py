"""`agentmesh run` against a real dispatcher (fake downstream services)."""

from __future__ import annotations

import asyncio
import io
from typing import Any

from agentmesh.cli import build_parser
from agentmesh.cli.run_view import format_event, login_name, run_command
from agentmesh.config import ServiceEndpoint, ServicesSettings
from agentmesh.v1 import common_pb2, dispatcher_pb2
from tests.contract.dispatcher.conftest import MakeMesh, Mesh, answer, tool_call


def settings_for(mesh: Mesh) -> Any:
    services = mesh.dispatcher.settings.services.model_copy(
        update={"dispatcher": ServiceEndpoint(port=mesh.dispatcher.host.port)}
    )
    assert isinstance(services, ServicesSettings)
    return mesh.dispatcher.settings.model_copy(update={"services": services})


def restart_policy(messages: list[common_pb2.Message], tools: list[str]) -> common_pb2.Message:
    results = [m for m in messages if m.role == common_pb2.ROLE_TOOL]
    if not results:
        return tool_call("restart", {"service": "payment-svc"}, "c1")
    return answer(f"done: {results[-1].content}")


async def test_run_streams_lines_and_approves(make_mesh: MakeMesh) -> None:
    mesh = await make_mesh(restart_policy, {"restart": lambda a: "restarted"}, needs_approval={"restart"})
    out, err = io.StringIO(), io.StringIO()
    code = await asyncio.to_thread(
        run_command, settings_for(mesh), "ops", "restart payment-svc", approve="yes", out=out, err=err
    )
    text = out.getvalue()
    assert code == 0, (text, err.getvalue())
    lines = text.splitlines()
    assert lines[0].startswith("   1           status       PENDING")
    assert any("APPROVAL" in line and "restart needs approval" in line for line in lines)
    assert '      plan:    restart {"service": "payment-svc"}' in text
    assert "      impact:  restart: brief outage" in text
    assert "ANSWER       done: restarted" in text
    assert "SUCCEEDED" in text and "trace:  agentmesh trace " in text
    # The task's creator (this user) may not approve: in dev the CLI minted a second identity, and said so.
    [resolver] = mesh.tools.resolvers
    assert resolver.has_role("operator") and resolver.subject == f"{login_name()}-approver"
    assert f"approvals are resolved as {login_name()}-approver" in err.getvalue()


async def test_run_approves_with_the_approver_token(make_mesh: MakeMesh) -> None:
    mesh = await make_mesh(restart_policy, {"restart": lambda a: "restarted"}, needs_approval={"restart"})
    carol = mesh.dispatcher.token(("operator",), subject="carol")
    out, err = io.StringIO(), io.StringIO()
    code = await asyncio.to_thread(
        run_command, settings_for(mesh), "ops", "restart", approve="yes", approver_token=carol, out=out, err=err
    )
    assert code == 0, (out.getvalue(), err.getvalue())
    assert [r.subject for r in mesh.tools.resolvers] == ["carol"]
    assert "approvals are resolved as" not in err.getvalue()


async def test_run_approve_outside_dev_needs_an_approver_token(make_mesh: MakeMesh) -> None:
    mesh = await make_mesh(restart_policy, {"restart": lambda a: "restarted"}, needs_approval={"restart"})
    staging = settings_for(mesh).model_copy(update={"environment": "staging"})
    for approve in ("yes", "no"):
        err = io.StringIO()
        code = await asyncio.to_thread(
            run_command, staging, "ops", "restart", approve=approve, out=io.StringIO(), err=err
        )
        assert code == 2
        assert "--approve/--deny in environment staging" in err.getvalue() and "--approver-token" in err.getvalue()
    assert mesh.provider.calls == 0  # refused before anything started
    args = build_parser().parse_args(["run", "ops", "restart", "--approve", "--approver-token", "T"])
    assert (args.approve, args.approver_token) == (True, "T")


async def test_run_reports_typed_errors(make_mesh: MakeMesh) -> None:
    mesh = await make_mesh(restart_policy)
    out, err = io.StringIO(), io.StringIO()
    code = await asyncio.to_thread(run_command, settings_for(mesh), "ghost", "x", out=out, err=err)
    assert code == 2
    assert "NOT_FOUND: agent_id: no agent 'ghost'" in err.getvalue()
    code = await asyncio.to_thread(run_command, settings_for(mesh), "ops", " ", out=out, err=err)
    assert code == 2 and "goal: must not be empty" in err.getvalue()


async def test_run_denied_change_is_shown(make_mesh: MakeMesh) -> None:
    mesh = await make_mesh(restart_policy, {"restart": lambda a: "restarted"}, needs_approval={"restart"})
    out = io.StringIO()
    code = await asyncio.to_thread(
        run_command, settings_for(mesh), "ops", "restart", approve="no", out=out, err=io.StringIO()
    )
    assert code == 0  # the model answers after the denial
    assert "denied (--deny)" in out.getvalue()
    assert "FALLBACK" in out.getvalue() and "APPROVAL_DENIED" in out.getvalue()
    assert mesh.tools.runs["restart"] == 0


def test_event_line_format() -> None:
    event = dispatcher_pb2.TaskEvent(
        sequence=12, step=3, kind=dispatcher_pb2.TASK_EVENT_KIND_CORRECTION, message="lookup: SCHEMA_INVALID\n  x"
    )
    assert format_event(event) == "  12  step 3   CORRECTION   lookup: SCHEMA_INVALID x"
    assert format_event(event, color=True).startswith("\x1b[33m")
