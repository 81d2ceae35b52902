"""The SERVER span every agentmesh server makes (ServerSpanInterceptor): parented on the caller's
traceparent, semantic-convention attributes, and a status that says whether the server failed; and
the CLIENT span our channels make (agentmesh.rpc.channels) as its parent."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from agentmesh.config import Settings
from agentmesh.rpc.channels import create_channel
from agentmesh.rpc.interceptors import ChainedCallInterceptor, EdgeInterceptor
from agentmesh.rpc.telemetry import server_interceptors
from agentmesh.semconv import ATTR_REQUEST_ID
from agentmesh.telemetry import Telemetry, setup_telemetry

SERVICE = "test.Spans"
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"


async def ok(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    return request


async def invalid(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "field x: must be set")
    raise AssertionError("unreachable")


async def unavailable(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    await context.abort(grpc.StatusCode.UNAVAILABLE, "redis is down")
    raise AssertionError("unreachable")


async def crash(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    raise LookupError("a bug in the servicer")


async def stream(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> AsyncIterator[bytes]:
    for i in range(3):
        yield bytes([i])


class SpanFile:
    """The span file, read after a flush (spans are exported in batches on the loop)."""

    def __init__(self, path: Path, telemetry: Telemetry) -> None:
        self.path, self.telemetry = path, telemetry

    def read_text(self) -> str:
        self.telemetry.force_flush()
        return self.path.read_text()


@pytest.fixture
async def spans(tmp_path: Path) -> AsyncIterator[tuple[grpc.aio.Channel, SpanFile]]:
    """A plain channel to the server (spans in spans.jsonl); an agentmesh channel is `.traced`."""
    settings = Settings(auth={"mode": "disabled"}, telemetry={"span_file": str(tmp_path / "spans.jsonl")})
    telemetry = setup_telemetry("svc-spans", settings, configure_logs=False)
    server = grpc.aio.server(interceptors=[EdgeInterceptor(ChainedCallInterceptor(server_interceptors(telemetry)))])
    unary = {name: grpc.unary_unary_rpc_method_handler(fn) for name, fn in
             [("Ok", ok), ("Invalid", invalid), ("Unavailable", unavailable), ("Crash", crash)]}  # fmt: skip
    handlers: dict[str, Any] = {**unary, "Stream": grpc.unary_stream_rpc_method_handler(stream)}
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, handlers)])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    traced = create_channel(f"127.0.0.1:{port}", settings, telemetry=telemetry)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        channel.traced = traced  # type: ignore[attr-defined]
        yield channel, SpanFile(tmp_path / "spans.jsonl", telemetry)
    await traced.close(None)
    await server.stop(0)
    telemetry.shutdown()


async def only_span(path: SpanFile, method: str, kind: str = "SERVER") -> dict[str, Any]:
    """The one span of `method` and `kind`. The server's span ends after its status is on the wire (the
    edge ends it when the handler is done), so a caller that has its answer may look before it is
    exported: wait for it on the loop (up to 10 s) rather than read once."""
    deadline = time.monotonic() + 10
    while True:
        path.telemetry.force_flush()
        text = path.path.read_text() if path.path.exists() else ""
        records: list[dict[str, Any]] = [json.loads(line) for line in text.splitlines()]
        matching = [r for r in records if r["name"] == f"{SERVICE}/{method}" and r["kind"] == kind]
        if matching or time.monotonic() >= deadline:
            assert len(matching) == 1, records
            return matching[0]
        await asyncio.sleep(0.05)


async def test_the_server_span_continues_the_callers_trace_with_rpc_attributes(
    spans: tuple[grpc.aio.Channel, SpanFile],
) -> None:
    channel, path = spans
    metadata = (
        ("traceparent", f"00-{TRACE_ID}-{PARENT_ID}-01"),
        ("baggage", f"{ATTR_REQUEST_ID}=req-123"),
    )
    assert await channel.unary_unary(f"/{SERVICE}/Ok")(b"hi", metadata=metadata) == b"hi"  # type: ignore[call-arg]
    span = await only_span(path, "Ok")
    assert (span["trace_id"], span["parent_span_id"], span["kind"]) == (TRACE_ID, PARENT_ID, "SERVER")
    attrs = span["attributes"]
    assert attrs["rpc.system"] == "grpc"
    assert (attrs["rpc.service"], attrs["rpc.method"]) == (SERVICE, "Ok")
    assert attrs["rpc.grpc.status_code"] == 0
    assert attrs["network.peer.address"] == "127.0.0.1" and isinstance(attrs["network.peer.port"], int)
    assert attrs[ATTR_REQUEST_ID] == "req-123"
    assert span["status"]["code"] == "UNSET"


async def test_a_call_without_traceparent_starts_a_new_trace(spans: tuple[grpc.aio.Channel, SpanFile]) -> None:
    channel, path = spans
    await channel.unary_unary(f"/{SERVICE}/Ok")(b"hi")  # type: ignore[call-arg]
    span = await only_span(path, "Ok")
    assert span["parent_span_id"] is None and span["trace_id"] != TRACE_ID


@pytest.mark.parametrize(
    ("method", "code", "status"),
    [
        # The caller's mistake: the server did not fail, so its span is not an error.
        ("Invalid", grpc.StatusCode.INVALID_ARGUMENT, "UNSET"),
        ("Unavailable", grpc.StatusCode.UNAVAILABLE, "ERROR"),
        # The edge answers an unexpected exception INTERNAL (generic text); the span keeps the exception.
        ("Crash", grpc.StatusCode.INTERNAL, "ERROR"),
    ],
)
async def test_the_span_records_how_the_call_ended(
    spans: tuple[grpc.aio.Channel, SpanFile], method: str, code: grpc.StatusCode, status: str
) -> None:
    channel, path = spans
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await channel.unary_unary(f"/{SERVICE}/{method}")(b"x")  # type: ignore[call-arg]
    assert caught.value.code() == code
    span = await only_span(path, method)
    assert span["attributes"]["rpc.grpc.status_code"] == code.value[0]
    assert span["status"]["code"] == status
    exceptions = [e for e in span["events"] if e["name"] == "exception"]
    if method == "Crash":
        assert exceptions and exceptions[0]["attributes"]["exception.type"] == "LookupError"
        assert "LookupError" in span["status"]["description"]
    else:
        # An abort is the servicer's answer, not an exception worth a stack trace.
        assert not exceptions
    if method == "Unavailable":
        assert "redis is down" in span["status"]["description"]


async def test_a_streaming_call_has_one_span_covering_the_stream(spans: tuple[grpc.aio.Channel, SpanFile]) -> None:
    channel, path = spans
    replies = [r async for r in channel.unary_stream(f"/{SERVICE}/Stream")(b"x")]  # type: ignore[call-arg]
    assert replies == [b"\x00", b"\x01", b"\x02"]
    span = await only_span(path, "Stream")
    assert span["attributes"]["rpc.grpc.status_code"] == 0 and span["kind"] == "SERVER"


@pytest.mark.parametrize(
    ("method", "code"), [("Ok", grpc.StatusCode.OK), ("Invalid", grpc.StatusCode.INVALID_ARGUMENT)]
)
async def test_our_channels_make_the_client_span_that_parents_the_server_span(
    spans: tuple[grpc.aio.Channel, SpanFile], method: str, code: grpc.StatusCode
) -> None:
    channel, path = spans
    call = channel.traced.unary_unary(f"/{SERVICE}/{method}")(b"x")  # type: ignore[attr-defined]
    if code == grpc.StatusCode.OK:
        await call
    else:
        with pytest.raises(grpc.aio.AioRpcError):
            await call
    client, server = await only_span(path, method, "CLIENT"), await only_span(path, method)
    assert server["trace_id"] == client["trace_id"] and server["parent_span_id"] == client["span_id"]
    assert client["attributes"]["rpc.grpc.status_code"] == code.value[0]
    assert (client["attributes"]["rpc.service"], client["attributes"]["rpc.method"]) == (SERVICE, method)
    # The caller sees any non-OK answer as its call failing.
    assert client["status"]["code"] == ("UNSET" if code == grpc.StatusCode.OK else "ERROR")
    # The request id minted at this edge call travels as baggage onto both spans.
    assert client["attributes"][ATTR_REQUEST_ID] == server["attributes"][ATTR_REQUEST_ID]


async def test_a_streaming_client_span_ends_with_the_stream(spans: tuple[grpc.aio.Channel, SpanFile]) -> None:
    channel, path = spans
    replies = [r async for r in channel.traced.unary_stream(f"/{SERVICE}/Stream")(b"x")]  # type: ignore[attr-defined]
    assert len(replies) == 3
    for _ in range(100):  # the span ends in a done-callback task, right after the stream
        if '"CLIENT"' in path.read_text():
            break
        await asyncio.sleep(0.01)
    client = await only_span(path, "Stream", "CLIENT")
    assert client["attributes"]["rpc.grpc.status_code"] == 0
    assert (await only_span(path, "Stream"))["parent_span_id"] == client["span_id"]
