"""Issue 40: no secret leaves through the telemetry. An exception that quotes a secret (a GitHub token, an
AWS secret key: what an upstream's answer or a tool's output may hold) raised in a servicer, in an
outgoing HTTP request, under a span, or logged: the spans exported (an unguarded in-memory exporter and
the guarded span file), the log records (caplog and the JSON formatter) and the error the caller gets
hold no 12-character run of it; the spans and logs say `[REDACTED]` where it was
(agentmesh/redacted.py)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentmesh.config import Settings
from agentmesh.httptrace import HttpClientSpan
from agentmesh.redacted import exception_description, record_exception, set_error_status, traceback_text
from agentmesh.rpc.channels import create_channel
from agentmesh.rpc.interceptors import ChainedCallInterceptor, EdgeInterceptor
from agentmesh.rpc.telemetry import server_interceptors
from agentmesh.telemetry import JsonFormatter, Telemetry, setup_telemetry, span_to_dict

SERVICE = "test.Leaks"
GITHUB_PAT = "ghp_R8kq2Zt7Lw0XbN4vYc9Pj6Hs1Fm3Ud5Ea8Gi"
AWS_SECRET = "k8Jd2LmQ/9xZ+vB4nR7tY1wE5sA3fG6hJ0cV2bN4"
SECRETS = (GITHUB_PAT, AWS_SECRET)
UPSTREAM_TEXT = f"upstream answered 500: token {GITHUB_PAT} rejected; aws_secret_access_key={AWS_SECRET}"


def assert_clean(where: str, text: str) -> None:
    """No 12-character run of any secret survives in `text`."""
    for secret in SECRETS:
        runs = {secret[i : i + 12] for i in range(len(secret) - 11)}
        leaked = sorted(run for run in runs if run in text)
        assert not leaked, f"{where} holds {leaked[:3]} of {secret!r}:\n{text[:2000]}"


class UpstreamFailed(RuntimeError):
    """What a client library raises with the upstream's body in its message."""


async def crash(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    try:
        raise ConnectionError(f"while reading {GITHUB_PAT}")
    except ConnectionError as cause:
        raise UpstreamFailed(UPSTREAM_TEXT) from cause


def _spans_text(exporter: InMemorySpanExporter) -> str:
    return "\n".join(json.dumps(span_to_dict(s)) for s in exporter.get_finished_spans())


@pytest.fixture
async def edge(tmp_path: Path) -> AsyncIterator[tuple[grpc.aio.Channel, Telemetry, InMemorySpanExporter]]:
    """A server with the real edge interceptors; its spans go to the span file (behind the guard) and
    to an in-memory exporter added without the guard (what the edge itself wrote)."""
    settings = Settings(auth={"mode": "disabled"}, telemetry={"span_file": str(tmp_path / "spans.jsonl")})
    telemetry = setup_telemetry("svc-leaks", settings, configure_logs=False)
    raw = InMemorySpanExporter()
    telemetry.tracer_provider.add_span_processor(SimpleSpanProcessor(raw))
    server = grpc.aio.server(interceptors=[EdgeInterceptor(ChainedCallInterceptor(server_interceptors(telemetry)))])
    handlers = {"Crash": grpc.unary_unary_rpc_method_handler(crash)}
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, handlers)])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = create_channel(f"127.0.0.1:{port}", settings, telemetry=telemetry)
    yield channel, telemetry, raw
    await channel.close(None)
    await server.stop(0)
    telemetry.shutdown()


async def test_an_exception_in_a_servicer_leaves_no_secret(
    edge: tuple[grpc.aio.Channel, Telemetry, InMemorySpanExporter], caplog: pytest.LogCaptureFixture
) -> None:
    channel, telemetry, raw = edge
    caplog.set_level(logging.DEBUG)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await channel.unary_unary(f"/{SERVICE}/Crash")(b"x")  # type: ignore[call-arg]
    assert caught.value.code() == grpc.StatusCode.INTERNAL
    assert_clean("the error returned", f"{caught.value.details()} {caught.value.trailing_metadata()!r}")

    telemetry.force_flush()
    edge_spans = _spans_text(raw)
    server = [s for s in raw.get_finished_spans() if s.name == f"{SERVICE}/Crash" and s.kind.name == "SERVER"]
    assert len(server) == 1
    # Recorded, masked: the exception's type and where it happened stay for the operator.
    events = [e for e in server[0].events if e.name == "exception"]
    assert events and events[0].attributes is not None
    assert "UpstreamFailed" in str(events[0].attributes["exception.type"])
    assert "[REDACTED]" in str(events[0].attributes["exception.message"])
    assert "in crash" in str(events[0].attributes["exception.stacktrace"])
    assert "[REDACTED]" in str(server[0].status.description)
    assert_clean("the spans the edge wrote", edge_spans)
    span_file = await asyncio.to_thread(Path(str(telemetry.span_file)).read_text, encoding="utf-8")
    assert_clean("the span file", span_file)

    logged = [r for r in caplog.records if "unexpected failure" in r.getMessage()]
    assert logged and "[REDACTED]" in logged[0].getMessage() and "UpstreamFailed" in logged[0].getMessage()
    assert_clean("the log", caplog.text + "\n".join(repr(r.__dict__) for r in caplog.records))


async def test_the_guard_masks_what_a_span_recorded_raw(tmp_path: Path) -> None:
    """An exception escaping `start_as_current_span` (the SDK records it, and sets the status, itself)
    and a status a site wrote unmasked: the exported span holds neither secret."""
    settings = Settings(auth={"mode": "disabled"}, telemetry={"span_file": str(tmp_path / "spans.jsonl")})
    telemetry = setup_telemetry("svc-guard", settings, configure_logs=False)
    tracer = telemetry.tracer()
    with pytest.raises(UpstreamFailed), tracer.start_as_current_span("escaped"):
        raise UpstreamFailed(UPSTREAM_TEXT)
    with tracer.start_as_current_span("described") as span:
        span.add_event("note", {"text": UPSTREAM_TEXT, "count": 3})
    with tracer.start_as_current_span("clean") as span:
        span.add_event("note", {"text": "nothing to hide", "id": "a1b2c3d4e5f6a7b8c9d0e1f2"})
    telemetry.shutdown()
    records = {r["name"]: r for r in map(json.loads, (tmp_path / "spans.jsonl").read_text().splitlines())}
    assert_clean("the span file", json.dumps(records))
    escaped = records["escaped"]
    assert escaped["status"]["code"] == "ERROR" and "[REDACTED]" in escaped["status"]["description"]
    assert "[REDACTED]" in escaped["events"][0]["attributes"]["exception.message"]
    assert records["described"]["events"][0]["attributes"]["count"] == 3
    # A span with nothing secret in it goes out as it was (ids included).
    assert records["clean"]["events"][0]["attributes"] == {"text": "nothing to hide", "id": "a1b2c3d4e5f6a7b8c9d0e1f2"}


def _raw_tracer() -> tuple[Any, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test"), exporter


def test_the_helpers_write_masked_text_to_a_span() -> None:
    tracer, exporter = _raw_tracer()
    error = UpstreamFailed(UPSTREAM_TEXT)
    with tracer.start_as_current_span("s", record_exception=False, set_status_on_exception=False) as span:
        record_exception(span, error)
        set_error_status(span, exception_description(error))
    assert_clean("the span", _spans_text(exporter))
    assert exception_description(error).startswith("UpstreamFailed: upstream answered 500: token [REDACTED]")
    assert_clean("the traceback", traceback_text(error))


def test_an_outgoing_http_failure_leaves_no_secret_on_its_span() -> None:
    """httpx quotes the URL it failed on; a URL may carry credentials and a token in its query."""
    tracer, exporter = _raw_tracer()
    span = HttpClientSpan(tracer, "GET", "https://api.example.com/v1/repos")
    span.failed(
        httpx.ConnectError(
            f"https://x-access-token:{GITHUB_PAT}@github.com/org/repo.git refused; aws_secret_access_key={AWS_SECRET}"
        )
    )
    text = _spans_text(exporter)
    assert '"ERROR"' in text and "[REDACTED]" in text
    assert_clean("the HTTP client span", text)


def test_the_json_log_line_holds_no_secret() -> None:
    """Every log line through the JSON formatter (message, traceback, extra fields) is masked."""
    formatter = JsonFormatter("svc")
    try:
        raise UpstreamFailed(UPSTREAM_TEXT)
    except UpstreamFailed as exc:
        record = logging.LogRecord(
            "x", logging.ERROR, __file__, 1, "tool said %s", (UPSTREAM_TEXT,), (type(exc), exc, None)
        )
    record.upstream_body = UPSTREAM_TEXT
    line = json.loads(formatter.format(record))
    assert (
        "[REDACTED]" in line["message"] and "[REDACTED]" in line["exc_info"] and "[REDACTED]" in line["upstream_body"]
    )
    assert_clean("the JSON log line", json.dumps(line))
