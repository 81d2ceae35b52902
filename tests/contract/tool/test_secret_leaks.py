"""Issue 21: nothing secret reaches a model. Upstream bodies carrying secrets (a 404 with an AWS key,
a 500 with a bearer token, a 200 text with a DSN password) come back through the real tool_svc with
every secret masked: in the ToolResult (error message, violations, metadata, output, digest), in what
tool_svc wrote to Redis for the call, and in the spans it exported."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from agentmesh.v1 import common_pb2
from tests.contract.tool.conftest import Client
from tests.contract.tool.fakes import LocalHttpServer
from tests.rediscluster import sync_client
from tool_svc.server import SPEC

AWS_ID = "AKIAZ7QW3ER5TY8UI2OP"
AWS_SECRET = "k8Jd2LmQ/9xZ+vB4nR7tY1wE5sA3fG6hJ0cV2bN4"
BEARER = "tok3nV4lue.Kq9Zr2Lm8Xw4Pt7Ys1Nd5Bf3Hj6Gc0Va"
DSN_PASSWORD = "Xv9!qR2wLp7Tz"
SECRETS = (AWS_ID, AWS_SECRET, BEARER, DSN_PASSWORD)

BODIES: dict[str, tuple[int, str, bytes]] = {
    "/aws404": (
        404,
        "application/json",
        json.dumps({"error": f"no such bucket; signed with {AWS_ID} {AWS_SECRET}"}).encode(),
    ),
    "/bearer500": (500, "text/plain", f"upstream crashed handling Authorization: Bearer {BEARER}\n".encode()),
    "/dsn200": (200, "text/plain", f"connected to postgres://app:{DSN_PASSWORD}@db.internal:5432/orders\n".encode()),
    # Above the 2 KiB offload threshold: the output is a PayloadRef with a digest.
    "/dsn200big": (
        200,
        "text/plain",
        ("row ok\n" * 600 + f"retrying postgres://app:{DSN_PASSWORD}@db.internal:5432/orders\n").encode(),
    ),
}


class SecretUpstream(LocalHttpServer):
    """A local HTTP upstream whose answers quote secrets."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                status, content_type, body = BODIES.get(self.path, (404, "text/plain", b"unknown"))
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_POST = do_HEAD = _answer

        super().__init__(Handler)


@pytest.fixture
def secret_upstream() -> Iterator[SecretUpstream]:
    upstream = SecretUpstream()
    with upstream.running():
        yield upstream


def _tool(name: str, upstream: SecretUpstream, path: str, result_type: str = "structured") -> dict[str, Any]:
    return {
        "name": name,
        "description": f"Use when testing {name}",
        "input_schema": {"type": "object", "additionalProperties": True},
        "executor": "http",
        "endpoint_url": upstream.url(path),
        "permission": {"group": "test", "access": "read"},
        "timeout_s": 2.0,
        "result_type": result_type,
        "idempotent": True,
        "retry": {"max_attempts": 2, "initial_backoff_s": 0.01, "max_backoff_s": 0.02, "max_jitter_s": 0.005},
    }


@pytest.fixture
async def svc(start_service: Callable[..., Awaitable[Any]], secret_upstream: SecretUpstream) -> Any:
    return await start_service(
        SPEC,
        {
            "tools": {
                "http_allowlist": [f"http://127.0.0.1:{secret_upstream.port}/"],
                "rate_limit": {"capacity": 10_000, "refill_per_second": 10_000},
                "registry": [
                    _tool("aws_404", secret_upstream, "/aws404"),
                    _tool("bearer_500", secret_upstream, "/bearer500"),
                    _tool("dsn_text", secret_upstream, "/dsn200", result_type="text"),
                    _tool("dsn_text_big", secret_upstream, "/dsn200big", result_type="text"),
                    _tool("dsn_structured", secret_upstream, "/dsn200"),
                ],
            }
        },
    )


def _redis_dump(url: str) -> str:
    """Every key and value in Redis, as text."""
    client = sync_client(url, socket_timeout=5)
    parts: list[str] = []
    try:
        for key in client.scan_iter(count=1000):
            raw_kind = client.type(key)
            kind = raw_kind.decode() if isinstance(raw_kind, bytes) else str(raw_kind)
            value: Any
            if kind == "string":
                value = client.get(key)
            elif kind == "hash":
                value = client.hgetall(key)
            elif kind == "list":
                value = client.lrange(key, 0, -1)
            elif kind == "set":
                value = client.smembers(key)
            elif kind == "zset":
                value = client.zrange(key, 0, -1, withscores=True)
            elif kind == "stream":
                value = client.xrange(key)
            else:
                value = kind
            parts.append(f"{key!r} {value!r}")
    finally:
        client.close()
    return "\n".join(parts)


def _assert_clean(where: str, text: str | bytes) -> None:
    blob = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    for secret in SECRETS:
        assert secret not in blob, f"{secret!r} leaked into {where}"


def _check_result(result: common_pb2.ToolResult) -> None:
    _assert_clean("the ToolResult", str(result))
    _assert_clean("the ToolResult bytes", result.SerializeToString())


CASES: list[tuple[str, dict[str, Any], str, str]] = [
    # (tool, arguments, expected outcome, expected error code)
    ("aws_404", {}, "error", "UPSTREAM_NOT_FOUND"),
    ("bearer_500", {}, "error", "UPSTREAM_UNAVAILABLE"),
    ("dsn_text", {}, "output", ""),
    ("dsn_text_big", {}, "output", ""),
    ("dsn_structured", {}, "error", "OUTPUT_INVALID"),
]


@pytest.mark.parametrize(("tool", "arguments", "outcome", "code"), CASES, ids=[c[0] for c in CASES])
async def test_no_secret_leaves_tool_svc(
    svc: Any, tool: str, arguments: dict[str, Any], outcome: str, code: str
) -> None:
    c = Client(svc)
    result = await c.execute(tool, arguments, key=f"idem-{tool}", call_id=f"call-{tool}")
    assert result.WhichOneof("outcome") == outcome, result
    if outcome == "error":
        assert common_pb2.ErrorCode.Name(result.error.code).removeprefix("ERROR_CODE_") == code
        assert "[REDACTED]" in result.error.message, result.error.message
    else:
        assert "postgres://app:[REDACTED]@db.internal" in (
            result.output.inline or (await _payload_text(svc, result))
        ), result
    _check_result(result)

    # A replay (idempotency key) answers from what was stored: also clean.
    again = await c.execute(tool, arguments, key=f"idem-{tool}", call_id=f"call-{tool}")
    _check_result(again)

    _assert_clean("Redis", _redis_dump(svc.settings.redis.url))

    _assert_clean("the span file", _spans(svc))


async def test_http_request_quotes_no_secret(
    start_service: Callable[..., Awaitable[Any]], secret_upstream: SecretUpstream
) -> None:
    svc = await start_service(SPEC, {"tools": {"http_allowlist": [f"http://127.0.0.1:{secret_upstream.port}/"]}})
    c = Client(svc)
    for path in ("/aws404", "/bearer500", "/dsn200"):
        result = await c.execute("http_request", {"url": secret_upstream.url(path)}, call_id=f"call{path[1:]}")
        _check_result(result)
    _assert_clean("Redis", _redis_dump(svc.settings.redis.url))
    _assert_clean("the span file", _spans(svc))


def _spans(svc: Any) -> str:
    """Every span the service exported so far (flushed first)."""
    svc.host.telemetry.force_flush()
    text = Path(svc.settings.telemetry.span_file).read_text(encoding="utf-8")
    assert "execute_tool" in text
    return text


async def _payload_text(svc: Any, result: common_pb2.ToolResult) -> str:
    """The offloaded output's digest and stored bytes (read straight from Redis)."""
    ref = result.output.ref
    return str(ref) + _redis_dump(svc.settings.redis.url)


GITHUB_PAT = "ghp_R8kq2Zt7Lw0XbN4vYc9Pj6Hs1Fm3Ud5Ea8Gi"


async def test_an_executor_exception_quoting_a_secret_leaves_none(
    svc: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 40: an executor (a client library) raises with the upstream's text in its message; the
    ToolResult, the log (tool_svc logs the traceback) and the spans hold no 12-character run of the
    secrets it quotes."""
    from tool_svc.retry import Execute

    servicer = svc.host.methods.handlers["/agentmesh.v1.ToolService/ExecuteTool"].unary_unary.__self__
    execute = next(step for step in servicer.gateway.pipeline if isinstance(step, Execute))

    async def broken(invocation: Any) -> Any:
        raise RuntimeError(f"client library: upstream said token {GITHUB_PAT}; aws_secret_access_key={AWS_SECRET}")

    monkeypatch.setattr(execute, "http", broken)
    caplog.set_level("DEBUG")
    result = await Client(svc).execute("aws_404", {}, call_id="call-broken")
    assert result.WhichOneof("outcome") == "error"
    assert common_pb2.ErrorCode.Name(result.error.code) == "ERROR_CODE_INTERNAL"
    logged = [r.getMessage() for r in caplog.records if "executor of aws_404 failed" in r.getMessage()]
    assert logged and "[REDACTED]" in logged[0] and "RuntimeError" in logged[0]
    texts = {
        "the ToolResult": str(result),
        "the logs": caplog.text + "\n".join(repr(r.__dict__) for r in caplog.records),
        "the span file": _spans(svc),
        "Redis": _redis_dump(svc.settings.redis.url),
    }
    for where, text in texts.items():
        for secret in (GITHUB_PAT, AWS_SECRET):
            runs = [secret[i : i + 12] for i in range(len(secret) - 11)]
            assert not [run for run in runs if run in text], f"{secret!r} leaked into {where}"
