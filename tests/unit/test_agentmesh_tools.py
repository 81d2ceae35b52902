"""agentmesh-tools (clients/python-tools, issue 42): `@tool` makes a typed function a contract (schema from the
type hints through the SDK's pydantic model, description from the docstring, access and approval as MCP
annotations) and `server()` serves it with the official SDK, here to the SDK's client in-process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Literal

import mcp_types as types
import pytest
from mcp import Client
from pydantic import Field

import agentmesh_tools
from agentmesh_tools import ToolError, server, tool

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clients" / "python-tools"


@pytest.fixture(autouse=True)
def _fresh_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agentmesh_tools._tool, "_REGISTERED", {})


def test_the_schema_comes_from_the_type_hints_and_the_description_from_the_docstring() -> None:
    @tool
    def forecast(
        city: Annotated[str, Field(description="A city, e.g. Oslo")], days: int = 1, unit: Literal["C", "F"] = "C"
    ) -> dict[str, object]:
        """Tomorrow's weather for a city.

        More prose, folded onto one line."""
        return {"city": city, "days": days, "unit": unit}

    schema = forecast.input_schema
    assert schema["required"] == ["city"]
    assert schema["properties"]["city"]["description"] == "A city, e.g. Oslo"
    assert schema["properties"]["days"] == {"default": 1, "title": "Days", "type": "integer"}
    assert schema["properties"]["unit"]["enum"] == ["C", "F"]
    assert forecast.description == "Tomorrow's weather for a city. More prose, folded onto one line."
    assert forecast.output_schema is not None
    assert forecast("Oslo") == {"city": "Oslo", "days": 1, "unit": "C"}  # still the function
    assert forecast.annotations.read_only_hint is True and forecast.access == "read"


def test_access_and_approval_travel_as_annotations() -> None:
    @tool(access="write")
    def restart(service: str) -> str:
        """Restarts a service."""
        return service

    @tool(name="notify", access="write", requires_approval=False, idempotent=True)
    def send(message: str) -> str:
        """Sends a message to the on-call channel."""
        return message

    assert restart.annotations.read_only_hint is False and restart.annotations.destructive_hint is True
    assert restart.requires_approval and not restart.idempotent
    assert send.name == "notify" and send.annotations.destructive_hint is False and send.annotations.idempotent_hint


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"access": "read", "requires_approval": True}, "a read never needs an approval"),
        ({"access": "admin"}, "access must be 'read' or 'write'"),
        ({"name": "bad name"}, "use 1-64 letters"),
    ],
)
def test_a_bad_declaration_fails_at_decoration(kwargs: dict[str, object], message: str) -> None:
    def fn(x: int) -> int:
        """Doubles."""
        return 2 * x

    with pytest.raises(ValueError, match=message):
        tool(**kwargs)(fn)  # type: ignore[call-overload]


def test_a_tool_without_a_description_is_refused() -> None:
    def silent(x: int) -> int:
        return x

    with pytest.raises(ValueError, match="docstring"):
        tool(silent)


async def test_served_with_the_sdk_and_called_by_its_client() -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Adds two integers."""
        return a + b

    @tool(access="write")
    async def refuse(reason: str) -> str:
        """Always refuses, with a reason the model reads."""
        raise ToolError(f"refused: {reason}")

    async with Client(server()) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert set(listed) == {"add", "refuse"}
        assert listed["add"].annotations is not None and listed["add"].annotations.read_only_hint is True
        assert listed["refuse"].annotations is not None and listed["refuse"].annotations.destructive_hint is True
        result = await client.call_tool("add", {"a": 2, "b": 40})
        assert not result.is_error and result.structured_content == {"result": 42}
        failed = await client.call_tool("refuse", {"reason": "no"})
        assert failed.is_error
        assert any(isinstance(c, types.TextContent) and "refused: no" in c.text for c in failed.content)
        bad = await client.call_tool("add", {"a": "x", "b": 1})
        assert bad.is_error  # the schema is enforced by the server too


def test_the_package_never_imports_agentmesh() -> None:
    """agentmesh-tools runs wherever its tools' dependencies are: without agentmesh."""
    script = (
        "import json, sys\n"
        f"sys.path[:0] = [{str(PACKAGE)!r}]\n"
        "import agentmesh_tools, agentmesh_tools.__main__\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('agentmesh', 'tool_svc', 'provider_svc', 'dispatcher_svc', 'context_svc', 'grpc'))))\n"
    )
    proc = subprocess.run([sys.executable, "-I", "-c", script], cwd=PACKAGE, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == []
