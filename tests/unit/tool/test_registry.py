"""The registry: built-ins, configured tools, run-time tools shared through Redis, and what it refuses."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from agentmesh.config import ConfigError, ToolsSettings, load_settings
from agentmesh.errors import AgentmeshError, ErrorCode
from agentmesh.store import Store
from tool_svc.builtin import default_specs
from tool_svc.model import ToolDef
from tool_svc.registry import ToolRegistry

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}}


def settings(**tools: Any) -> ToolsSettings:
    tools.setdefault("http_allowlist", ["http://127.0.0.1:*/"])
    return ToolsSettings(**tools)


def registry(store: Store | None = None, **tools: Any) -> ToolRegistry:
    return ToolRegistry(settings(**tools), default_specs(), store=store)


def test_builtins_are_registered_by_default() -> None:
    names = [t.spec.name for t in registry().tools()]
    assert names == ["calculator", "http_request", "query_logs", "read_payload", "run_python"]


def test_config_entries_and_builtin_refinement() -> None:
    reg = registry(
        builtins=["calculator"],
        registry=[
            {"name": "logs", "executor": "builtin", "builtin": "query_logs", "permission": {"group": "ops.read"}},
            {"name": "calculator", "executor": "builtin", "timeout_s": 1.5},
            {
                "name": "restart_service",
                "description": "Use when a service must be restarted",
                "input_schema": SCHEMA,
                "endpoint_url": "http://127.0.0.1:9/restart",
                "permission": {"group": "ops.write", "access": "write"},
                "impact": "restarts pods",
            },
        ],
    )
    logs = reg.get("logs")
    assert logs is not None and logs.spec.builtin == "query_logs" and logs.spec.permission.group == "ops.read"
    assert logs.spec.input_schema == default_specs()["query_logs"].input_schema
    calculator = reg.get("calculator")
    assert calculator is not None and calculator.spec.timeout_s == 1.5 and calculator.spec.idempotent
    restart = reg.get("restart_service")
    assert restart is not None and restart.spec.requires_approval  # writes need approval by default
    assert restart.spec.retry.max_attempts == 3


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        (
            {
                "name": "t",
                "description": "d",
                "input_schema": {"type": "objekt"},
                "endpoint_url": "http://127.0.0.1:9/",
            },
            "Draft 2020-12",
        ),
        (
            {"name": "t", "description": "d", "input_schema": SCHEMA, "endpoint_url": "https://evil.example/"},
            "allowlist",
        ),
        (
            {"name": "t", "description": "", "input_schema": SCHEMA, "endpoint_url": "http://127.0.0.1:9/"},
            "description",
        ),
        ({"name": "t", "description": "d", "input_schema": SCHEMA}, "endpoint_url"),
        ({"name": "t", "executor": "builtin", "builtin": "nope"}, "unknown built-in"),
        (
            {
                "name": "t",
                "description": "d",
                "input_schema": SCHEMA,
                "endpoint_url": "http://127.0.0.1:9/",
                "fallback_tool": "ghost",
            },
            "fallback_tool",
        ),
    ],
)
def test_bad_configuration_fails_start_up_naming_the_tool(entry: dict[str, Any], reason: str) -> None:
    with pytest.raises(ConfigError, match=reason) as caught:
        registry(registry=[entry])
    assert "t" in str(caught.value)


def test_unknown_keys_in_a_tool_entry_are_refused(tmp_path: Any) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("auth: {mode: disabled}\ntools:\n  registry:\n    - {name: t, endpoint: x}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="unknown key"):
        load_settings(path)


def test_unknown_tool_names_the_closest() -> None:
    err = registry().unknown("calculater")
    assert err.code == ErrorCode.UNKNOWN_TOOL
    assert err.metadata["closest_tools"].startswith("calculator")
    assert err.violations[0].path == "$.name"


async def test_runtime_tools_are_shared_through_redis(store: Store) -> None:
    first = registry(store)
    second = registry(store)
    tool = ToolDef(
        name="get_status", description="Use to get status", input_schema=SCHEMA, endpoint_url="http://127.0.0.1:9/s"
    )
    assert await second.resolve("calculator") is not None  # loads (nothing) now; next periodic load in 2 s
    await first.register(tool, replace_existing=False)
    # The other replica finds it on a miss, without waiting for its refresh period.
    found = await second.resolve("get_status")
    assert found is not None and found.source == "runtime"
    with pytest.raises(AgentmeshError) as exists:
        await first.register(tool, replace_existing=False)
    assert exists.value.code == ErrorCode.FAILED_PRECONDITION
    await first.register(replace(tool, description="Use to get the status"), replace_existing=True)
    await second.refresh()
    again = second.get("get_status")
    assert again is not None and again.spec.description == "Use to get the status"


async def test_runtime_registration_refusals(store: Store) -> None:
    reg = registry(store)
    base = ToolDef(name="x", description="d", input_schema=SCHEMA, endpoint_url="http://127.0.0.1:9/")
    cases = [
        (replace(base, name="Bad Name"), ErrorCode.INVALID_REQUEST, "tool.name"),
        (replace(base, executor="builtin", builtin="calculator"), ErrorCode.INVALID_REQUEST, "only http"),
        (replace(base, name="calculator"), ErrorCode.FAILED_PRECONDITION, "built-in"),
        (
            replace(base, input_schema={"type": "object", "properties": {"a": {"minimum": "x"}}}),
            ErrorCode.INVALID_REQUEST,
            "Draft",
        ),
        (replace(base, endpoint_url="http://10.0.0.1/"), ErrorCode.INVALID_REQUEST, "allowlist"),
        (replace(base, fallback_tool="x"), ErrorCode.INVALID_REQUEST, "own fallback"),
    ]
    for spec, code, text in cases:
        with pytest.raises(AgentmeshError) as caught:
            await reg.register(spec, replace_existing=True)
        assert caught.value.code == code and text in str(caught.value), spec
