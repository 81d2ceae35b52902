"""MCP servers' tools behind the gateway (issue 30, docs/design.md §16).

Two servers written with the official SDK (tests/contract/tool/mcp_upstream.py): `local` over stdio,
started and supervised by tool_svc, with trusted annotations and the handshake era; `remote` over
streamable HTTP (2026-07-28), started by the tests, untrusted. Every call goes through the real tool_svc
(in-process, real gRPC), so the whole pipeline applies.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentmesh.config import ConfigError, load_settings
from agentmesh.payloads import PayloadStore
from agentmesh.rpc.host import run_service
from agentmesh.store import Store
from agentmesh.v1 import common_pb2, tool_pb2
from tests.contract.tool.mcp_support import (
    UPSTREAM,
    HttpUpstream,
    Tools,
    effects,
    mcp_overrides,
)
from tool_svc.server import SPEC

SECRET = "AKIAZ7QW3ER5TY8UI2OP"  # the key tests/contract/tool/mcp_upstream.py leaks

READ, WRITE = common_pb2.ACCESS_MODE_READ, common_pb2.ACCESS_MODE_WRITE


def _error(result: common_pb2.ToolResult) -> common_pb2.ErrorDetail:
    assert result.WhichOneof("outcome") == "error", result
    return result.error


async def test_tools_are_listed_with_mapped_names_discovered_and_refreshed(mcp_tool_service: Any) -> None:
    tools: Tools = await mcp_tool_service()
    listed = await tools.listing()
    # Names with '.', '-' and uppercase map to [a-z0-9_]; the original name is kept for the call.
    for name, server, original in [
        ("local__echo_text", "local", "Echo.Text"),
        ("local__get_item", "local", "get-item"),
        ("local__ship_order_now", "local", "Ship.Order-NOW"),
        ("remote__ship_order_now", "remote", "Ship.Order-NOW"),
    ]:
        spec = listed[name]
        assert (spec.executor, spec.mcp_server, spec.mcp_tool) == ("mcp", server, original)
        assert spec.permission.group == f"mcp.{server}" and not spec.unavailable_reason
    # inputSchema and outputSchema are the contract.
    item = listed["local__get_item"]
    assert json.loads(item.input_schema_json)["required"] == ["id"]
    assert "qty" in json.loads(item.output_schema_json)["properties"]
    # Trusted annotations decide access and approvals ...
    assert (listed["local__echo_text"].permission.access, listed["local__echo_text"].requires_approval) == (READ, False)
    assert (listed["local__add_note"].permission.access, listed["local__add_note"].requires_approval) == (WRITE, False)
    assert (listed["local__delete_item"].permission.access, listed["local__delete_item"].requires_approval) == (
        WRITE,
        True,
    )
    # ... untrusted ones do not: every tool is a non-idempotent, approval-gated write unless configured.
    untrusted = listed["remote__echo_text"]
    assert (untrusted.permission.access, untrusted.requires_approval, untrusted.idempotent) == (WRITE, True, False)
    assert (listed["remote__get_item"].permission.access, listed["remote__get_item"].requires_approval) == (
        READ,
        False,
    )
    # Discovery ranks them like any tool; a token sees only what its grants permit.
    assert (await tools.discover("ship an order at once"))[0].endswith("ship_order_now")
    assert "local__echo_text" in (await tools.discover("echo a text back", k=3))
    reader = tools.meta("reader", permissions=("*:mcp.local:read",))
    reply = await tools.stub.ListTools(tool_pb2.ListToolsRequest(permitted_only=True), metadata=reader, timeout=15)
    names = {t.name for t in reply.tools}
    assert "local__echo_text" in names and "local__get_item" in names
    assert not names & {"local__delete_item", "local__add_note", "remote__get_item", "calculator"}

    # `tools/list_changed` adds a tool without a restart. Handshake era (stdio): the notification.
    assert "local__late_tool" not in listed
    assert (await tools.call("local__grow", {})).output.inline == "grown"
    await tools.wait_for(lambda t: "local__late_tool" in t)
    assert json.loads((await tools.call("local__late_tool", {"x": 41})).output.inline) == {"result": 42}
    # 2026-07-28 (HTTP): the subscriptions/listen stream.
    assert (await tools.call("remote__grow", {})).output.inline == "grown"
    await tools.wait_for(lambda t: "remote__late_tool" in t)


async def test_calls_succeed_and_failures_are_typed(mcp_tool_service: Any) -> None:
    # (Each agent may make 6 calls here: the rate limit is tested below.)
    tools: Tools = await mcp_tool_service(tools={"slow": {"timeout_s": 0.5}})
    # Both transports: text and structured outputs.
    echo = await tools.call("local__echo_text", {"text": "hi"})
    assert (echo.output.inline, echo.output.result_type) == ("echo:hi", common_pb2.RESULT_TYPE_TEXT)
    item = await tools.call("remote__get_item", {"id": "A-1"})
    assert json.loads(item.output.inline) == {"id": "A-1", "qty": 3}
    # A bad argument: CONTRACT, with a violation naming the field, before anything is sent.
    bad = _error(await tools.call("local__get_item", {"id": 5}))
    assert (bad.code, bad.error_class) == (common_pb2.ERROR_CODE_SCHEMA_INVALID, common_pb2.ERROR_CLASS_CONTRACT)
    assert bad.violations[0].path == "$.id"
    # The server's own INVALID_PARAMS: CONTRACT, its message as the hint.
    odd = _error(await tools.call("local__even", {"qty": 3}))
    assert (odd.code, odd.error_class) == (common_pb2.ERROR_CODE_SCHEMA_INVALID, common_pb2.ERROR_CLASS_CONTRACT)
    assert "even number" in odd.violations[0].hint
    assert (await tools.call("local__even", {"qty": 4})).output.inline == "4 ok"
    # isError: ENGINEERING with the server's text.
    failed = _error(await tools.call("local__fail", {}))
    assert (failed.code, failed.error_class) == (
        common_pb2.ERROR_CODE_UPSTREAM_REJECTED,
        common_pb2.ERROR_CLASS_ENGINEERING,
    )
    assert "inventory locked" in failed.message
    # A call past its timeout: UPSTREAM_TIMEOUT (ENGINEERING); the connection goes on serving.
    late = _error(await tools.call("local__slow", {"seconds": 5}, agent="agent-t"))
    assert (late.code, late.error_class) == (common_pb2.ERROR_CODE_UPSTREAM_TIMEOUT, common_pb2.ERROR_CLASS_ENGINEERING)
    still = await tools.call("local__echo_text", {"text": "still"}, agent="agent-t")
    assert still.output.inline == "echo:still", still
    # Structured content outside the tool's outputSchema: OUTPUT_INVALID (ENGINEERING).
    misshapen = _error(await tools.call("local__bad_shape", {"id": "b"}, agent="agent-t"))
    assert (misshapen.code, misshapen.error_class) == (
        common_pb2.ERROR_CODE_OUTPUT_INVALID,
        common_pb2.ERROR_CLASS_ENGINEERING,
    )
    # An image is kept as a payload with its media type.
    snapshot = await tools.call("local__snapshot", {}, agent="agent-t")
    blocks = json.loads(snapshot.output.inline)["content"]
    assert blocks[0] == {"type": "text", "text": "shelf 4"}
    assert blocks[1]["type"] == "image" and blocks[1]["media_type"] == "image/png"
    async with await Store.connect(tools.svc.settings.redis, "dev") as store:
        meta, content = await PayloadStore(store).get("sess-mcp", blocks[1]["ref_id"])
    assert meta.media_type == "image/png" and content.startswith(b"\x89PNG")


async def test_approvals_redaction_offload_and_the_rate_limit(
    mcp_tool_service: Any, http_upstream: HttpUpstream, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tool_svc.mcp.stderr")
    tools: Tools = await mcp_tool_service()
    stdio_effects = tmp_path / "stdio-effects.txt"
    # A destructive tool needs an approval (trusted hint); an additive one runs.
    pending = await tools.call("local__delete_item", {"id": "sku-1"}, key="k-del-1")
    assert pending.WhichOneof("outcome") == "pending_approval"
    assert effects(stdio_effects) == []
    assert (await tools.call("local__add_note", {"text": "n1"})).output.inline == "noted"
    # Untrusted: even an additive tool waits for an operator; approved, it runs exactly once.
    waiting = await tools.call("remote__add_note", {"text": "from-test"}, agent="agent-b", key="k-note-1")
    approval = waiting.pending_approval
    assert approval.approval_id
    operator = tools.svc.metadata(("operator",), subject="ops-1")
    resolved = await tools.stub.ResolveApproval(
        tool_pb2.ResolveApprovalRequest(
            approval_id=approval.approval_id, approve=True, arguments_sha256=approval.arguments_sha256
        ),
        metadata=operator,
        timeout=30,
    )
    assert resolved.result.output.inline == "noted"
    repeat = await tools.call("remote__add_note", {"text": "from-test"}, agent="agent-b", key="k-note-1")
    assert repeat.output.inline == "noted" and repeat.stats.replayed
    assert effects(http_upstream.effects).count("note:from-test") == 1
    assert effects(stdio_effects) == ["note:n1"]
    # A secret in an output is redacted; an output over 2 KiB is offloaded with a digest.
    leak = await tools.call("local__leak", {}, agent="agent-c")
    assert leak.output.redacted and SECRET not in leak.output.inline
    big = await tools.call("local__report", {"lines": 200}, agent="agent-c")
    assert big.output.WhichOneof("content") == "ref" and big.output.ref.size_bytes > 2048
    assert big.output.ref.media_type.startswith("text/plain") and big.output.digest
    # Its stderr reaches our logs, redacted.
    assert (await tools.call("local__shout", {}, agent="agent-c")).output.inline == "shouted"
    for _ in range(50):
        if any("debug: connecting" in r.getMessage() for r in caplog.records):
            break
        await asyncio.sleep(0.05)
    lines = [r.getMessage() for r in caplog.records if r.name == "tool_svc.mcp.stderr"]
    assert any("debug: connecting" in line and "[REDACTED]" in line for line in lines), lines
    assert not any("hunter2-secret" in line or SECRET in line for line in lines)
    # The per-agent rate limit applies to MCP tools as to any (capacity 6, no refill to speak of).
    outcomes = [await tools.call("local__echo_text", {"text": str(i)}, agent="busy") for i in range(7)]
    assert [o.WhichOneof("outcome") for o in outcomes[:6]] == ["output"] * 6
    assert _error(outcomes[6]).code == common_pb2.ERROR_CODE_RATE_LIMITED
    # The stdio server's environment: its configured env plus PATH and HOME, none of ours.
    names = set(json.loads((await tools.call("local__env_names", {}, agent="agent-d")).output.inline)["result"])
    assert {"UPSTREAM_FLAVOUR", "PATH", "HOME"} <= names
    assert names <= {"UPSTREAM_FLAVOUR", "PATH", "HOME", "LC_CTYPE"}, names  # LC_CTYPE: the child's Python sets it


async def test_a_server_killed_mid_call_is_an_engineering_error_and_is_restarted(mcp_tool_service: Any) -> None:
    tools: Tools = await mcp_tool_service()
    pid = int((await tools.call("local__pid", {})).output.inline)
    # A read in flight: UPSTREAM_UNAVAILABLE (ENGINEERING).
    read = asyncio.create_task(tools.call("local__slow", {"seconds": 20}, call_id="c-read"))
    write = asyncio.create_task(
        tools.call("local__slow_write", {"seconds": 20, "tag": "w1"}, key="k-slow-write", call_id="c-write")
    )
    await asyncio.sleep(0.5)
    os.kill(pid, signal.SIGKILL)
    failed = _error(await asyncio.wait_for(read, 15))
    assert (failed.code, failed.error_class) == (
        common_pb2.ERROR_CODE_UPSTREAM_UNAVAILABLE,
        common_pb2.ERROR_CLASS_ENGINEERING,
    )
    # A write in flight may have had its effect: OUTCOME_UNKNOWN (ENGINEERING), never re-sent on its own.
    unknown = _error(await asyncio.wait_for(write, 15))
    assert unknown.code == common_pb2.ERROR_CODE_OUTCOME_UNKNOWN and unknown.metadata["settlement_id"]
    # While it is down its tools are listed unavailable with the reason, and not offered; tool_svc serves.
    await tools.wait_for(lambda t: bool(t["local__echo_text"].unavailable_reason), timeout_s=10)
    down = await tools.listing()
    assert "local__echo_text" not in await tools.discover("echo a text back", k=20)
    assert not down["remote__echo_text"].unavailable_reason
    health = health_pb2_grpc.HealthStub(tools.svc.channel)
    status = await health.Check(health_pb2.HealthCheckRequest(service="agentmesh.v1.ToolService"), timeout=5)
    assert status.status == health_pb2.HealthCheckResponse.SERVING
    # Restarted with backoff: a new process answers.
    await tools.wait_for(lambda t: not t["local__echo_text"].unavailable_reason, timeout_s=30)
    assert int((await tools.call("local__pid", {}, call_id="c-after")).output.inline) != pid
    assert (await tools.call("local__echo_text", {"text": "back"})).output.inline == "echo:back"


def test_an_http_server_off_the_allowlist_fails_start_up_with_exit_2(
    http_upstream: HttpUpstream, redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    overrides = mcp_overrides(http_upstream, tmp_path / "e.txt")
    overrides["tools"]["http_allowlist"] = ["http://127.0.0.1:1/other/"]
    config = tmp_path / "agentmesh.yaml"
    config.write_text(
        json.dumps({"auth": {"key": "k" * 40}, "redis": {"url": redis_url}, **overrides}), encoding="utf-8"
    )
    assert run_service(SPEC, [str(config)]) == 2
    err = capsys.readouterr().err
    assert "remote" in err and "http_allowlist" in err


async def test_a_name_collision_leaves_the_name_unavailable_naming_both_and_never_stops_start_up(
    start_service: Any, http_upstream: HttpUpstream, tmp_path: Path
) -> None:
    """Issue 39: two listed tools mapping to one name used to make tool_svc exit 2 (and never restart
    until the config changed). Now the name is listed, unavailable with the reason, and neither runs."""
    args = [str(UPSTREAM), "--transport", "stdio", "--effects", str(tmp_path / "e.txt"), "--collide"]
    overrides = mcp_overrides(http_upstream, tmp_path / "e.txt", args=args)
    overrides["tools"]["mcp_servers"] = overrides["tools"]["mcp_servers"][:1]  # the stdio server alone
    tools = Tools(await start_service(SPEC, overrides))
    listing = await tools.listing()
    reason = listing["local__dup_name"].unavailable_reason
    assert "'Dup.Name'" in reason and "'dup-name'" in reason and "local__dup_name" in reason
    assert "local__dup_name" not in await tools.discover("dup name one two", k=50)
    refused = _error(await tools.call("local__dup_name", {}))
    assert refused.code == common_pb2.ERROR_CODE_UPSTREAM_UNAVAILABLE and refused.metadata["sent"] == "no"
    # The server's other tools are mounted and run.
    assert (await tools.call("local__echo_text", {"text": "x"})).output.inline == "echo:x"


def test_mcp_server_settings_are_checked_at_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def load(server: dict[str, Any]) -> Any:
        path = tmp_path / "c.yaml"
        path.write_text(json.dumps({"auth": {"key": "k" * 40}, "tools": {"mcp_servers": [server]}}), encoding="utf-8")
        return load_settings(path)

    stdio = {"name": "s", "transport": "stdio", "command": sys.executable}
    assert load(stdio).tools.mcp_servers[0].tool_prefix == "s"
    cases: list[tuple[dict[str, Any], str]] = [
        ({**stdio, "env": {"AGENTMESH_AUTH_KEY": "x"}}, "agentmesh's own"),
        ({**stdio, "url": "http://x/mcp"}, "transport http only"),
        ({"name": "h", "transport": "http"}, "needs a url"),
        ({**stdio, "name": "Bad.Name"}, "name"),
        ({**stdio, "tools": {"t": {"name": "Not-OK"}}}, "name"),
    ]
    for bad, said in cases:
        with pytest.raises(ConfigError, match=said):
            load(bad)
    # Headers (and env) come from the environment through ${VAR}; they never print.
    path = tmp_path / "h.yaml"
    path.write_text(
        "auth: {key: " + "k" * 40 + "}\ntools:\n  http_allowlist: [http://127.0.0.1:9/mcp]\n  mcp_servers:\n"
        '    - {name: h, transport: http, url: "http://127.0.0.1:9/mcp", '
        'headers: {Authorization: "Bearer ${MCP_TEST_SECRET}"}}\n',
        encoding="utf-8",
    )
    monkeypatch.setenv("MCP_TEST_SECRET", "s3cr3t-from-env")
    loaded = load_settings(path).tools.mcp_servers[0]
    assert loaded.headers["Authorization"].get_secret_value() == "Bearer s3cr3t-from-env"
    assert "s3cr3t" not in repr(loaded)
    with pytest.raises(ConfigError, match="used by two servers"):
        path = tmp_path / "d.yaml"
        path.write_text(
            json.dumps({"auth": {"key": "k" * 40}, "tools": {"mcp_servers": [stdio, {**stdio, "prefix": None}]}}),
            encoding="utf-8",
        )
        load_settings(path)


async def test_servers_that_never_answer_do_not_stop_tool_svc(
    start_service: Any, caplog: pytest.LogCaptureFixture, refused_port: int
) -> None:
    closed = f"http://127.0.0.1:{refused_port}/mcp"
    crashing = {"command": sys.executable, "args": ["-c", "import sys; sys.exit(3)"]}
    servers = [
        {"name": "gone", "transport": "http", "url": closed, "connect_timeout_s": 5, "restart_initial_s": 0.2},
        {"name": "crashing", "transport": "stdio", **crashing, "connect_timeout_s": 5, "restart_initial_s": 0.2},
    ]
    svc = await start_service(SPEC, {"tools": {"http_allowlist": [closed], "mcp_servers": servers}})
    tools = Tools(svc)
    health = health_pb2_grpc.HealthStub(svc.channel)
    status = await health.Check(health_pb2.HealthCheckRequest(service="agentmesh.v1.ToolService"), timeout=5)
    assert status.status == health_pb2.HealthCheckResponse.SERVING
    assert not [n for n in await tools.listing() if "__" in n]
    assert _error(await tools.call("gone__anything", {})).code == common_pb2.ERROR_CODE_UNKNOWN_TOOL
    # Both are retried with backoff, each failure logged with its reason.
    await asyncio.sleep(0.5)
    reasons = [r.getMessage() for r in caplog.records if r.name == "tool_svc.mcp"]
    assert any("MCP server gone unavailable" in m and "connect" in m.lower() for m in reasons), reasons
    assert sum("MCP server crashing unavailable" in m for m in reasons) >= 2, reasons
