"""What one outgoing call costs, layer by layer: where a hop's overhead over a bare round trip goes.

Every service calls the others through `agentmesh.rpc.channels.create_channel`; the agent loop makes 11
such calls per two-step task (bench_step). This bench sends the same small unary call to a bare
grpc.aio server in this process (the layout of bench_step, where the dispatcher and the minimal
downstream servers share one process) through channels that add one layer at a time:
- `bare`: no interceptor, no metadata (bench_step's floor);
- `+ pass-through interceptor`: grpc.aio's interceptor machinery alone;
- `+ call metadata`: the four headers our calls carry (request id, a real identity token,
  traceparent, baggage), added by a pass-through interceptor;
- `agentmesh channel, no tracing`: `create_channel` without telemetry (request id, identity,
  deadline, baggage propagation, retry service config);
- `agentmesh channel + CLIENT span`: with telemetry, metrics off (JSONL span file);
- `... + metrics`: the same with the services' metrics on (`rpc.client.call.duration` per call);
- `full hop, spans` / `full hop, spans + metrics`: that channel to an edge server (the services'
  EdgeInterceptor with the SERVER span, request context and, with metrics, `rpc.server.call.duration`)
  instead of the bare one: both ends of a hop, with and without metrics;
and a bare server-streaming call of 12 small messages, the shape of RunTask's event stream.

At concurrency 1 the figure is the p50 latency; at 32 it is wall time per call (1 / throughput),
which on a saturated process is the CPU one call costs. Layers are measured in alternating rounds.

Run: `.venv/bin/python bench/bench_hop.py [--calls 3000]`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentmesh import callctx
from agentmesh.authenticator import Authenticator
from agentmesh.config import Settings, TlsSettings, load_settings
from agentmesh.rpc.channels import create_channel
from agentmesh.rpc.interceptors import ChainedCallInterceptor, EdgeInterceptor
from agentmesh.rpc.telemetry import server_interceptors
from agentmesh.rpc.tls import server_credentials
from agentmesh.telemetry import Telemetry, setup_telemetry
from bench.common import BENCH_DIR, BareEchoServer, alternating, bar_plot, percentile, table
from tests.certs import make_ca, write_leaf

SERVICE = "agentmesh.v1.ContextService"
UNARY = f"/{SERVICE}/GetSession"
STREAM = f"/{SERVICE}/WatchEvents"
STREAM_MESSAGES = 12
ROUNDS = 3
PAYLOAD = b"x" * 64


class HopServer(BareEchoServer):
    """The bare echo server (no interceptors), also serving our method name and a 12-message stream;
    over mTLS with `credentials` (agentmesh.rpc.tls.server_credentials)."""

    def __init__(self, credentials: grpc.ServerCredentials | None = None) -> None:
        super().__init__()
        self.credentials = credentials

        async def echo(request: bytes, context: Any) -> bytes:
            return request

        async def stream(request: bytes, context: Any) -> AsyncIterator[bytes]:
            for _ in range(STREAM_MESSAGES):
                yield request

        def raw(handler: Any, kind: Callable[..., Any]) -> Any:
            return kind(handler, request_deserializer=lambda b: b, response_serializer=lambda b: b)

        handlers = {
            "GetSession": raw(echo, grpc.unary_unary_rpc_method_handler),
            "WatchEvents": raw(stream, grpc.unary_stream_rpc_method_handler),
        }
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))

    async def __aenter__(self) -> HopServer:
        if self.credentials is None:
            await super().__aenter__()
            return self
        self.port = self.server.add_secure_port("127.0.0.1:0", self.credentials)
        await self.server.start()
        return self


class EdgeServer:
    """The hop's echo method behind the services' one edge interceptor (span, request context, metrics)."""

    def __init__(self, telemetry: Telemetry) -> None:
        self.server = grpc.aio.server(
            interceptors=[EdgeInterceptor(ChainedCallInterceptor(server_interceptors(telemetry)))]
        )
        self.port = 0

        async def echo(request: bytes, context: Any) -> bytes:
            return request

        handler = grpc.unary_unary_rpc_method_handler(
            echo, request_deserializer=lambda b: b, response_serializer=lambda b: b
        )
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"GetSession": handler}),))

    async def __aenter__(self) -> EdgeServer:
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.server.stop(0)


class PassThrough(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[type-arg]
    """Adds `metadata` (if any) and does nothing else."""

    def __init__(self, metadata: tuple[tuple[str, str], ...] = ()) -> None:
        self.metadata = metadata

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        if self.metadata:
            details = grpc.aio.ClientCallDetails(
                details.method, details.timeout, grpc.aio.Metadata(*self.metadata), None, None
            )
        return await continuation(details, request)


def passing(interceptor: PassThrough) -> list[Any]:
    return [interceptor]


def unary_call(channel: grpc.aio.Channel) -> Callable[[], Awaitable[Any]]:
    unary = channel.unary_unary(UNARY)  # type: ignore[call-arg]

    def call() -> Awaitable[Any]:
        return unary(PAYLOAD, timeout=10)

    return call


def bench_settings(tmp: Path) -> Settings:
    empty = tmp / "empty.yaml"
    empty.write_text("{}\n")
    overrides = {
        "auth": {"key": "bench-hop-key-" + "h" * 32},
        "telemetry": {"span_file": str(tmp / "spans.jsonl"), "log_level": "WARNING"},
    }
    return load_settings(empty, overrides=overrides)


async def run(calls: int) -> int:
    logging.getLogger().setLevel(logging.WARNING)
    tmp = Path(tempfile.mkdtemp(prefix="bench-hop-"))
    settings = bench_settings(tmp)
    telemetry = setup_telemetry("bench_svc", settings, configure_logs=False, metrics=False)
    metered = setup_telemetry("bench_svc", settings, configure_logs=False)
    assert metered.metrics.enabled and not telemetry.metrics.enabled
    token = Authenticator(settings.auth, settings.environment).mint(subject="bench", roles=("agent",))
    headers = (
        (callctx.REQUEST_ID_HEADER, callctx.new_request_id()),
        (callctx.IDENTITY_HEADER, token),
        ("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        ("baggage", "agentmesh.request_id=" + callctx.new_request_id()),
    )
    # mTLS (issue 22): the same hop with certificates made here, the server reloading its files.
    ca = make_ca()
    tls = TlsSettings.model_validate(write_leaf(ca, "localhost", tmp / "pki"))
    tls_settings = settings.model_copy(update={"tls": tls})
    async with (
        HopServer() as server,
        HopServer(server_credentials(tls)) as tls_server,
        EdgeServer(telemetry) as edge,
        EdgeServer(metered) as metered_edge,
    ):
        target = f"127.0.0.1:{server.port}"
        tls_target = f"localhost:{tls_server.port}"
        channels: dict[str, grpc.aio.Channel] = {
            "bare": grpc.aio.insecure_channel(target),
            "+ pass-through interceptor": grpc.aio.insecure_channel(target, interceptors=passing(PassThrough())),
            "+ call metadata (4 headers)": grpc.aio.insecure_channel(
                target, interceptors=passing(PassThrough(headers))
            ),
            "agentmesh channel, no tracing": create_channel(target, settings, identity_token=token),
            "agentmesh channel + CLIENT span": create_channel(
                target, settings, telemetry=telemetry, identity_token=token
            ),
            "agentmesh channel + CLIENT span, mTLS": create_channel(
                tls_target, tls_settings, telemetry=telemetry, identity_token=token
            ),
            "agentmesh channel + CLIENT span + metrics": create_channel(
                target, settings, telemetry=metered, identity_token=token
            ),
            "full hop, spans": create_channel(
                f"127.0.0.1:{edge.port}", settings, telemetry=telemetry, identity_token=token
            ),
            "full hop, spans + metrics": create_channel(
                f"127.0.0.1:{metered_edge.port}", settings, telemetry=metered, identity_token=token
            ),
        }
        workloads = {name: unary_call(channel) for name, channel in channels.items()}
        stream_call = channels["bare"].unary_stream(STREAM)  # type: ignore[call-arg]

        async def stream() -> None:
            async for _ in stream_call(PAYLOAD * 3, timeout=10):
                pass

        workloads[f"bare {STREAM_MESSAGES}-message stream"] = stream
        figures: dict[tuple[str, int], float] = {}
        for concurrency in (1, 32):
            for call in workloads.values():
                for _ in range(50):
                    await call()
            measured = await alternating(
                {name: (call, calls) for name, call in workloads.items()}, rounds=ROUNDS, concurrency=concurrency
            )
            for name, (latencies, seconds) in measured.items():
                per_call_ms = seconds / len(latencies) * 1000
                figures[(name, concurrency)] = percentile(latencies, 0.5) if concurrency == 1 else per_call_ms
        for channel in channels.values():
            await channel.close(None)
    await telemetry.aclose()
    await metered.aclose()

    rows = []
    for name in workloads:
        c1, c32 = figures[(name, 1)], figures[(name, 32)]
        bare1, bare32 = figures[("bare", 1)], figures[("bare", 32)]
        rows.append([name, f"{c1 * 1000:.0f}", f"{c1 / bare1:.2f}x", f"{c32 * 1000:.0f}", f"{c32 / bare32:.2f}x"])
    header = ["call", "c=1 p50 us", "vs bare", "c=32 us per call", "vs bare"]
    print(table(header, rows))
    labels = [name for name in workloads if name != "bare"]
    values = [figures[(name, 32)] / figures[("bare", 32)] for name in labels]
    path = bar_plot(BENCH_DIR / "bench_hop.png", "one call at concurrency 32 / bare call", labels, values, "ratio (x)")
    print(f"plot: {path}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=3000, help="calls per layer and concurrency")
    sys.exit(asyncio.run(run(parser.parse_args().calls)))
