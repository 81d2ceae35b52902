"""bench_peer's task as its bare shape: what four gRPC services and Redis cost before any of our code.

Four processes, as in the real mesh, with plain grpc.aio servers and channels (no interceptors, auth,
spans, metrics or protobuf: raw bytes of about the real messages' sizes) and redis-py on the same
redis-server kind. A "dispatcher" serves a server-streaming RunTask that makes the real task's calls in
its order and overlap (CreateSession beside DiscoverTools, Generate, ExecuteTool, AppendMessage with the
reply and result, Generate; the final AppendMessage after the last event), streams its 12 events, and
makes its Redis round trips where the real run does (create, acquire, four fenced commits, ack, the
agent's end, audit); "context" answers with one round trip per append and one per memory read, "tool"
with two per ExecuteTool (claim, settle), "provider" with none. Each round trip is one EVALSHA of a
script that returns at once: the round trip, not the work in it.

So the skeleton is a floor for this design (four services, durable state in Redis), not for any
design: bench_peer runs it beside agentmesh and LangGraph (`--skeleton`), and what agentmesh costs
above it is our code. A second skeleton, `+ our edge`, is the same processes with our RPC edge on both
ends of every call (`create_channel` with the services' telemetry: request id, identity token,
deadline, trace context, CLIENT span, call metrics; the servers' `EdgeInterceptor` with the chain the
services run: SERVER span, request context, call metrics, load shedding, the token's verification; spans
to a JSONL file as the bench's services write them): what agentmesh costs above that is the services'
own work (validation, fencing, events, context, tools, accounting, ...).

A process: `python -m bench.peer_skeleton ROLE PORT REDIS_URL WORKDIR EDGE(0|1) [CONTEXT TOOL PROVIDER]`.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import redis.asyncio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentmesh.authenticator import Authenticator
from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.config import Settings
from agentmesh.rpc.auth import AuthInterceptor
from agentmesh.rpc.channels import create_channel
from agentmesh.rpc.host import ConcurrencyLimitInterceptor
from agentmesh.rpc.interceptors import ChainedCallInterceptor, EdgeInterceptor
from agentmesh.rpc.telemetry import server_interceptors
from agentmesh.telemetry import Telemetry, setup_telemetry
from bench.bench_hop import bench_settings
from bench.bench_scale import free_port
from bench.common import cpu_s

SERVICE = "skeleton.Skeleton"
ROLES = ("context", "tool", "provider", "dispatcher")
# Sizes (bytes) of about what the real task sends and answers (request, response).
SIZES = {
    "CreateSession": (300, 700),
    "DiscoverTools": (150, 500),
    "Generate": (900, 300),
    "ExecuteTool": (250, 250),
    "AppendMessage": (500, 900),
    "AppendFinal": (400, 100),
}
EVENT = b"e" * 200
# Redis round trips each call makes in the service that answers it.
TRIPS = {"CreateSession": 2, "AppendMessage": 2, "AppendFinal": 1, "ExecuteTool": 2}


class Trips:
    """One Redis round trip: an EVALSHA of a script that returns at once."""

    def __init__(self, url: str) -> None:
        self.redis = redis.asyncio.Redis.from_url(url)
        self.sha = ""

    async def start(self) -> None:
        self.sha = str(await self.redis.script_load("return 1"))

    async def __call__(self, n: int = 1) -> None:
        for _ in range(n):
            await self.redis.evalsha(self.sha, 0)


def edge_token(settings: Settings) -> str:
    """The identity token the edge variant's calls carry (the bench's key)."""
    return Authenticator(settings.auth, settings.environment).mint(subject="bench", roles=("agent",))


def raw(handler: Any, kind: Callable[..., Any]) -> Any:
    return kind(handler, request_deserializer=None, response_serializer=None)


async def serve(role: str, port: int, redis_url: str, targets: list[str], edge: Path | None) -> None:
    """One skeleton process; with `edge` (a directory for its settings and span file), our RPC edge."""
    trips = Trips(redis_url)
    await trips.start()
    connect: Callable[[str], grpc.aio.Channel] = grpc.aio.insecure_channel
    telemetry: Telemetry | None = None
    if edge is None:
        server = grpc.aio.server()
    else:
        settings = bench_settings(edge)
        telemetry = setup_telemetry(f"skeleton-{role}", settings, configure_logs=False)
        token = edge_token(settings)
        authenticator = Authenticator(settings.auth, settings.environment)
        chain = [*server_interceptors(telemetry), ConcurrencyLimitInterceptor(256), AuthInterceptor(authenticator)]
        interceptor = EdgeInterceptor(ChainedCallInterceptor(chain))
        server = grpc.aio.server(interceptors=[interceptor])

        def connect(target: str) -> grpc.aio.Channel:
            return create_channel(target, settings, telemetry=telemetry, identity_token=token)

    handlers: dict[str, Any] = {}
    for method, (_, response_size) in SIZES.items():

        async def answer(request: bytes, context: Any, method: str = method, size: int = response_size) -> bytes:
            await trips(TRIPS.get(method, 0))
            return b"r" * size

        handlers[method] = raw(answer, grpc.unary_unary_rpc_method_handler)
    if role == "dispatcher":
        channels = {name: connect(target) for name, target in zip(ROLES, targets, strict=False)}

        def call(service: str, method: str) -> Awaitable[bytes]:
            stub = channels[service].unary_unary(f"/{SERVICE}/{method}")  # type: ignore[call-arg]
            return stub(b"q" * SIZES[method][0], timeout=30)

        background: set[asyncio.Task[Any]] = set()

        def later(work: Awaitable[Any]) -> None:
            task = asyncio.ensure_future(work)
            background.add(task)
            task.add_done_callback(background.discard)

        async def run_task(request: bytes, context: Any) -> AsyncIterator[bytes]:
            await trips()  # create and queue (one pipeline)
            later(trips())  # the audit record
            yield EVENT  # PENDING
            await trips()  # acquire
            yield EVENT  # RUNNING
            started = asyncio.ensure_future(trips())  # step 1's start, beside the reads
            await asyncio.gather(call("context", "CreateSession"), call("tool", "DiscoverTools"))
            await started
            yield EVENT  # step 1
            yield EVENT  # context
            await call("provider", "Generate")
            await trips()  # the reply's checkpoint
            yield EVENT  # model reply
            yield EVENT  # tool call
            await call("tool", "ExecuteTool")
            await call("context", "AppendMessage")  # reply and result, the next view
            await trips()  # the outcome and step 2's start
            yield EVENT  # tool result
            yield EVENT  # step 2
            yield EVENT  # context
            await call("provider", "Generate")
            await trips()  # terminal
            yield EVENT  # model reply
            yield EVENT  # answer
            yield EVENT  # SUCCEEDED
            later(call("context", "AppendFinal"))
            later(trips(2))  # ack the entry, the agent's end

        handlers["RunTask"] = raw(run_task, grpc.unary_stream_rpc_method_handler)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    stopped = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopped.set)
    await stopped.wait()
    await server.stop(0)
    if telemetry is not None:
        telemetry.shutdown()  # the spans still in the batch processor go out


class Skeleton:
    """The four skeleton processes on a redis-server, and a client running tasks through RunTask."""

    def __init__(self, redis_url: str, workdir: Path, *, edge: bool = False) -> None:
        self.redis_url = redis_url
        self.workdir = workdir
        self.edge = edge
        self.ports = {role: free_port() for role in ROLES}
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.channel: grpc.aio.Channel | None = None
        self.token = ""

    def start(self) -> None:
        targets = [f"127.0.0.1:{self.ports[r]}" for r in ROLES[:3]]
        tag = "skeleton-edge" if self.edge else "skeleton"
        (self.workdir / tag).mkdir(exist_ok=True)
        for role in ROLES:
            log = (self.workdir / f"{tag}-{role}.log").open("wb")
            argv = [role, str(self.ports[role]), self.redis_url, str(self.workdir / tag), str(int(self.edge))]
            self.processes[role] = subprocess.Popen(
                [sys.executable, "-m", "bench.peer_skeleton", *argv, *targets],
                cwd=Path(__file__).resolve().parents[1],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    async def ready(self) -> None:
        for role in ROLES:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{self.ports[role]}") as channel:
                await asyncio.wait_for(channel.channel_ready(), timeout=60)

    def stop(self) -> None:
        for process in self.processes.values():
            process.terminate()
        for process in self.processes.values():
            process.wait(timeout=10)

    def cpu(self) -> float:
        return sum(cpu_s(p.pid) for p in self.processes.values())

    async def run(self, n: int, concurrency: int, tag: str) -> tuple[list[float], float, float]:
        """`n` tasks, `concurrency` at a time: each task's seconds, the wall seconds, the CPU seconds."""
        from bench.bench_peer import timed  # bench_peer imports this module

        failed: list[int] = []

        async def one(i: int) -> None:
            if (events := await self.task()) != 12:
                failed.append(events)

        before = self.cpu()
        latencies, wall = await timed(one, n, concurrency)
        if failed:
            raise RuntimeError(f"skeleton: {len(failed)} of {n} tasks streamed {failed[0]} events, not 12")
        return latencies, wall, self.cpu() - before

    async def sample(self, n: int, concurrency: int, tag: str) -> Any:
        """`run` as bench_peer's Sample."""
        from bench.bench_peer import Sample  # bench_peer imports this module

        return Sample(*await self.run(n, concurrency, tag))

    async def task(self) -> int:
        """One task; the number of events it streamed."""
        if self.channel is None:
            self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{self.ports['dispatcher']}")
        stream = self.channel.unary_stream(f"/{SERVICE}/RunTask")  # type: ignore[call-arg]
        if self.edge and not self.token:
            self.token = edge_token(bench_settings(self.workdir / "skeleton-edge"))
        metadata = ((IDENTITY_HEADER, self.token),) if self.edge else None
        events = 0
        async for _ in stream(b"goal", timeout=120, metadata=metadata):
            events += 1
        return events


def main(argv: list[str]) -> None:
    role, port, redis_url, workdir, edge, *targets = argv
    if role not in ROLES:
        raise SystemExit(f"role: one of {ROLES}")
    started = time.monotonic()
    asyncio.run(serve(role, int(port), redis_url, targets, Path(workdir) if edge == "1" else None))
    print(f"{role}: up {time.monotonic() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
