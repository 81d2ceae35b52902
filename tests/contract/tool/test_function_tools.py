"""Tools written as Python functions (agentmesh-tools, issue 42) behind the whole gateway: `agentmesh init`'s
tools.py plus a write tool, served by `python -m agentmesh_tools` over stdio and mounted by an in-process
tool_svc with `trust_annotations: true`. The gateway lists them with their contract, validates arguments
before anything is sent, runs a read, gates a write on an approval (effect counted at the tool), and a
function's ToolError reaches the model as ENGINEERING text. Then (`make test-readme`, which installs from the
package index like a newcomer: about 25 s) the package installs alone in a fresh venv (no agentmesh) and
serves the same file to the SDK's stdio client."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters

from agentmesh.cli.config_view import STARTER_TOOLS
from agentmesh.v1 import common_pb2, tool_pb2
from tests.contract.tool.mcp_support import Tools
from tool_svc.server import SPEC

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "clients" / "python-tools"
WRITES = '''

from agentmesh_tools import ToolError

EFFECTS = __import__("pathlib").Path(__import__("os").environ["EFFECTS_FILE"])


@tool(access="write")
def restart(service: str, reason: str = "") -> str:
    """Restarts a service of ours (needs an operator's approval)."""
    if service == "database":
        raise ToolError("the database is never restarted from here")
    with EFFECTS.open("a") as out:
        out.write(f"restart:{service}\\n")
    return f"restarted {service}"
'''


def write_tools(folder: Path) -> Path:
    path = folder / "tools.py"
    path.write_text(STARTER_TOOLS.replace('if __name__ == "__main__":\n    serve()\n', "") + WRITES, encoding="utf-8")
    return path


async def test_function_tools_go_through_the_whole_gateway(start_service: Any, tmp_path: Path) -> None:
    effects = tmp_path / "effects.txt"
    server = {
        "name": "mytools",
        "transport": "stdio",
        "command": sys.executable,
        "args": ["-m", "agentmesh_tools", str(write_tools(tmp_path))],
        "env": {"EFFECTS_FILE": str(effects), "PYTHONPATH": str(PACKAGE)},
        "trust_annotations": True,
    }
    svc = await start_service(SPEC, {"tools": {"mcp_servers": [server]}})
    tools = Tools(svc)
    listed = await tools.listing()
    weather, restart = listed["mytools__get_weather"], listed["mytools__restart"]
    assert json.loads(weather.input_schema_json)["required"] == ["city"]
    assert weather.description.startswith("How hot or cold it is in a city")
    assert (weather.permission.group, weather.permission.access) == ("mcp.mytools", common_pb2.ACCESS_MODE_READ)
    assert restart.permission.access == common_pb2.ACCESS_MODE_WRITE and restart.requires_approval

    ok = await tools.call("mytools__get_weather", {"city": "Oslo"})
    assert json.loads(ok.output.inline) == {"city": "Oslo", "temperature_c": -3}
    bad = await tools.call("mytools__get_weather", {"town": "Oslo"}, call_id="c2")
    assert bad.error.code == common_pb2.ERROR_CODE_SCHEMA_INVALID  # the gateway's check, nothing sent

    asked = await tools.call("mytools__restart", {"service": "cache"}, key="k-restart", call_id="c3")
    assert asked.WhichOneof("outcome") == "pending_approval" and not effects.exists()
    await tools.stub.ResolveApproval(
        tool_pb2.ResolveApprovalRequest(
            approval_id=asked.pending_approval.approval_id,
            approve=True,
            arguments_sha256=asked.pending_approval.arguments_sha256,
        ),
        metadata=svc.metadata(("operator",), subject="ops-approver"),
        timeout=30,
    )
    assert effects.read_text(encoding="utf-8") == "restart:cache\n"

    refused = await tools.call("mytools__restart", {"service": "database"}, key="k-db", call_id="c4")
    assert refused.WhichOneof("outcome") == "pending_approval"
    reply = await tools.stub.ResolveApproval(
        tool_pb2.ResolveApprovalRequest(
            approval_id=refused.pending_approval.approval_id,
            approve=True,
            arguments_sha256=refused.pending_approval.arguments_sha256,
        ),
        metadata=svc.metadata(("operator",), subject="ops-approver"),
        timeout=30,
    )
    assert reply.result.error.error_class == common_pb2.ERROR_CLASS_ENGINEERING
    assert "never restarted from here" in reply.result.error.message


async def run(*argv: str | Path, env: dict[str, str], cwd: Path) -> str:
    process = await asyncio.create_subprocess_exec(
        *map(str, argv), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env, cwd=cwd
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=300)
    assert process.returncode == 0, f"{argv} failed:\n{out.decode()}\n{err.decode()}"
    return out.decode()


@pytest.mark.skipif(os.environ.get("README_TEST_CLONE") != "1", reason="make test-readme (README_TEST_CLONE=1)")
async def test_the_package_installs_alone_and_serves_its_tools(tmp_path: Path) -> None:
    source = tmp_path / "src"
    shutil.copytree(PACKAGE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTMESH_", "PYTHON", "VIRTUAL_ENV"))}
    venv = tmp_path / "venv"
    python = venv / "bin" / "python"
    await run(sys.executable, "-m", "venv", venv, env=env, cwd=tmp_path)
    await run(python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", source, env=env, cwd=tmp_path)
    check = "import importlib.util as u; assert u.find_spec('agentmesh') is None, 'agentmesh is importable'"
    await run(python, "-I", "-c", check, env=env, cwd=tmp_path)

    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "tools.py").write_text(STARTER_TOOLS, encoding="utf-8")
    params = StdioServerParameters(command=str(python), args=["tools.py"], cwd=folder, env=env)
    async with Client(params) as client:
        assert [t.name for t in (await client.list_tools()).tools] == ["get_weather"]
        result = await client.call_tool("get_weather", {"city": "Cairo"})
        assert result.structured_content == {"city": "Cairo", "temperature_c": 31}
        assert not any(isinstance(c, types.ImageContent) for c in result.content)
