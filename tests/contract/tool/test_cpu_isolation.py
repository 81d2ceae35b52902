"""CPU-heavy work never runs on tool_svc's event loop (issue 19), through a real gRPC server.

`round(1, -10**7)` computes 10**(10**7): about 12 s of one C call. It used to run on the event loop, so
the tool's timeout never fired and every RPC of the replica, health included, waited for it. The
calculator's guards now refuse it at once; to show what happens to a computation the guards miss, one
test loosens them (`calculator.LIMITS` travels with each job to the worker), and the job must end
UPSTREAM_TIMEOUT, killed, while Health/Check and ListTools are answered.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from typing import Any

import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentmesh.v1 import tool_pb2
from tests.contract.tool.conftest import Client, class_name, error_name, output_json
from tool_svc.builtin import calculator

# A short tool timeout and kill grace keep the test fast.
FAST_CALCULATOR = {
    "tools": {
        "cpu_kill_grace_s": 0.2,
        "registry": [{"name": "calculator", "executor": "builtin", "timeout_s": 1.0}],
    }
}


async def test_a_runaway_calculation_times_out_while_health_and_list_tools_are_answered(
    tool_service: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(calculator, "LIMITS", calculator.Limits(max_round_digits=10**9))
    svc = await tool_service(FAST_CALCULATOR)
    c = Client(svc)
    health = health_pb2_grpc.HealthStub(svc.channel)
    finished: list[str] = []

    async def track(name: str, call: Awaitable[Any]) -> Any:
        reply = await call
        finished.append(name)
        return reply

    runaway = asyncio.create_task(
        track("calculator", c.execute("calculator", {"expression": "round(1, -10**7)"}, timeout=30))
    )
    # Let the calculator call reach the server first (a sequencing aid, not an assertion: on the old code
    # the loop is then stuck and the calls below wait ~12 s behind it).
    await asyncio.sleep(0.3)
    checked, listed = await asyncio.gather(
        track("health", health.Check(health_pb2.HealthCheckRequest(service=""), metadata=c.meta(), timeout=30)),
        track("list_tools", c.stub.ListTools(tool_pb2.ListToolsRequest(), metadata=c.meta(), timeout=30)),
    )
    result = await runaway

    assert checked.status == health_pb2.HealthCheckResponse.SERVING
    assert "calculator" in {t.name for t in listed.tools}
    assert finished.index("health") < finished.index("calculator")
    assert finished.index("list_tools") < finished.index("calculator")
    assert error_name(result) == "UPSTREAM_TIMEOUT" and class_name(result) == "ENGINEERING"
    assert result.stats.attempts == 1  # deterministic: never retried
    # The killed worker was replaced: the replica still calculates.
    assert output_json(await c.execute("calculator", {"expression": "6 * 7"}))["result"] == 42


async def test_the_guards_refuse_the_runaway_round_at_once(tool_service: Any) -> None:
    c = Client(await tool_service(FAST_CALCULATOR))
    result = await c.execute("calculator", {"expression": "round(1, -10**7)"})
    assert error_name(result) == "SCHEMA_INVALID" and class_name(result) == "CONTRACT"
    assert result.error.violations[0].rule == "range"


async def test_large_inputs_take_the_pool_path_with_the_same_answers(tool_service: Any) -> None:
    # Inline limit 0: digests, selections and argument validation all run in the worker processes.
    c = Client(await tool_service({"tools": {"cpu_inline_max_bytes": 0}}))
    big = await c.execute("get_big", {}, session="sess-p", goal="which items failed")
    assert big.output.WhichOneof("content") == "ref" and "total 300" in big.output.digest
    ref = big.output.ref.ref_id
    part = output_json(await c.execute("read_payload", {"ref_id": ref, "json_path": "$.items[0:2]"}, session="sess-p"))
    assert [item["id"] for item in json.loads(part["content"])] == [0, 1] and part["partial"] is True
    lines = output_json(
        await c.execute("read_payload", {"ref_id": ref, "line_start": 1, "line_end": 1}, session="sess-p")
    )
    assert lines["content"]
    bad_path = await c.execute("read_payload", {"ref_id": ref, "json_path": "$[?"}, session="sess-p")
    assert error_name(bad_path) == "SCHEMA_INVALID"
    logs = await c.execute("query_logs", {"service": "payment-svc", "level": "ERROR"})
    assert logs.output.inline.startswith("# 2 matching")
    invalid = await c.execute("charge", {"order_id": "ORD-1", "amount": 0})
    assert error_name(invalid) == "SCHEMA_INVALID"
    assert {v.path for v in invalid.error.violations} == {"$.order_id", "$.amount"}
    not_json = await c.execute("charge", raw='{"order_id": ')
    assert error_name(not_json) == "ARGUMENTS_NOT_JSON"
