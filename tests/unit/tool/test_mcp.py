"""MCP domain code without a server (docs/design.md §16): names, the annotations policy, answers and
errors, the stderr pump, the registry entries of a server, the stdio environment."""

from __future__ import annotations

import asyncio
import base64
import logging
import os
from typing import Any

import mcp_types as types
import pytest
from mcp import MCPError
from pydantic import SecretStr

from agentmesh.config import McpServerSettings, McpToolOverride, ToolRetrySettings, ToolsSettings
from agentmesh.errors import AgentmeshError, ErrorClass, ErrorCode
from tool_svc.builtin import default_specs
from tool_svc.idempotency import unknown_delivery
from tool_svc.mcp import results
from tool_svc.mcp.catalog import ListedTool, catalog
from tool_svc.mcp.connection import McpConnection, listed
from tool_svc.mcp.names import assign, registry_name
from tool_svc.mcp.stderr import LINES_PER_WINDOW, StderrPump
from tool_svc.registry import ToolRegistry

SCHEMA = {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}


def server(**changes: Any) -> McpServerSettings:
    return McpServerSettings(**{"name": "shop", "transport": "stdio", "command": "true", **changes})


# --- names -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "name"),
    [
        ("Echo.Text", "shop__echo_text"),
        ("get-item", "shop__get_item"),
        ("Ship.Order-NOW", "shop__ship_order_now"),
        ("déjà vu", "shop__d_j__vu"),
        ("already_fine_2", "shop__already_fine_2"),
    ],
)
def test_names_map_to_lowercase_letters_digits_and_underscores(tool: str, name: str) -> None:
    assert registry_name("shop", tool) == name


def test_a_long_name_keeps_64_characters_and_a_hash_of_the_original() -> None:
    first, second = "x" * 80 + "A", "x" * 80 + "B"
    a, b = registry_name("shop", first), registry_name("shop", second)
    assert len(a) == len(b) == 64 and a != b and a[:55] == b[:55]
    assert registry_name("shop", "anything", "renamed") == "shop__renamed"


def test_a_collision_names_both_tools_and_mounts_neither() -> None:
    names, collisions = assign("shop", ["Get.Item", "get-item", "list"], {})
    assert names == {"shop__list": "list"}
    assert [(c.name, c.first, c.second) for c in collisions] == [("shop__get_item", "Get.Item", "get-item")]
    assert "'Get.Item' and 'get-item'" in collisions[0].describe("shop")
    # An override resolves it.
    names, collisions = assign("shop", ["Get.Item", "get-item"], {"get-item": "get_item_v2"})
    assert not collisions and set(names) == {"shop__get_item", "shop__get_item_v2"}


# --- the annotations policy --------------------------------------------------------------------------


def _policy(tool: ListedTool, settings: McpServerSettings) -> tuple[str, bool, bool]:
    [spec] = catalog([tool], settings, ToolRetrySettings()).tools
    return spec.permission.access, spec.idempotent, spec.requires_approval


def test_untrusted_annotations_change_nothing() -> None:
    hints = ListedTool("t", input_schema=SCHEMA, read_only_hint=True, idempotent_hint=True, destructive_hint=False)
    assert _policy(hints, server()) == ("write", False, True)


@pytest.mark.parametrize(
    ("hints", "expected"),
    [
        ({"read_only_hint": True}, ("read", False, False)),
        ({"read_only_hint": True, "idempotent_hint": True}, ("read", True, False)),
        ({}, ("write", False, True)),  # destructiveHint defaults to true
        ({"destructive_hint": False}, ("write", False, False)),
        ({"destructive_hint": True, "idempotent_hint": True}, ("write", True, True)),
    ],
)
def test_trusted_annotations_decide(hints: dict[str, Any], expected: tuple[str, bool, bool]) -> None:
    assert _policy(ListedTool("t", input_schema=SCHEMA, **hints), server(trust_annotations=True)) == expected


def test_overrides_win_over_annotations() -> None:
    settings = server(
        trust_annotations=True,
        tools={"t": McpToolOverride(access="write", requires_approval=False, idempotent=True, timeout_s=3)},
    )
    tool = ListedTool("t", input_schema=SCHEMA, read_only_hint=True)
    [spec] = catalog([tool], settings, ToolRetrySettings()).tools
    assert (spec.permission.access, spec.requires_approval, spec.idempotent, spec.timeout_s) == (
        "write",
        False,
        True,
        3,
    )
    assert spec.permission.group == "mcp.shop" and (spec.mcp_server, spec.mcp_tool) == ("shop", "t")


def test_a_listing_is_bounded_and_bad_schemas_are_reported() -> None:
    deep: dict[str, Any] = {"type": "object"}
    for _ in range(100):
        deep = {"type": "object", "properties": {"a": deep}}
    tools = [
        ListedTool("ok", input_schema=SCHEMA, description="Use it. password=hunter2"),
        ListedTool("deep", input_schema=deep),
        ListedTool("x" * 200, input_schema=SCHEMA),
        ListedTool("off", input_schema=SCHEMA),
    ]
    found = catalog(tools, server(tools={"off": McpToolOverride(enabled=False)}), ToolRetrySettings())
    assert [t.name for t in found.tools] == ["shop__ok"]
    assert "hunter2" not in found.tools[0].description  # descriptions reach the model: redacted
    assert any("nests deeper" in s for s in found.skipped) and any("200 characters" in s for s in found.skipped)
    many = [ListedTool(f"t{i}", input_schema=SCHEMA) for i in range(5)]
    assert len(catalog(many, server(max_tools=3), ToolRetrySettings()).tools) == 3


def test_the_sdk_tool_becomes_plain_data() -> None:
    tool = types.Tool(
        name="a.b",
        input_schema=SCHEMA,
        annotations=types.ToolAnnotations(title="A B", read_only_hint=True, destructive_hint=False),
    )
    assert listed(tool) == ListedTool("a.b", "", "A B", SCHEMA, None, True, False, None)


# --- the registry -------------------------------------------------------------------------------------


def _registry() -> ToolRegistry:
    return ToolRegistry(ToolsSettings(), default_specs())


def test_a_servers_tools_are_registered_marked_down_and_never_shadow_others() -> None:
    registry = _registry()
    settings = server(prefix="calc")
    tools = catalog([ListedTool("Add", input_schema=SCHEMA)], settings, ToolRetrySettings()).tools
    assert registry.set_mcp_tools("shop", list(tools)) == []
    assert registry.get("calc__add") is not None and not registry.get("calc__add").unavailable  # type: ignore[union-attr]
    version = registry.version
    registry.set_mcp_tools("shop", None, "the process exited")
    assert registry.get("calc__add").unavailable == "the process exited"  # type: ignore[union-attr]
    assert registry.version > version
    # A tool whose name another tool has is left out, with the reason.
    clash = [t.__class__(**{**t.__dict__, "name": "calculator"}) for t in tools]
    problems = registry.set_mcp_tools("other", clash)
    assert problems and "name is taken" in problems[0]
    assert registry.get("calculator").spec.executor == "builtin"  # type: ignore[union-attr]


# --- answers and errors --------------------------------------------------------------------------------


def _tool() -> Any:
    return catalog([ListedTool("t", input_schema=SCHEMA)], server(), ToolRetrySettings()).tools[0]


async def test_answers_become_outputs() -> None:
    tool = _tool()
    text = types.CallToolResult(content=[types.TextContent(text="a"), types.TextContent(text="b")])
    assert (await results.produced(tool, text, None, "s")).text == "a\nb"
    structured = types.CallToolResult(content=[], structured_content={"x": 1})
    assert (await results.produced(tool, structured, None, "s")).value == {"x": 1}
    png = base64.b64encode(b"\x89PNG....").decode()
    mixed = types.CallToolResult(
        content=[
            types.TextContent(text="see"),
            types.ImageContent(data=png, mime_type="image/png"),
            types.EmbeddedResource(resource=types.TextResourceContents(uri="file:///a", text="password=hunter2")),
        ]
    )
    value = (await results.produced(tool, mixed, None, "s")).value
    assert value["content"][0] == {"type": "text", "text": "see"}
    assert value["content"][1] == {"type": "image", "media_type": "image/png", "size_bytes": 8, "stored": False}
    assert value["content"][2]["redacted"] is True
    broken = types.CallToolResult(content=[types.ImageContent(data="not base64!", mime_type="image/png")])
    with pytest.raises(AgentmeshError) as raised:
        await results.produced(tool, broken, None, "s")
    assert raised.value.code == ErrorCode.OUTPUT_INVALID


async def test_is_error_is_engineering_with_the_servers_text_redacted() -> None:
    failed = types.CallToolResult(
        content=[types.TextContent(text="denied for token=k7Qx2mW9pR4tZ8vN3bL6")], is_error=True
    )
    with pytest.raises(AgentmeshError) as raised:
        await results.produced(_tool(), failed, None, "s")
    err = raised.value
    assert (err.code, err.error_class) == (ErrorCode.UPSTREAM_REJECTED, ErrorClass.ENGINEERING)
    assert "denied for" in err.message and "k7Qx2mW9pR4tZ8vN3bL6" not in err.message
    assert not unknown_delivery(err)


@pytest.mark.parametrize(
    ("code", "expected", "known"),
    [
        (types.INVALID_PARAMS, ErrorCode.SCHEMA_INVALID, True),
        (types.METHOD_NOT_FOUND, ErrorCode.UPSTREAM_NOT_FOUND, True),
        (types.INTERNAL_ERROR, ErrorCode.UPSTREAM_UNAVAILABLE, True),
        (types.INVALID_REQUEST, ErrorCode.UPSTREAM_REJECTED, True),
        (types.CONNECTION_CLOSED, ErrorCode.UPSTREAM_UNAVAILABLE, False),
        (types.REQUEST_TIMEOUT, ErrorCode.UPSTREAM_TIMEOUT, False),
    ],
)
def test_protocol_errors_are_typed_and_say_whether_the_server_answered(
    code: int, expected: ErrorCode, known: bool
) -> None:
    err = results.protocol_error(_tool(), MCPError(code, "quantity must be even"))
    assert err.code == expected
    # A server's answer is a known outcome; a closed connection or a timeout is not (exactly-once rules).
    assert unknown_delivery(err) is not known
    if code == types.INVALID_PARAMS:
        assert err.error_class == ErrorClass.CONTRACT and err.violations[0].hint == "quantity must be even"


def test_an_answer_outside_the_output_schema_is_output_invalid() -> None:
    err = results.invalid_answer(_tool(), RuntimeError("Invalid structured content returned by tool t: 'x'"))
    assert err.code == ErrorCode.OUTPUT_INVALID and not unknown_delivery(err)


# --- stderr ----------------------------------------------------------------------------------------------


async def test_stderr_lines_are_redacted_cut_rate_limited_and_end_of_file_is_seen(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="tool_svc.mcp.stderr")
    ended = asyncio.Event()
    now = [0.0]
    pump = StderrPump("s", on_eof=ended.set, clock=lambda: now[0])
    pump.start()
    pump.errlog.write("connecting with password=hunter2\n" + "y" * 5000 + "\n")
    pump.errlog.flush()
    pump.release_write_end()
    await asyncio.wait_for(ended.wait(), 5)
    lines = [r.getMessage() for r in caplog.records]
    assert "password=[REDACTED]" in lines[0] and "hunter2" not in lines[0]
    assert len(lines[1]) < 1100
    for _ in range(LINES_PER_WINDOW + 5):
        pump.emit(b"again\n")
    now[0] = 11.0
    pump.emit(b"later\n")
    assert any("suppressed 7 stderr lines" in r.getMessage() for r in caplog.records)
    await pump.aclose()


# --- the stdio environment ------------------------------------------------------------------------------


def test_a_stdio_server_gets_its_env_plus_path_and_home_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTMESH_AUTH_KEY", "secret")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("USER", "me")
    settings = server(command="my-server", args=["--flag"], env={"TOKEN": SecretStr("t")})
    params = McpConnection(settings, lambda *_: None)._stdio_parameters()
    assert params.env == {"TOKEN": "t", "PATH": os.environ["PATH"], "HOME": os.environ["HOME"]}
    # The SDK adds its own allow-list of our variables; the process starts without them.
    assert params.args[-3:] == ["--", "my-server", "--flag"]
    unset = params.args[: params.args.index("--")]
    assert set(unset[1::2]) == {"LOGNAME", "SHELL", "TERM", "USER"} and set(unset[::2]) == {"-u"}


def test_the_sdks_own_log_records_are_redacted(caplog: pytest.LogCaptureFixture) -> None:
    import mcp.client.stdio  # noqa: F401 - creates the SDK's loggers

    from tool_svc.mcp.stderr import redact_sdk_logs

    redact_sdk_logs()
    caplog.set_level(logging.INFO, logger="mcp.client.stdio")
    try:
        raise ValueError("line was: password=hunter2 not json")
    except ValueError:
        logging.getLogger("mcp.client.stdio").exception("Failed to parse JSONRPC message from server")
    [record] = [r for r in caplog.records if r.name == "mcp.client.stdio"]
    assert "hunter2" not in record.getMessage() and "[REDACTED]" in record.getMessage()
    assert record.exc_info is None


def test_a_registry_tool_may_not_use_a_servers_prefix() -> None:
    from agentmesh.config import ToolEntrySettings

    with pytest.raises(ValueError, match="uses the prefix shop__"):
        ToolsSettings(
            registry=[ToolEntrySettings(name="shop__x", endpoint_url="http://h/x")],
            mcp_servers=[server()],
        )


def test_a_collision_in_a_later_listing_marks_the_name_unavailable_and_a_fix_restores_it() -> None:
    """Issue 39: the same for `list_changed` updates as at start-up: listed, unavailable, never run."""
    registry = _registry()
    settings = server(prefix="calc")
    first = catalog([ListedTool("calculator", input_schema=SCHEMA)], settings, ToolRetrySettings())
    assert registry.set_mcp_tools("shop", list(first.tools)) == []
    clash = catalog(
        [ListedTool("calculator", input_schema=SCHEMA), ListedTool("CALCULATOR", input_schema=SCHEMA)],
        settings,
        ToolRetrySettings(),
    )
    reasons = {c.name: c.describe("shop") for c in clash.collisions}
    registry.set_mcp_tools("shop", list(clash.tools), "", reasons)
    tool = registry.get("calc__calculator")
    assert tool is not None and "'calculator'" in tool.collision and "'CALCULATOR'" in tool.collision
    assert tool.unavailable == tool.collision
    registry.set_mcp_tools("shop", list(first.tools))
    fixed = registry.get("calc__calculator")
    assert fixed is not None and not fixed.collision and not fixed.unavailable


async def test_a_text_blob_resource_is_redacted_before_it_is_stored() -> None:
    """Issue 39: blob resources were stored as payloads unredacted."""
    stored: list[bytes] = []

    class Payloads:
        async def put(self, session_id: str, content: bytes, media_type: str) -> Any:
            stored.append(content)
            return types_ns(ref_id="r1", media_type=media_type, size_bytes=len(content), sha256="x")

    secret = "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\npassword=hunter2\n"
    blob = base64.b64encode(secret.encode()).decode()
    binary = base64.b64encode(b"\x89PNG\x00\xff\xfe password=hunter2").decode()
    result = types.CallToolResult(
        content=[
            types.EmbeddedResource(resource=types.BlobResourceContents(uri="file:///cfg", blob=blob)),
            types.EmbeddedResource(
                resource=types.BlobResourceContents(uri="file:///img", blob=binary, mime_type="image/png")
            ),
        ]
    )
    value = (await results.produced(_tool(), result, Payloads(), "s")).value  # type: ignore[arg-type]
    assert value["content"][0]["redacted"] is True
    assert b"hunter2" not in stored[0] and b"wJalrXUtnFEMI" not in stored[0]
    assert "redacted" not in value["content"][1] and stored[1] == base64.b64decode(binary)


def types_ns(**fields: Any) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(**fields)
