"""Acceptance tests of docs/design.md §8: one request id and one trace across services, deadlines
propagated, retries only where idempotent, and OTLP export (the path Jaeger uses).

Three real grpc.aio servers A -> B -> C run in this process on ephemeral ports, each with its own
Telemetry (same JSONL span file), `server_interceptors` and a generic bytes-in/bytes-out handler;
A calls B and B calls C through `create_channel`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from agentmesh import callctx
from agentmesh.config import Settings
from agentmesh.rpc.channels import (
    IDEMPOTENT_METHODS,
    ServiceClients,
    create_channel,
    service_config,
    wire_rounding,
)
from agentmesh.rpc.interceptors import ChainedCallInterceptor, EdgeInterceptor
from agentmesh.rpc.telemetry import OTLP, server_interceptors
from agentmesh.semconv import ATTR_REQUEST_ID
from agentmesh.telemetry import Telemetry, setup_telemetry
from agentmesh.v1 import tool_pb2

# gRPC sends a deadline as a relative `grpc-timeout` rounded UP to its unit (10 ms between 1 and 10 s),
# so the first hop (called by a plain channel) may see up to one unit more than the timeout set; our
# client interceptor shaves that unit off when it propagates a deadline (agentmesh.rpc.channels.wire_rounding).
WIRE_ROUNDING_S = 0.01

SERVICE = "test.Chain"
METHOD = f"/{SERVICE}/Call"
log = logging.getLogger("tests.chain")


def raw(channel: grpc.aio.Channel, kind: str, method: str) -> Any:
    """A bytes-in/bytes-out multicallable (no serializers) of the given kind."""
    factory = {
        "UU": channel.unary_unary,
        "US": channel.unary_stream,
        "SU": channel.stream_unary,
        "SS": channel.stream_stream,
    }[kind]
    return factory(method, request_serializer=None, response_deserializer=None)


def make_settings(tmp_path: Path, **client: Any) -> Settings:
    return Settings(
        auth={"mode": "disabled"},
        telemetry={"span_file": str(tmp_path / "spans.jsonl"), "log_file": str(tmp_path / "logs.jsonl")},
        client={"retry_initial_backoff_s": 0.01, "retry_max_backoff_s": 0.05, **client},
    )


@pytest.fixture(autouse=True)
def _isolate(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No OTLP unless a test asks; the root logger is restored after setup_telemetry changed it."""
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)


@dataclass
class Node:
    name: str
    telemetry: Telemetry
    server: grpc.aio.Server
    target: str
    downstream: grpc.aio.Channel | None
    calls: int = 0
    errors: list[grpc.StatusCode] = field(default_factory=list)


async def start_node(name: str, settings: Settings, downstream: str | None) -> Node:
    telemetry = setup_telemetry(name, settings, otlp=OTLP)
    channel = create_channel(downstream, settings, telemetry=telemetry) if downstream else None
    server = grpc.aio.server(interceptors=[EdgeInterceptor(ChainedCallInterceptor(server_interceptors(telemetry)))])
    node = Node(name, telemetry, server, "", channel)

    async def call(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        node.calls += 1
        if request == b"block" and node.name == "svc-a":
            # Outlive the caller's deadline without yielding, so the downstream call is made late.
            time.sleep(0.4)  # noqa: ASYNC251
        span_ctx = trace.get_current_span().get_span_context()
        hop = {
            "service": node.name,
            "request_id": callctx.request_id_var.get(),
            "trace_id": format(span_ctx.trace_id, "032x"),
            "time_remaining": context.time_remaining(),
            "deadline_remaining": callctx.remaining_time(),
        }
        log.info("handled by %s", node.name, extra={"hop": node.name})
        hops = [hop]
        if node.downstream is not None:
            try:
                reply = await raw(node.downstream, "UU", METHOD)(request)
            except grpc.aio.AioRpcError as exc:
                node.errors.append(exc.code())
                await context.abort(exc.code(), exc.details() or "")
            hops += json.loads(reply)
        return json.dumps(hops).encode()

    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler(SERVICE, {"Call": grpc.unary_unary_rpc_method_handler(call)})]
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    node.target = f"127.0.0.1:{port}"
    return node


@pytest.fixture
async def chain(tmp_path: Path) -> AsyncIterator[list[Node]]:
    settings = make_settings(tmp_path)
    c = await start_node("svc-c", settings, None)
    b = await start_node("svc-b", settings, c.target)
    a = await start_node("svc-a", settings, b.target)
    nodes = [a, b, c]
    yield nodes
    for node in nodes:
        await node.server.stop(None)
        if node.downstream is not None:
            await node.downstream.close(None)
        node.telemetry.shutdown()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


async def wait_for_spans(path: Path, count: int) -> list[dict[str, Any]]:
    """The spans of the file once `count` are there (client spans end in a done callback)."""
    deadline = time.monotonic() + 5
    spans = read_jsonl(path)
    while len(spans) < count and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
        spans = read_jsonl(path)
    return spans


async def call_a(a: Node, payload: bytes = b"go", **kwargs: Any) -> list[dict[str, Any]]:
    # A plain channel: the test is an outside caller, so A is the edge.
    async with grpc.aio.insecure_channel(a.target) as channel:
        reply = await raw(channel, "UU", METHOD)(payload, **kwargs)
    hops: list[dict[str, Any]] = json.loads(reply)
    return hops


async def test_one_trace_and_one_request_id_across_three_services(chain: list[Node], tmp_path: Path) -> None:
    a = chain[0]
    hops = await call_a(a, timeout=5, metadata=((callctx.REQUEST_ID_HEADER, "req-from-test-1"),))

    # The incoming id is kept end to end.
    assert [h["service"] for h in hops] == ["svc-a", "svc-b", "svc-c"]
    assert {h["request_id"] for h in hops} == {"req-from-test-1"}

    # 3 server spans + 2 client spans, one trace, all tagged with the request id.
    spans = await wait_for_spans(tmp_path / "spans.jsonl", 5)
    assert len(spans) == 5
    assert {s["trace_id"] for s in spans} == {hops[0]["trace_id"]}
    assert {s["attributes"].get(ATTR_REQUEST_ID) for s in spans} == {"req-from-test-1"}
    kinds = sorted((s["service"], s["kind"]) for s in spans)
    assert kinds == [
        ("svc-a", "CLIENT"),
        ("svc-a", "SERVER"),
        ("svc-b", "CLIENT"),
        ("svc-b", "SERVER"),
        ("svc-c", "SERVER"),
    ]
    # Parentage: A server -> A client -> B server -> B client -> C server.
    by_id = {s["span_id"]: s for s in spans}
    server_c = next(s for s in spans if s["service"] == "svc-c")
    chain_names = []
    span: dict[str, Any] | None = server_c
    while span is not None:
        chain_names.append((span["service"], span["kind"]))
        span = by_id.get(span["parent_span_id"]) if span["parent_span_id"] else None
    assert chain_names == [
        ("svc-c", "SERVER"),
        ("svc-b", "CLIENT"),
        ("svc-b", "SERVER"),
        ("svc-a", "CLIENT"),
        ("svc-a", "SERVER"),
    ]

    # Each service's log line carries the request id beside the trace id.
    logs = read_jsonl(tmp_path / "logs.jsonl")
    for name in ("svc-a", "svc-b", "svc-c"):
        lines = [rec for rec in logs if rec.get("hop") == name]
        assert len(lines) == 1, (name, logs)
        assert lines[0]["service"] == name
        assert lines[0]["request_id"] == "req-from-test-1"
        assert lines[0]["trace_id"] == hops[0]["trace_id"]
        assert lines[0]["span_id"]


async def test_request_id_is_minted_once_at_the_edge(chain: list[Node], tmp_path: Path) -> None:
    hops = await call_a(chain[0], timeout=5)
    minted = hops[0]["request_id"]
    assert minted
    assert [h["request_id"] for h in hops] == [minted, minted, minted]
    spans = await wait_for_spans(tmp_path / "spans.jsonl", 5)
    assert {s["attributes"].get(ATTR_REQUEST_ID) for s in spans} == {minted}

    # A second call gets another id (minted per call, not per process).
    again = await call_a(chain[0], timeout=5)
    assert again[0]["request_id"] != minted


async def test_deadline_shrinks_along_the_chain(chain: list[Node]) -> None:
    hops = await call_a(chain[0], timeout=5)
    a, b, c = (h["time_remaining"] for h in hops)
    # Never later downstream: C's deadline is no later than B's, B's no later than A's.
    assert 0 < c <= b <= a <= 5 + WIRE_ROUNDING_S
    # What the client interceptor will use next is the same deadline, measured locally.
    assert 0 < hops[2]["deadline_remaining"] <= 5


async def test_downstream_call_after_the_deadline_is_not_sent(chain: list[Node]) -> None:
    a, b, c = chain
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call_a(a, b"block", timeout=0.2)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert a.calls == 1
    # A either failed fast (its own DEADLINE_EXCEEDED) or was cancelled first; B never saw a call.
    assert set(a.errors) <= {grpc.StatusCode.DEADLINE_EXCEEDED}
    assert b.calls == 0
    assert c.calls == 0


async def test_streaming_server_call_gets_request_id_and_span(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    telemetry = setup_telemetry("svc-stream", settings, configure_logs=False)

    async def watch(request: bytes, context: Any) -> AsyncIterator[bytes]:
        span_ctx = trace.get_current_span().get_span_context()
        for _ in range(2):
            yield json.dumps([callctx.request_id_var.get(), format(span_ctx.trace_id, "032x")]).encode()

    server = grpc.aio.server(interceptors=[EdgeInterceptor(ChainedCallInterceptor(server_interceptors(telemetry)))])
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler("test.Watch", {"Watch": grpc.unary_stream_rpc_method_handler(watch)})]
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = raw(channel, "US", "/test.Watch/Watch")(
                b"", timeout=5, metadata=((callctx.REQUEST_ID_HEADER, "req-stream"),)
            )
            replies = [json.loads(r) async for r in call]
    finally:
        await server.stop(None)
        telemetry.shutdown()
    assert [rid for rid, _ in replies] == ["req-stream", "req-stream"]
    [span] = await wait_for_spans(tmp_path / "spans.jsonl", 1)
    assert span["kind"] == "SERVER"
    assert span["trace_id"] == replies[0][1]
    assert span["attributes"][ATTR_REQUEST_ID] == "req-stream"


# --- the client interceptors on their own ---------------------------------------------------------


@dataclass
class Recorder:
    """A server answering every kind of call with the metadata and deadline it received."""

    target: str = ""
    server: grpc.aio.Server | None = None
    seen: list[dict[str, Any]] = field(default_factory=list)

    def record(self, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        md = context.invocation_metadata()
        info = {
            "request_id": callctx.metadata_value(md, callctx.REQUEST_ID_HEADER),
            "identity": callctx.metadata_value(md, callctx.IDENTITY_HEADER),
            "custom": callctx.metadata_value(md, "x-custom"),
            "time_remaining": context.time_remaining(),
        }
        self.seen.append(info)
        return json.dumps(info).encode()


@pytest.fixture
async def recorder() -> AsyncIterator[Recorder]:
    rec = Recorder()

    async def unary_unary(request: bytes, context: Any) -> bytes:
        return rec.record(context)

    async def unary_stream(request: bytes, context: Any) -> AsyncIterator[bytes]:
        yield rec.record(context)

    async def stream_unary(requests: AsyncIterator[bytes], context: Any) -> bytes:
        async for _ in requests:
            pass
        return rec.record(context)

    async def stream_stream(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        async for _ in requests:
            pass
        yield rec.record(context)

    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(
                "test.Recorder",
                {
                    "UU": grpc.unary_unary_rpc_method_handler(unary_unary),
                    "US": grpc.unary_stream_rpc_method_handler(unary_stream),
                    "SU": grpc.stream_unary_rpc_method_handler(stream_unary),
                    "SS": grpc.stream_stream_rpc_method_handler(stream_stream),
                },
            )
        ]
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    rec.target, rec.server = f"127.0.0.1:{port}", server
    yield rec
    await server.stop(None)


async def _invoke(channel: grpc.aio.Channel, kind: str, **kwargs: Any) -> dict[str, Any]:
    method = f"/test.Recorder/{kind}"

    async def requests() -> AsyncIterator[bytes]:
        yield b"x"

    stub = raw(channel, kind, method)
    if kind == "UU":
        reply = await stub(b"x", **kwargs)
    elif kind == "US":
        replies = [r async for r in stub(b"x", **kwargs)]
        reply = replies[-1]
    elif kind == "SU":
        reply = await stub(requests(), **kwargs)
    else:
        replies = [r async for r in stub(requests(), **kwargs)]
        reply = replies[-1]
    result: dict[str, Any] = json.loads(reply)
    return result


@pytest.mark.parametrize("kind", ["UU", "US", "SU", "SS"])
async def test_every_call_kind_carries_request_id_identity_and_deadline(
    kind: str, recorder: Recorder, tmp_path: Path
) -> None:
    settings = make_settings(tmp_path, default_timeout_s=7)
    async with create_channel(recorder.target, settings, identity_token="tok-channel") as channel:
        edge = await _invoke(channel, kind, metadata=(("x-custom", "kept"),))
        assert edge["request_id"]  # minted: an edge call
        assert edge["identity"] == "tok-channel"
        assert edge["custom"] == "kept"
        assert 0 < edge["time_remaining"] <= 7 + WIRE_ROUNDING_S  # the configured default

        # Inside an incoming call: its request id and deadline win over a longer explicit timeout.
        rid_token = callctx.request_id_var.set("req-incoming")
        deadline_token = callctx.deadline_var.set(time.monotonic() + 2)
        try:
            inside = await _invoke(channel, kind, timeout=30)
        finally:
            callctx.deadline_var.reset(deadline_token)
            callctx.request_id_var.reset(rid_token)
        assert inside["request_id"] == "req-incoming"
        assert 0 < inside["time_remaining"] <= 2


async def test_identity_of_the_incoming_call_is_forwarded(recorder: Recorder, tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    async with create_channel(recorder.target, settings) as channel:
        token = callctx.identity_token_var.set("tok-incoming")
        try:
            seen = await _invoke(channel, "UU")
            explicit = await _invoke(channel, "UU", metadata=((callctx.IDENTITY_HEADER, "tok-explicit"),))
        finally:
            callctx.identity_token_var.reset(token)
        bare = await _invoke(channel, "UU")
    assert seen["identity"] == "tok-incoming"
    assert explicit["identity"] == "tok-explicit"
    assert bare["identity"] is None


async def test_expired_incoming_deadline_fails_fast_without_sending(recorder: Recorder, tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    async with create_channel(recorder.target, settings) as channel:
        token = callctx.deadline_var.set(time.monotonic() - 0.5)
        try:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await raw(channel, "UU", "/test.Recorder/UU")(b"x", timeout=10)
        finally:
            callctx.deadline_var.reset(token)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert "before the call was sent" in (caught.value.details() or "")
    assert recorder.seen == []


async def test_service_clients_dial_the_configured_endpoints(tmp_path: Path) -> None:
    seen: list[str | None] = []

    async def list_tools(request: bytes, context: Any) -> bytes:
        seen.append(callctx.metadata_value(context.invocation_metadata(), callctx.REQUEST_ID_HEADER))
        return tool_pb2.ListToolsResponse().SerializeToString()

    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(
                "agentmesh.v1.ToolService", {"ListTools": grpc.unary_unary_rpc_method_handler(list_tools)}
            )
        ]
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    settings = Settings(auth={"mode": "disabled"}, services={"tool": {"port": port}})
    try:
        async with ServiceClients(settings, identity_token="tok") as clients:
            assert clients.tool() is clients.tool()  # one channel, one stub
            reply = await clients.tool().ListTools(tool_pb2.ListToolsRequest(), timeout=5)
            assert isinstance(reply, tool_pb2.ListToolsResponse)
            with pytest.raises(KeyError):
                clients.channel("billing")
    finally:
        await server.stop(None)
    assert len(seen) == 1
    assert seen[0]


def test_wire_rounding_units() -> None:
    assert wire_rounding(0.5) == pytest.approx(0.001)
    assert wire_rounding(5) == pytest.approx(0.01)
    assert wire_rounding(30) == pytest.approx(0.1)
    assert wire_rounding(300) == pytest.approx(1)


# --- retries --------------------------------------------------------------------------------------


def test_service_config_retries_only_idempotent_methods(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, load_balancing="round_robin", retry_max_attempts=4)
    config = json.loads(service_config(settings, IDEMPOTENT_METHODS))
    assert config["loadBalancingConfig"] == [{"round_robin": {}}]
    [method_config] = config["methodConfig"]
    names = {(n["service"], n["method"]) for n in method_config["name"]}
    assert names == set(IDEMPOTENT_METHODS)
    assert ("grpc.health.v1.Health", "Check") in names
    for service, method in [
        ("agentmesh.v1.ToolService", "ExecuteTool"),
        ("agentmesh.v1.ToolService", "RegisterTool"),
        ("agentmesh.v1.ToolService", "ResolveApproval"),
        ("agentmesh.v1.ContextService", "AppendMessage"),
        ("agentmesh.v1.ContextService", "AppendToolResult"),
        ("agentmesh.v1.ProviderService", "Generate"),
        ("agentmesh.v1.ProviderService", "GenerateStream"),
        ("agentmesh.v1.DispatcherService", "StartTask"),
        ("agentmesh.v1.DispatcherService", "RunTask"),
        ("agentmesh.v1.DispatcherService", "CancelTask"),
    ]:
        assert (service, method) not in names
    # No service-wide entry (a name without "method") would cover the non-idempotent methods.
    assert all("method" in n for n in method_config["name"])
    assert method_config["retryPolicy"] == {
        "maxAttempts": 4,
        "initialBackoff": "0.01s",
        "maxBackoff": "0.05s",
        "backoffMultiplier": 2,
        "retryableStatusCodes": ["UNAVAILABLE"],
    }

    single = json.loads(service_config(make_settings(tmp_path, retry_max_attempts=1), IDEMPOTENT_METHODS))
    assert "methodConfig" not in single
    assert single["loadBalancingConfig"] == [{"pick_first": {}}]


@pytest.fixture
async def flaky_tool_server() -> AsyncIterator[tuple[str, dict[str, int]]]:
    """ToolService look-alike (bytes): each method answers UNAVAILABLE twice, then OK."""
    attempts: dict[str, int] = {"ListTools": 0, "ExecuteTool": 0}

    def handler(name: str) -> Any:
        async def behaviour(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
            attempts[name] += 1
            if attempts[name] <= 2:
                await context.abort(grpc.StatusCode.UNAVAILABLE, "warming up")
            return b"ok"

        return grpc.unary_unary_rpc_method_handler(behaviour)

    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler("agentmesh.v1.ToolService", {n: handler(n) for n in attempts})]
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield f"127.0.0.1:{port}", attempts
    await server.stop(None)


async def test_idempotent_method_is_retried_on_unavailable(
    flaky_tool_server: tuple[str, dict[str, int]], tmp_path: Path
) -> None:
    target, attempts = flaky_tool_server
    async with create_channel(target, make_settings(tmp_path, retry_max_attempts=3)) as channel:
        reply = await raw(channel, "UU", "/agentmesh.v1.ToolService/ListTools")(b"", timeout=5)
    assert reply == b"ok"
    assert attempts["ListTools"] == 3


async def test_non_idempotent_method_is_not_retried(
    flaky_tool_server: tuple[str, dict[str, int]], tmp_path: Path
) -> None:
    target, attempts = flaky_tool_server
    async with create_channel(target, make_settings(tmp_path, retry_max_attempts=3)) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await raw(channel, "UU", "/agentmesh.v1.ToolService/ExecuteTool")(b"", timeout=5)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert attempts["ExecuteTool"] == 1


# --- OTLP export ----------------------------------------------------------------------------------


class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    """A minimal OTLP/gRPC trace receiver (what Jaeger listens with on 4317)."""

    def __init__(self) -> None:
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []

    async def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        self.requests.append(request)
        return trace_service_pb2.ExportTraceServiceResponse()


async def test_spans_are_exported_over_otlp_grpc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    collector = Collector()
    receiver = grpc.aio.server()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(collector, receiver)  # type: ignore[no-untyped-call]
    port = receiver.add_insecure_port("127.0.0.1:0")
    await receiver.start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    settings = make_settings(tmp_path)
    node = await start_node("svc-otlp", settings, None)
    try:
        assert node.telemetry.exporter == "otlp"
        await call_a(node, timeout=5, metadata=((callctx.REQUEST_ID_HEADER, "req-otlp"),))
        # The flush blocks on gRPC I/O to the receiver served by this very loop: off the loop.
        await node.telemetry.aclose()
    finally:
        await node.server.stop(None)
        await receiver.stop(None)

    assert not (tmp_path / "spans.jsonl").exists()  # OTLP replaces the file, not both
    exported = []
    for request in collector.requests:
        for resource_spans in request.resource_spans:
            resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    attrs = {a.key: a.value.string_value for a in span.attributes}
                    exported.append((resource.get("service.name"), span.name, attrs.get(ATTR_REQUEST_ID)))
    assert exported == [("svc-otlp", METHOD.lstrip("/"), "req-otlp")]
