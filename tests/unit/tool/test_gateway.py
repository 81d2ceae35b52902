"""The gateway without gRPC: pipeline order, executor bugs, and the example configuration."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentmesh.config import Settings, load_settings
from agentmesh.errors import AgentmeshError, ErrorClass, ErrorCode
from agentmesh.store import Store
from tool_svc.gateway import Gateway
from tool_svc.model import Caller, CallRequest, Output
from tool_svc.retry import Execute
from tool_svc.validation import marked_values

REPO = Path(__file__).resolve().parents[3]
CALLER = Caller(subject="agent-a", agent_id="agent-a", instance="agent-a-1", permissions=("*:*:*",))


def request(name: str, arguments: Any, **fields: Any) -> CallRequest:
    return CallRequest(call_id="c1", name=name, arguments_json=json.dumps(arguments), session_id="s1", **fields)


def test_the_pipeline_is_in_the_documented_order() -> None:
    gateway = Gateway(Settings(auth={"mode": "disabled"}), None)
    assert [type(step).__name__ for step in gateway.pipeline] == [
        "ResolveTool",
        "CheckPermission",
        "ValidateArgumentsInPool",
        "GuardArguments",
        "Idempotency",
        "RequireApproval",
        "RateLimit",
        "CircuitBreaker",
        "Execute",
        "ValidateOutput",
        "RedactSecrets",
        "Offload",
    ]


async def test_works_without_redis_for_stateless_tools() -> None:
    gateway = Gateway(Settings(auth={"mode": "disabled"}), None)
    try:
        result = await gateway.execute(request("calculator", {"expression": "6*7"}), CALLER)
    finally:
        await gateway.aclose()
    assert isinstance(result.outcome, Output) and json.loads(result.outcome.inline)["result"] == 42


async def test_an_executor_bug_is_internal_and_not_replayed(
    make_settings: Any, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    gateway = Gateway(make_settings(), store)
    execute = next(step for step in gateway.pipeline if isinstance(step, Execute))
    calls = []

    async def broken(invocation: Any) -> Any:
        calls.append(1)
        raise RuntimeError("bug with /secret/path in it")

    execute.executors = {**execute.executors, "calculator": broken}
    first = await gateway.execute(request("calculator", {"expression": "1"}, idempotency_key="k1"), CALLER)
    assert isinstance(first.outcome, AgentmeshError)
    assert first.outcome.code == ErrorCode.INTERNAL and first.outcome.error_class == ErrorClass.ENGINEERING
    assert "secret" not in first.outcome.message
    assert "executor of calculator failed" in caplog.text
    second = await gateway.execute(request("calculator", {"expression": "1"}, idempotency_key="k1"), CALLER)
    assert not second.stats.replayed and len(calls) == 2


def test_the_example_configuration_loads_and_its_shell_fields_are_guarded() -> None:
    settings = load_settings([REPO / "agentmesh.yaml", REPO / "agentmesh.demo.yaml"])
    gateway = Gateway(settings, None)
    tools = gateway.registry.tools()
    names = {t.spec.name for t in tools}
    assert {"calculator", "http_request", "query_logs", "read_payload", "run_python"} <= names
    guard = next(step for step in gateway.pipeline if type(step).__name__ == "GuardArguments")
    shell_tools = 0
    for tool in tools:
        assert not tool.spec.fallback_tool or tool.spec.fallback_tool in names
        for path, kind, _ in marked_values(
            tool.spec.input_schema, {"command": "x", "host": "h", "sql": "x", "code": "x"}
        ):
            if kind == "shell":
                shell_tools += 1
                finding = guard.guard.check(kind, "rm -rf /var/lib/payment", write=True)  # type: ignore[attr-defined]
                assert finding is not None, path
    assert shell_tools >= 1


async def test_a_failed_audit_write_is_logged_and_the_registration_stands(
    make_settings: Any, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    from agentmesh.errors import UnavailableError
    from tool_svc.model import Permission, ToolDef

    gateway = Gateway(make_settings({"tools": {"http_allowlist": ["http://127.0.0.1:9/"]}}), store)
    assert gateway.audit is not None

    async def unavailable(**fields: Any) -> None:
        raise UnavailableError("redis unavailable during append to the audit log")

    gateway.audit.record = unavailable  # type: ignore[method-assign]
    spec = ToolDef(
        name="get_stock",
        description="Use when checking stock",
        input_schema={"type": "object"},
        permission=Permission("*", "shop", "read"),
        endpoint_url="http://127.0.0.1:9/stock",
        http_method="GET",
    )
    admin = Caller(subject="root-ann", roles=frozenset({"admin"}))
    try:
        stored = await gateway.register(spec, replace=False, caller=admin)
    finally:
        await gateway.aclose()
    assert stored == spec and "get_stock" in {t.name for t in await gateway.list_tools()}
    assert "audit: tool.register of get_stock by root-ann not recorded: redis unavailable" in caplog.text
