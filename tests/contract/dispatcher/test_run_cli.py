"""`agentmesh run` against a real dispatcher (fake downstream services)."""

from __future__ import annotations

import asyncio
import io
from typing import Any

from agentmesh.cli.run_view import format_event, run_command
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
    assert mesh.tools.resolvers[0].has_role("operator")


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
