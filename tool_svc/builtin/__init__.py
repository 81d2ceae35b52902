"""Built-in tools: their default specs (overridable from `tools.registry`) and their executors.

Executors only do their tool's job; validation, permissions, limits and offloading happen in the
gateway around them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from agentmesh.payloads import PayloadStore
from tool_svc.builtin import calculator, http_request, query_logs, read_payload, run_python
from tool_svc.cpu import CpuPool
from tool_svc.http import HttpTransport
from tool_svc.model import Executor, Permission, RetryPolicy, ToolDef
from tool_svc.sandbox import Sandbox

NO_RETRY = RetryPolicy(max_attempts=1, initial_backoff_s=0, max_backoff_s=0, max_jitter_s=0)


def default_specs(*, sandbox_timeout_s: float = 10.0) -> dict[str, ToolDef]:
    """The built-ins as registered when the configuration says nothing else about them."""
    specs = [
        ToolDef(
            name="calculator",
            description="Use when a question needs arithmetic: evaluates a numeric expression exactly "
            "(+ - * / // % **, sqrt, log, sin, min, max). 计算器：算术表达式求值。",
            examples=(
                "what is 17 * 3 / 4",
                "compute the square root of 2 times 10",
                "how much is 15% of 2400",
                "计算 1200 乘以 0.85",
            ),
            input_schema=calculator.SCHEMA,
            output_schema=calculator.OUTPUT_SCHEMA,
            permission=Permission("*", "builtin.compute", "read"),
            timeout_s=2.0,
            # Deterministic: an expression that timed out times out again.
            retry=NO_RETRY,
            idempotent=True,
            executor="builtin",
            builtin="calculator",
        ),
        ToolDef(
            name="http_request",
            description="Use when you must read a web resource or HTTP API on the allowlist: GET or HEAD a URL "
            "and get status, content type and body. 读取允许列表中的网址。",
            examples=("fetch the health endpoint of the payment service", "GET http://127.0.0.1:8080/status"),
            input_schema=http_request.SCHEMA,
            permission=Permission("*", "builtin.http", "read"),
            timeout_s=10.0,
            idempotent=True,
            executor="builtin",
            builtin="http_request",
        ),
        ToolDef(
            name="query_logs",
            description="Use when investigating an incident, errors or behaviour of a service: searches its logs "
            "by service, minimum level, time window and text. 查询服务日志：按服务、级别、时间、关键字过滤。",
            examples=(
                "show the errors of payment-svc in the last hour",
                "why are payments failing, check the logs",
                "find timeout warnings in the gateway log",
                "查看支付服务的错误日志",
            ),
            input_schema=query_logs.SCHEMA,
            result_type="text",
            permission=Permission("*", "ops.read", "read"),
            timeout_s=10.0,
            idempotent=True,
            executor="builtin",
            builtin="query_logs",
        ),
        ToolDef(
            name="read_payload",
            description="Use when a previous tool result was offloaded (it shows a ref_id and a digest) and you "
            "need more of it: read by JSONPath, line range or byte range. 读取已卸载结果的片段。",
            examples=(
                "read lines 100 to 150 of the stored log output",
                "show records 10 to 20 of the offloaded result",
                "look at the rest of the truncated output pl_",
            ),
            input_schema=read_payload.SCHEMA,
            permission=Permission("*", "builtin.payload", "read"),
            timeout_s=5.0,
            idempotent=True,
            executor="builtin",
            builtin="read_payload",
            offload=False,
        ),
        ToolDef(
            name="run_python",
            description="Use when a computation, parsing or data transformation is easier in code: runs a Python "
            "snippet in an isolated sandbox (no network, private /tmp, time and memory limits) and returns "
            "exit code, stdout and stderr. 在沙箱中运行 Python 代码。",
            examples=(
                "write a python script to parse this csv and sum the amounts",
                "run code to compute statistics of these numbers",
                "用 python 计算列表的平均值",
            ),
            input_schema=run_python.SCHEMA,
            output_schema=run_python.OUTPUT_SCHEMA,
            permission=Permission("*", "builtin.code", "read"),
            timeout_s=sandbox_timeout_s + 5.0,
            retry=NO_RETRY,
            executor="builtin",
            builtin="run_python",
        ),
    ]
    return {spec.name: spec for spec in specs}


@dataclass(frozen=True)
class BuiltinDeps:
    """What the built-in executors need."""

    transport: HttpTransport
    payloads: PayloadStore | None
    logs_dir: Path
    sandbox: Sandbox
    read_payload_max_bytes: int
    cpu: CpuPool
    """Where CPU-bound work runs (calculator, log parsing, selections over large payloads)."""


def executors(deps: BuiltinDeps) -> Mapping[str, Executor]:
    """Implementation name -> executor."""
    found: dict[str, Executor] = {
        "calculator": calculator.make(deps.cpu),
        "http_request": http_request.make(deps.transport),
        "query_logs": query_logs.make(deps.logs_dir, deps.cpu),
        "run_python": run_python.make(deps.sandbox),
        "read_payload": read_payload.make(deps.payloads, deps.read_payload_max_bytes, deps.cpu),
    }
    return found
