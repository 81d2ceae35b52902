"""ExecuteTool through a real gRPC server: built-ins, HTTP tools against a real local upstream, offload,
redaction, and every in-band error code tool_svc answers with, each with its class."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

from agentmesh.dev.localredis import LocalRedis
from agentmesh.errors import ErrorCode
from agentmesh.rpc.status import from_rpc_error
from agentmesh.v1 import common_pb2, tool_pb2
from tests.contract.tool.conftest import Client, class_name, error_name, output_json
from tests.contract.tool.fakes import FakeUpstream

# --- success paths of the built-ins -------------------------------------------------------------------


async def test_calculator(tool_service: Any) -> None:
    c = Client(await tool_service())
    result = await c.execute("calculator", {"expression": "(17 * 3) / 4"}, call_id="c-9")
    assert result.tool_call_id == "c-9" and result.tool_name == "calculator"
    assert output_json(result) == {"expression": "(17 * 3) / 4", "result": 12.75}
    assert result.output.result_type == common_pb2.RESULT_TYPE_STRUCTURED
    assert result.stats.attempts == 1 and result.stats.output_bytes > 0


async def test_http_request(tool_service: Any, upstream: FakeUpstream) -> None:
    c = Client(await tool_service())
    value = output_json(await c.execute("http_request", {"url": upstream.url("/ok")}))
    assert value["status"] == 200 and value["body"]["count"] == 1
    head = output_json(await c.execute("http_request", {"url": upstream.url("/ok"), "method": "HEAD"}))
    assert head["status"] == 200
    garbage = output_json(await c.execute("http_request", {"url": upstream.url("/garbage")}))
    assert garbage["body"] == "<html>definitely not json"
    refused = await c.execute("http_request", {"url": "http://10.255.255.1/secret"})
    assert error_name(refused) == "PERMISSION_DENIED" and "allowlist" in refused.error.message
    posting = await c.execute("http_request", {"url": upstream.url("/ok"), "method": "POST"})
    assert error_name(posting) == "SCHEMA_INVALID"


async def test_query_logs(tool_service: Any) -> None:
    c = Client(await tool_service())
    result = await c.execute("query_logs", {"service": "payment-svc", "level": "ERROR", "contains": "timeout"})
    assert result.output.result_type == common_pb2.RESULT_TYPE_TEXT
    lines = result.output.inline.splitlines()
    assert lines[0].startswith("# 1 matching") and "ORD-2025-0002" in lines[1]


async def test_large_output_is_offloaded_and_read_back(tool_service: Any) -> None:
    c = Client(await tool_service())
    big = await c.execute("get_big", {}, session="sess-a", goal="which items failed")
    assert big.output.WhichOneof("content") == "ref"
    ref = big.output.ref
    assert ref.session_id == "sess-a" and ref.size_bytes > 2048 and ref.ref_id == "pl_" + ref.sha256
    assert "total 300" in big.output.digest and len(big.output.digest) < 2048
    assert big.stats.output_bytes == ref.size_bytes

    part = output_json(
        await c.execute("read_payload", {"ref_id": ref.ref_id, "json_path": "$.items[0:3]"}, session="sess-a")
    )
    assert json.loads(part["content"]) == [
        [{"id": 0, "status": "failed"}, {"id": 1, "status": "ok"}, {"id": 2, "status": "ok"}]
    ] or (json.loads(part["content"])[0]["id"] == 0)
    assert part["partial"] is True

    text = await c.execute("get_text", {}, session="sess-a", goal="errors")
    assert text.output.WhichOneof("content") == "ref" and "ERROR boom" in text.output.digest
    lines = output_json(
        await c.execute(
            "read_payload", {"ref_id": text.output.ref.ref_id, "line_start": 2, "line_end": 3}, session="sess-a"
        )
    )
    assert lines["content"] == "line 1: ok\nline 2: ok\n"

    # Another session cannot read it: the session is the call's, never an argument.
    other = await c.execute("read_payload", {"ref_id": ref.ref_id}, session="sess-b")
    assert error_name(other) == "NOT_FOUND" and class_name(other) == "ENGINEERING"
    bad = await c.execute("read_payload", {"ref_id": ref.ref_id, "json_path": "$[?"}, session="sess-a")
    assert error_name(bad) == "SCHEMA_INVALID" and bad.error.violations[0].path == "$.json_path"


async def test_read_payload_is_capped_and_never_offloaded(tool_service: Any) -> None:
    c = Client(await tool_service({"tools": {"read_payload_max_bytes": 1000}}))
    text = await c.execute("get_text", {}, session="s")
    whole = output_json(await c.execute("read_payload", {"ref_id": text.output.ref.ref_id}, session="s"))
    assert len(whole["content"].encode()) <= 1000 and "truncated" in whole


async def test_run_python(tool_service: Any) -> None:
    c = Client(await tool_service())
    result = await c.execute("run_python", {"code": "print(sum(x * x for x in range(10)))"})
    assert output_json(result) == {"exit_code": 0, "stdout": "285\n", "stderr": ""}


async def test_run_python_escapes_are_fatal_and_the_service_survives(tool_service: Any) -> None:
    c = Client(await tool_service())
    for code in (
        "print(open('/etc/passwd').read())",
        "open('/x', 'w')",
        "import socket; socket.create_connection(('1.1.1.1', 80))",
        "import os\nfor _ in range(64):\n    os.fork()",  # the guard only knows `while True` loops
    ):
        result = await c.execute("run_python", {"code": code})
        assert error_name(result) == "SANDBOX_VIOLATION" and class_name(result) == "FATAL", (code, result.error.message)
    timed = await c.execute("run_python", {"code": "import time; time.sleep(30)", "timeout_s": 0.5})
    assert error_name(timed) == "UPSTREAM_TIMEOUT" and class_name(timed) == "ENGINEERING"
    assert output_json(await c.execute("calculator", {"expression": "1+1"}))["result"] == 2


async def test_run_python_without_isolation_is_sandbox_unavailable(tool_service: Any, tmp_path: Path) -> None:
    c = Client(await tool_service({"tools": {"sandbox": {"bwrap_path": str(tmp_path / "missing-bwrap")}}}))
    marker = tmp_path / "ran"
    result = await c.execute("run_python", {"code": f"open({str(marker)!r}, 'w').write('x')"})
    assert error_name(result) == "SANDBOX_UNAVAILABLE" and class_name(result) == "ENGINEERING"
    assert not marker.exists()


# --- HTTP tools against a real upstream --------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "code", "fallback"),
    [
        ("get_metrics", "UPSTREAM_NOT_FOUND", "query_logs"),
        ("get_500", "UPSTREAM_UNAVAILABLE", "query_logs"),
        ("get_slow", "UPSTREAM_TIMEOUT", "query_logs"),
        ("get_400", "UPSTREAM_REJECTED", ""),
        ("get_302", "UPSTREAM_REJECTED", ""),
        ("get_429", "RATE_LIMITED", ""),
        ("get_garbage", "OUTPUT_INVALID", ""),
        ("get_latin1", "OUTPUT_INVALID", ""),
        ("get_nan", "OUTPUT_INVALID", ""),
        ("get_shaped", "OUTPUT_INVALID", ""),
    ],
)
async def test_http_failures_are_typed(tool_service: Any, tool: str, code: str, fallback: str) -> None:
    c = Client(await tool_service())
    result = await c.execute(tool, {})
    assert error_name(result) == code and class_name(result) == "ENGINEERING"
    assert result.error.fallback_tool == fallback
    assert "Traceback" not in result.error.message


async def test_http_details(tool_service: Any, upstream: FakeUpstream) -> None:
    c = Client(await tool_service())
    unavailable = await c.execute("get_500", {})
    assert unavailable.error.retryable and unavailable.stats.attempts == 3  # read-only: retried
    assert upstream.counts["/500"] == 3
    limited = await c.execute("get_429", {})
    assert limited.error.retry_after.seconds == 7
    shaped = await c.execute("get_shaped", {})
    assert shaped.error.violations[0].path == "$.status" and shaped.error.violations[0].rule == "required"
    assert output_json(await c.execute("get_ok", {"q": "x"}))["received"] == {"q": "x"}
    assert output_json(await c.execute("get_empty", {})) is None
    text = await c.execute("get_garbage_text", {})
    assert text.output.inline == "<html>definitely not json"
    latin = await c.execute("get_latin1_text", {})
    assert latin.output.inline.startswith("caf\ufffd")


async def test_unreachable_upstream(tool_service: Any, upstream: FakeUpstream) -> None:
    c = Client(await tool_service())
    upstream.stop()
    result = await c.execute("get_metrics", {})
    assert error_name(result) == "UPSTREAM_UNAVAILABLE" and result.error.fallback_tool == "query_logs"


async def test_writes_are_not_retried(tool_service: Any, upstream: FakeUpstream) -> None:
    c = Client(await tool_service())
    upstream.flaky_failures = 1
    result = await c.execute("flaky_write", {})
    assert error_name(result) == "UPSTREAM_UNAVAILABLE" and result.stats.attempts == 1
    upstream.flaky_failures = 2
    result = await c.execute("flaky_read", {})
    assert output_json(result)["ok"] is True and result.stats.attempts == 3


async def test_secrets_are_redacted(tool_service: Any) -> None:
    c = Client(await tool_service())
    result = await c.execute("get_secret", {})
    assert result.output.redacted
    text = result.output.inline
    assert "hunter2" not in text and "sk-live" not in text and "Xk9vQ2mR7tLp4Wz8Ns3Yd6Hf1Jc5Bg0a" not in text
    value = json.loads(text)
    assert value["total_tokens"] == 42 and value["dsn"].startswith("postgres://app:")
    assert not (await c.execute("calculator", {"expression": "1"})).output.redacted


# --- every in-band contract / fatal code ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "arguments", "raw", "code", "klass"),
    [
        ("nope_tool", {}, None, "UNKNOWN_TOOL", "CONTRACT"),
        ("calculator", None, '{"expression": "1+1",}', "ARGUMENTS_NOT_JSON", "CONTRACT"),
        ("charge", {"order_id": "ord-2025-12", "amount": 0}, None, "SCHEMA_INVALID", "CONTRACT"),
        ("calculator", {"expression": "1/0"}, None, "SCHEMA_INVALID", "CONTRACT"),
        ("run_shell", {"command": "sudo rm -r -f /var/lib/app"}, None, "DANGEROUS_OPERATION", "FATAL"),
        ("run_sql", {"sql": "DELETE FROM payments"}, None, "DANGEROUS_OPERATION", "FATAL"),
        ("run_python", {"code": "import os\nos.system('mkfs.ext4 /dev/sda')"}, None, "DANGEROUS_OPERATION", "FATAL"),
        ("calculator", None, '{"expression": "' + "1+" * 200_000 + '1"}', "PAYLOAD_TOO_LARGE", "ENGINEERING"),
    ],
)
async def test_contract_and_fatal_codes(
    tool_service: Any, upstream: FakeUpstream, tool: str, arguments: Any, raw: str | None, code: str, klass: str
) -> None:
    c = Client(await tool_service())
    result = await c.execute(tool, arguments, raw=raw)
    assert error_name(result) == code and class_name(result) == klass
    if klass == "CONTRACT":
        assert result.error.violations, "a CONTRACT error must say what to fix"
    assert sum(upstream.counts.values()) == 0  # nothing ran
    if tool != "calculator":  # the calculator finds its errors while evaluating
        assert result.stats.attempts == 0


async def test_harmless_marked_values_run(tool_service: Any) -> None:
    c = Client(await tool_service())
    result = await c.execute("run_shell", {"command": "cat 'rm -rf.txt'"})
    assert result.WhichOneof("outcome") == "output"
    result = await c.execute("run_sql", {"sql": "SELECT * FROM logs WHERE msg LIKE '%TRUNCATE%'"})
    assert result.WhichOneof("outcome") == "output"
    logs = await c.execute("query_logs", {"service": "payment-svc", "contains": "TRUNCATE"})
    assert "TRUNCATE of ledger refused" in logs.output.inline


async def test_an_executor_bug_is_internal_not_a_traceback(tool_service: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from tool_svc.builtin import calculator

    async def broken(invocation: Any) -> Any:
        raise KeyError("internal detail")

    monkeypatch.setattr(calculator, "make", lambda cpu: broken)
    c = Client(await tool_service())
    result = await c.execute("calculator", {"expression": "1"})
    assert error_name(result) == "INTERNAL" and class_name(result) == "ENGINEERING"
    assert "internal detail" not in result.error.message and "Traceback" not in result.error.message


async def test_unknown_tool_suggests_the_closest(tool_service: Any) -> None:
    c = Client(await tool_service())
    result = await c.execute("calculater", {})
    assert result.error.metadata["closest_tools"].split(",")[0] == "calculator"


async def test_rate_limit(tool_service: Any) -> None:
    c = Client(await tool_service({"tools": {"rate_limit": {"capacity": 2, "refill_per_second": 0.01}}}))
    for _ in range(2):
        assert (await c.execute("calculator", {"expression": "1"})).WhichOneof("outcome") == "output"
    limited = await c.execute("calculator", {"expression": "1"})
    assert error_name(limited) == "RATE_LIMITED" and class_name(limited) == "ENGINEERING"
    assert limited.error.retryable and limited.error.retry_after.seconds >= 90
    # Per agent: another agent has its own bucket.
    other = await c.execute("calculator", {"expression": "1"}, agent_id="agent-b")
    assert other.WhichOneof("outcome") == "output"


async def test_circuit_breaker_opens_probes_and_ramps_back(tool_service: Any, upstream: FakeUpstream) -> None:
    c = Client(
        await tool_service(
            {"tools": {"breaker": {"failure_threshold": 2, "open_s": 0.3, "ramp_s": 1.0, "ramp_start_fraction": 0.25}}}
        )
    )
    upstream.flaky_failures = 6  # two calls of three attempts each
    for _ in range(2):
        assert error_name(await c.execute("flaky_read", {})) == "UPSTREAM_UNAVAILABLE"
    refused = await c.execute("flaky_read", {})
    assert error_name(refused) == "CIRCUIT_OPEN" and class_name(refused) == "ENGINEERING"
    assert refused.error.retryable and refused.stats.attempts == 0
    # The breaker is the agent's (tools.breaker.scope: agent): its next task, another instance, meets it open
    # too instead of hammering the failing upstream again (issue 42).
    next_task = await c.execute("flaky_read", {}, instance="agent-a/task-2")
    assert error_name(next_task) == "CIRCUIT_OPEN" and next_task.stats.attempts == 0

    deadline = time.monotonic() + 5
    while error_name_or_none(probe := await c.execute("flaky_read", {})) == "CIRCUIT_OPEN":
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    assert output_json(probe)["ok"] is True  # the half-open probe passed
    burst = [await c.execute("flaky_read", {}) for _ in range(12)]
    admitted = sum(r.WhichOneof("outcome") == "output" for r in burst)
    assert 0 < admitted < 12, "while ramping, only a share of calls is admitted"
    deadline = time.monotonic() + 5
    while True:
        burst = [await c.execute("flaky_read", {}) for _ in range(5)]
        if all(r.WhichOneof("outcome") == "output" for r in burst):
            break
        assert time.monotonic() < deadline, "the breaker never closed"
        await asyncio.sleep(0.1)


async def test_a_breaker_scoped_to_the_instance_spares_the_agents_other_tasks(
    tool_service: Any, upstream: FakeUpstream
) -> None:
    c = Client(await tool_service({"tools": {"breaker": {"failure_threshold": 2, "open_s": 30, "scope": "instance"}}}))
    upstream.flaky_failures = 6
    for _ in range(2):
        assert error_name(await c.execute("flaky_read", {}, instance="agent-a/task-1")) == "UPSTREAM_UNAVAILABLE"
    assert error_name(await c.execute("flaky_read", {}, instance="agent-a/task-1")) == "CIRCUIT_OPEN"
    assert output_json(await c.execute("flaky_read", {}, instance="agent-a/task-2"))["ok"] is True


def error_name_or_none(result: common_pb2.ToolResult) -> str | None:
    return error_name(result) if result.WhichOneof("outcome") == "error" else None


# --- faults of the RPC itself ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (tool_pb2.ExecuteToolRequest(session_id="s"), "call"),
        (tool_pb2.ExecuteToolRequest(call=common_pb2.ToolCall(name="calculator")), "session_id"),
        (tool_pb2.ExecuteToolRequest(call=common_pb2.ToolCall(name="calculator"), session_id="a {b}"), "session_id"),
        (
            tool_pb2.ExecuteToolRequest(
                call=common_pb2.ToolCall(name="calculator"), session_id="s", idempotency_key="k k"
            ),
            "idempotency_key",
        ),
    ],
)
async def test_malformed_requests_are_invalid_argument(tool_service: Any, request_: Any, field: str) -> None:
    c = Client(await tool_service())
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await c.stub.ExecuteTool(request_, metadata=c.meta(), timeout=5)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    err = from_rpc_error(caught.value)
    assert err.code == ErrorCode.INVALID_REQUEST and err.violations[0].path == field


async def test_redis_outage_is_unavailable_not_a_hang(
    tool_service: Any, fresh_redis: LocalRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTMESH_REDIS_URL", fresh_redis.url)  # the environment wins over overrides
    # local_batch 1: no locally leased tokens, so every call needs Redis.
    c = Client(await tool_service({"redis": {"socket_timeout_s": 0.5}, "tools": {"rate_limit": {"local_batch": 1}}}))
    assert (await c.execute("calculator", {"expression": "1"})).WhichOneof("outcome") == "output"
    fresh_redis.kill()
    began = time.monotonic()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await c.execute("calculator", {"expression": "1"}, timeout=20)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert time.monotonic() - began < 10


# --- telemetry ---------------------------------------------------------------------------------------


async def test_every_execution_records_a_span(tool_service: Any) -> None:
    svc = await tool_service()
    c = Client(svc)
    await c.execute("get_big", {}, session="s")
    await c.execute("get_metrics", {})
    svc.host.telemetry.force_flush()
    text = await asyncio.to_thread(Path(svc.settings.telemetry.span_file).read_text)
    spans = [json.loads(line) for line in text.splitlines()]
    tool_spans = {s["attributes"]["gen_ai.tool.name"]: s for s in spans if s["name"].startswith("execute_tool")}
    big = tool_spans["get_big"]["attributes"]
    assert big["gen_ai.operation.name"] == "execute_tool"
    assert big["agentmesh.tool.attempts"] == 1 and big["agentmesh.tool.bytes_out"] > 2048
    assert 0 < big["agentmesh.tool.bytes_after_digest"] < big["agentmesh.tool.bytes_out"]
    assert big["agentmesh.tool.bytes_in"] == 2
    failed = tool_spans["get_metrics"]["attributes"]
    assert failed["agentmesh.error.code"] == "UPSTREAM_NOT_FOUND" and failed["agentmesh.error.class"] == "ENGINEERING"
    assert failed["agentmesh.request_id"]
