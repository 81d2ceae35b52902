"""tool_svc's metrics without gRPC: each executed call's outcome by tool, class and code; a replay is not
counted twice; a made-up tool name never becomes a label; breakers are reported by state."""

from __future__ import annotations

import json
from typing import Any

from agentmesh.store import Store
from tests.metricsutil import recorded_metrics
from tool_svc.breaker import BreakerConfig, Breakers
from tool_svc.gateway import UNKNOWN_TOOL_LABEL, Gateway
from tool_svc.model import Caller, CallRequest, Invocation, Output, Pending, Produced
from tool_svc.retry import Execute

CALLER = Caller(subject="agent-a", agent_id="agent-a", instance="agent-a-1", permissions=("*:*:*",))


def request(name: str, arguments: Any, *, raw: str | None = None, **fields: Any) -> CallRequest:
    text = raw if raw is not None else json.dumps(arguments)
    return CallRequest(call_id="c1", name=name, arguments_json=text, session_id="s1", **fields)


async def test_outcomes_by_tool_class_and_code(make_settings: Any, store: Store) -> None:
    got = recorded_metrics()
    gateway = Gateway(make_settings(), store, metrics=got.metrics)
    execute = next(step for step in gateway.pipeline if isinstance(step, Execute))

    async def answer(invocation: Invocation) -> Produced:
        return Produced("structured", {"expression": "6*7", "result": 42})

    # In-process executor: the calculator's worker pool is not what this test is about.
    execute.executors = {**execute.executors, "calculator": answer}
    try:
        ok = await gateway.execute(request("calculator", {"expression": "6*7"}), CALLER)
        assert isinstance(ok.outcome, Output)
        bad = await gateway.execute(request("calculator", None, raw="{oops"), CALLER)
        assert bad.outcome.code.name == "ARGUMENTS_NOT_JSON"  # type: ignore[union-attr]
        made_up = "tool_the_model_invented_" + "z" * 30
        unknown = await gateway.execute(request(made_up, {}), CALLER)
        assert unknown.outcome.code.name == "UNKNOWN_TOOL"  # type: ignore[union-attr]
        # A replay answers from the record: the call ran once, and is counted once.
        for _ in range(2):
            await gateway.execute(request("calculator", {"expression": "1"}, idempotency_key="k-1"), CALLER)
    finally:
        await gateway.aclose()
    calls = "agentmesh.tool.calls"
    assert got.value(calls, tool="calculator", outcome="output") == 2
    assert (
        got.value(calls, tool="calculator", outcome="error", error_class="CONTRACT", error_code="ARGUMENTS_NOT_JSON")
        == 1
    )
    assert got.value(calls, tool=UNKNOWN_TOOL_LABEL, error_code="UNKNOWN_TOOL") == 1
    assert not [a for a, _ in got.points(calls) if made_up in a.values()]
    assert got.value("agentmesh.tool.call.duration", tool="calculator") == 3


async def test_a_write_waiting_for_approval_is_counted_as_pending(make_settings: Any, store: Store) -> None:
    got = recorded_metrics()
    settings = make_settings(
        {
            "tools": {
                "http_allowlist": ["http://127.0.0.1:9/"],
                "registry": [
                    {
                        "name": "restart",
                        "description": "Use when a service must be restarted.",
                        "input_schema": {"type": "object"},
                        "permission": {"group": "ops", "access": "write"},
                        "executor": "http",
                        "endpoint_url": "http://127.0.0.1:9/restart",
                    }
                ],
            }
        }
    )
    gateway = Gateway(settings, store, metrics=got.metrics)
    try:
        result = await gateway.execute(request("restart", {}, idempotency_key="k-2"), CALLER)
    finally:
        await gateway.aclose()
    assert isinstance(result.outcome, Pending)
    assert got.value("agentmesh.tool.calls", tool="restart", outcome="pending_approval") == 1


def test_the_breaker_census_reads_states_without_changing_them() -> None:
    now = [0.0]
    breakers = Breakers(BreakerConfig(failure_threshold=1, open_s=10, ramp_s=5), clock=lambda: now[0])
    for instance in ("a-1", "a-2"):
        assert breakers.admit(instance, "get") is None
        breakers.record(instance, "get", success=False)
    assert breakers.admit("a-1", "other") is None
    assert breakers.census() == [("get", "open", 2), ("other", "closed", 1)]
    now[0] = 11.0  # past open_s: half-open on the next look, but the census changes nothing
    assert breakers.census() == [("get", "half_open", 2), ("other", "closed", 1)]
    assert breakers._entries[("a-1", "get")].state == "open"
    got = recorded_metrics()
    got.metrics.observe_breakers(breakers.census)
    assert got.value("agentmesh.tool.breakers", tool="get", state="half_open") == 2
