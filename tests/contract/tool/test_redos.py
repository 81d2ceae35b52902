"""ReDoS in tool schemas (issue 39, high), through a real gRPC server.

A `pattern` such as `^(a+)+$` in a tool's input schema took Python's backtracking `re` 18 s for 29
characters of argument, on tool_svc's event loop, before the caller's grant was checked. Schemas are now
matched by RE2 (tool_svc.linear_regex), after the permission check, and a pattern RE2 cannot compile is
refused when the tool is registered or mounted.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from typing import Any

import grpc
import grpc.aio
import pytest
from google.protobuf import duration_pb2

from agentmesh.v1 import common_pb2, tool_pb2
from tests.contract.tool.conftest import Client, class_name, error_name
from tests.contract.tool.fakes import FakeUpstream, http_tool
from tool_svc.mcp.catalog import ListedTool, catalog

EVIL = "^(a+)+$"
"""Exponential in Python's re on "aaa…a!"; linear in RE2."""

EVIL_SCHEMA = {
    "type": "object",
    "properties": {"id": {"type": "string", "pattern": EVIL}},
    "patternProperties": {"^(b+)+$": {"type": "string"}},
    "additionalProperties": False,
}


def redos_tools(upstream: FakeUpstream) -> dict[str, Any]:
    return {
        "tools": {
            "registry": [
                http_tool(
                    "lookup", upstream, "/ok", input_schema=EVIL_SCHEMA, permission={"group": "shop", "access": "read"}
                ),
                http_tool("wait_read", upstream, "/slow", timeout_s=10),
            ]
        }
    }


# 27 characters: ~5 s of one C call on the old code (each 2 more: x4); 10 KB: never finishes there.
@pytest.mark.parametrize("value", ["a" * 26 + "!", "a" * 10_000 + "!"], ids=["27-chars", "10kb"])
async def test_a_catastrophic_pattern_answers_schema_invalid_at_once(
    tool_service: Any, upstream: FakeUpstream, value: str
) -> None:
    c = Client(await tool_service(redos_tools(upstream)))
    result = await c.execute("lookup", {"id": value}, timeout=30)
    assert error_name(result) == "SCHEMA_INVALID" and class_name(result) == "CONTRACT"
    assert result.error.violations[0].path == "$.id"
    assert upstream.counts["/ok"] == 0
    # A matching value passes.
    assert (await c.execute("lookup", {"id": "aaaa"})).WhichOneof("outcome") == "output"


async def test_a_catastrophic_property_name_answers_schema_invalid_at_once(
    tool_service: Any, upstream: FakeUpstream
) -> None:
    c = Client(await tool_service(redos_tools(upstream)))
    result = await c.execute("lookup", {"b" * 5000 + "!": "x"}, timeout=30)
    assert error_name(result) == "SCHEMA_INVALID"
    assert upstream.counts["/ok"] == 0


async def test_the_permission_is_checked_before_the_arguments(tool_service: Any, upstream: FakeUpstream) -> None:
    """A token without the grant gets PERMISSION_DENIED whatever its arguments: no parse, no schema."""
    c = Client(await tool_service(redos_tools(upstream)))
    for raw in (json.dumps({"id": "a" * 26 + "!"}), "{not json", json.dumps({"id": 1})):
        result = await c.execute("lookup", raw=raw, permissions=[], timeout=30)
        assert error_name(result) == "PERMISSION_DENIED", raw
    assert upstream.counts["/ok"] == 0


async def test_redos_calls_never_block_another_rpc(tool_service: Any, upstream: FakeUpstream) -> None:
    """Completion order, as for the calculator (test_cpu_isolation): a read waiting on its upstream for
    1 s, started first, finishes after every ReDoS call; on the old code the event loop was stuck in
    `re` for seconds per call, so the read's reply came between them."""
    upstream.slow_s = 1.0
    c = Client(await tool_service(redos_tools(upstream)))
    finished: list[str] = []

    async def track(name: str, call: Awaitable[Any]) -> Any:
        reply = await call
        finished.append(name)
        return reply

    waiting = asyncio.create_task(track("wait_read", c.execute("wait_read", {"q": "x"}, timeout=60)))
    await asyncio.sleep(0.2)  # a sequencing aid: the read is at the upstream
    redos = [
        track(f"redos-{i}", c.execute("lookup", {"id": "a" * 26 + "!"}, call_id=f"r{i}", timeout=60)) for i in range(4)
    ]
    results = await asyncio.gather(*redos)
    await waiting
    assert all(error_name(r) == "SCHEMA_INVALID" for r in results)
    assert finished[-1] == "wait_read", finished


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"id": {"type": "string", "pattern": "^(?=a)a$"}}},  # look-ahead
        {"type": "object", "properties": {"id": {"type": "string", "pattern": "^(a)\\1$"}}},  # back-reference
        {"type": "object", "patternProperties": {"(?<=x)y": {"type": "string"}}},  # look-behind
        {"type": "object", "patternProperties": {"^a": {}}, "unevaluatedProperties": False},
    ],
    ids=["lookahead", "backreference", "lookbehind-key", "unevaluated-beside-patterns"],
)
async def test_a_pattern_re2_cannot_compile_is_refused_at_registration(
    tool_service: Any, upstream: FakeUpstream, schema: dict[str, Any]
) -> None:
    c = Client(await tool_service())
    spec = common_pb2.ToolSpec(
        name="get_thing",
        description="Use when reading a thing",
        input_schema_json=json.dumps(schema),
        permission=common_pb2.ToolPermission(group="shop", access=common_pb2.ACCESS_MODE_READ),
        timeout=duration_pb2.Duration(seconds=2),
        executor="http",
        endpoint_url=upstream.url("/ok"),
        http_method="GET",
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await c.stub.RegisterTool(tool_pb2.RegisterToolRequest(tool=spec), metadata=c.meta(roles=("admin",)), timeout=5)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "tool.input_schema_json" in (caught.value.details() or "") or "RE2" in (caught.value.details() or "")


def test_an_mcp_tool_whose_pattern_re2_cannot_compile_is_not_mounted() -> None:
    from agentmesh.config import McpServerSettings, ToolRetrySettings, ToolsSettings
    from tool_svc.builtin import default_specs
    from tool_svc.registry import ToolRegistry

    registry = ToolRegistry(ToolsSettings(), default_specs())
    settings = McpServerSettings(name="shop", transport="stdio", command="true", prefix="shop")
    schema = {"type": "object", "properties": {"id": {"type": "string", "pattern": "(?!x)"}}}
    good = {"type": "object", "properties": {"id": {"type": "string", "pattern": EVIL}}}
    tools = catalog(
        [ListedTool("Bad", input_schema=schema), ListedTool("Good", input_schema=good)], settings, ToolRetrySettings()
    ).tools
    problems = registry.set_mcp_tools("shop", list(tools))
    assert len(problems) == 1 and "shop__bad" in problems[0] and "RE2" in problems[0]
    assert registry.get("shop__bad") is None and registry.get("shop__good") is not None
