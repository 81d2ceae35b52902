"""Fixtures for tool_svc contract tests: a fake HTTP upstream, sample logs, the real service in-process."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentmesh.config import deep_merge
from agentmesh.v1 import common_pb2, tool_pb2, tool_pb2_grpc
from tests.contract.tool.fakes import FAST_RETRY, FakeUpstream, http_tool
from tests.contract.tool.mcp_support import http_upstream, mcp_tool_service
from tool_svc.server import SPEC

ALL = ("*:*:*",)

__all__ = ["http_upstream", "mcp_tool_service"]  # the MCP tests' fixtures (mcp_support.py)

LOG_LINES = [
    '{"ts": "2025-06-01T10:00:00Z", "level": "INFO", "service": "payment-svc", "msg": "started"}',
    "2025-06-01T10:01:00Z INFO payment-svc charge ok order=ORD-2025-0001",
    "2025-06-01T10:02:00Z WARN payment-svc slow response from bank-gw 2300ms",
    "2025-06-01T10:03:00Z ERROR payment-svc TRUNCATE of ledger refused: connection pool exhausted",
    "2025-06-01T10:04:00Z ERROR payment-svc charge failed order=ORD-2025-0002 timeout",
]


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    server = FakeUpstream().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def logs_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "logs"
    directory.mkdir()
    (directory / "payment-svc.log").write_text("\n".join(LOG_LINES) + "\n", encoding="utf-8")
    (directory / "gateway.log").write_text("2025-06-01T10:00:00Z INFO gateway up\n", encoding="utf-8")
    return directory


def base_overrides(upstream: FakeUpstream, logs_dir: Path) -> dict[str, Any]:
    return {
        "tools": {
            "http_allowlist": [f"http://127.0.0.1:{upstream.port}/"],
            "logs_dir": str(logs_dir),
            "retry": FAST_RETRY,
            "rate_limit": {"capacity": 10_000, "refill_per_second": 10_000},
            "registry": [
                http_tool("get_ok", upstream, "/ok", idempotent=True),
                http_tool("get_big", upstream, "/big"),
                http_tool("get_text", upstream, "/text", result_type="text"),
                http_tool("get_metrics", upstream, "/404", fallback_tool="query_logs"),
                http_tool("get_500", upstream, "/500", fallback_tool="query_logs", retry=FAST_RETRY),
                http_tool("get_400", upstream, "/400"),
                http_tool("get_429", upstream, "/429"),
                http_tool("get_302", upstream, "/302"),
                http_tool("get_slow", upstream, "/slow", timeout_s=0.3, fallback_tool="query_logs", retry=FAST_RETRY),
                http_tool("get_garbage", upstream, "/garbage"),
                http_tool("get_garbage_text", upstream, "/garbage", result_type="text"),
                http_tool("get_latin1", upstream, "/latin1"),
                http_tool("get_latin1_text", upstream, "/latin1", result_type="text"),
                http_tool("get_empty", upstream, "/empty"),
                http_tool("get_secret", upstream, "/secret"),
                http_tool("get_nan", upstream, "/nan"),
                http_tool(
                    "get_shaped",
                    upstream,
                    "/wrong-shape",
                    output_schema={
                        "type": "object",
                        "required": ["status"],
                        "properties": {"status": {"type": "string"}},
                    },
                ),
                http_tool("flaky_read", upstream, "/flaky", retry=FAST_RETRY),
                http_tool(
                    "flaky_write",
                    upstream,
                    "/flaky",
                    permission={"group": "test", "access": "write"},
                    requires_approval=False,
                    retry=FAST_RETRY,
                ),
                http_tool(
                    "charge",
                    upstream,
                    "/count",
                    description="Use when charging an order",
                    permission={"group": "payments", "access": "write"},
                    requires_approval=False,
                    input_schema={
                        "type": "object",
                        "properties": {
                            "order_id": {
                                "type": "string",
                                "pattern": "^ORD-\\d{4}-\\d{4}$",
                                "description": "The order to charge",
                                "examples": ["ORD-2025-0001"],
                            },
                            "amount": {"type": "integer", "minimum": 1},
                        },
                        "required": ["order_id", "amount"],
                        "additionalProperties": False,
                    },
                ),
                http_tool(
                    "restart_service",
                    upstream,
                    "/count",
                    description="Use when a service must be restarted",
                    permission={"group": "ops.write", "access": "write"},
                    impact="Restarts every pod of the service: about 30 s of failed requests",
                    input_schema={
                        "type": "object",
                        "properties": {"service": {"type": "string", "pattern": "^[a-z0-9-]+$"}},
                        "required": ["service"],
                        "additionalProperties": False,
                    },
                ),
                http_tool(
                    "run_shell",
                    upstream,
                    "/ok",
                    description="Use when a shell command must run on a host",
                    permission={"group": "ops.shell", "access": "read"},
                    input_schema={
                        "type": "object",
                        "properties": {"command": {"type": "string", "x-agentmesh-kind": "shell"}},
                        "required": ["command"],
                    },
                ),
                http_tool(
                    "run_sql",
                    upstream,
                    "/ok",
                    description="Use when a SQL query must run",
                    input_schema={
                        "type": "object",
                        "properties": {"sql": {"type": "string", "x-agentmesh-kind": "sql"}},
                        "required": ["sql"],
                    },
                ),
            ],
        }
    }


@pytest.fixture
def tool_service(
    start_service: Callable[..., Awaitable[Any]], upstream: FakeUpstream, logs_dir: Path
) -> Callable[..., Awaitable[Any]]:
    """`await tool_service(extra_overrides)`: tool_svc with the fake upstream's tools."""

    async def start(extra: dict[str, Any] | None = None) -> Any:
        overrides = base_overrides(upstream, logs_dir)
        if extra:
            merged_tools = deep_merge(overrides["tools"], extra.get("tools", {}))
            if "registry" in extra.get("tools", {}):
                merged_tools["registry"] = overrides["tools"]["registry"] + extra["tools"]["registry"]
            overrides = deep_merge(overrides, {k: v for k, v in extra.items() if k != "tools"})
            overrides["tools"] = merged_tools
        return await start_service(SPEC, overrides)

    return start


class Client:
    """Thin helpers over the ToolService stub."""

    def __init__(self, svc: Any) -> None:
        self.svc = svc
        self.stub = tool_pb2_grpc.ToolServiceStub(svc.channel)  # type: ignore[no-untyped-call]

    def meta(self, *, roles: tuple[str, ...] = ("agent",), **claims: Any) -> Any:
        claims.setdefault("agent_id", "agent-a")
        claims.setdefault("subject", claims["agent_id"])
        claims.setdefault("instance", f"{claims['agent_id']}-1")
        claims.setdefault("permissions", list(ALL))
        return self.svc.metadata(roles, **claims)

    async def execute(
        self,
        name: str,
        arguments: Any = None,
        *,
        raw: str | None = None,
        session: str = "sess-1",
        key: str = "",
        goal: str = "",
        call_id: str = "call-1",
        metadata: Any = None,
        timeout: float = 15,  # noqa: ASYNC109 - the gRPC deadline
        **claims: Any,
    ) -> common_pb2.ToolResult:
        text = raw if raw is not None else json.dumps(arguments if arguments is not None else {})
        reply = await self.stub.ExecuteTool(
            tool_pb2.ExecuteToolRequest(
                call=common_pb2.ToolCall(id=call_id, name=name, arguments_json=text),
                session_id=session,
                idempotency_key=key,
                goal=goal,
            ),
            metadata=metadata if metadata is not None else self.meta(**claims),
            timeout=timeout,
        )
        result: common_pb2.ToolResult = reply.result
        return result


@pytest.fixture
def client_for() -> Callable[[Any], Client]:
    return Client


def error_name(result: common_pb2.ToolResult) -> str:
    assert result.WhichOneof("outcome") == "error", result
    return common_pb2.ErrorCode.Name(result.error.code).removeprefix("ERROR_CODE_")


def class_name(result: common_pb2.ToolResult) -> str:
    return common_pb2.ErrorClass.Name(result.error.error_class).removeprefix("ERROR_CLASS_")


def output_json(result: common_pb2.ToolResult) -> Any:
    assert result.WhichOneof("outcome") == "output", result
    return json.loads(result.output.inline)
