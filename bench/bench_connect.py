"""What the Connect protocol on the HTTP listener costs beside gRPC, for the same RPC, same run, same machine.

The four real services run in this process behind their real ServiceHosts (interceptors, auth,
telemetry, load shedding) on a real Redis (agentmesh.dev.localredis), with their HTTP listeners open, as
the contract tests run them (tests/contract/stack.py; the agent's model is the offline scripted one:
it calls `calculator`, then answers). Measured at concurrency 1:
- `bare gRPC round trip`: a 64-byte echo to a grpc.aio server with no interceptors (the floor);
- `bare HTTP round trip`: a 64-byte echo through the same HTTP stack (httpx with keep-alive to uvicorn
  and a Starlette route) with no Connect and no edge: the HTTP transport's own floor;
- `GetTask over gRPC`: the dispatcher's GetTask (one Redis read) through the ServiceHost;
- `GetTask over Connect JSON` / `... Connect proto`: the same RPC as a Connect unary POST
  (`application/json` / `application/proto`) with httpx on one keep-alive connection, through the
  same edge (agentmesh/rpc/connect.py); the reply is decoded, as the gRPC stub decodes its own;
- `RunTask over gRPC` / `RunTask over connect+json`: a whole two-step task streamed to the client,
  timed from the request to its last event (the stream's end), over the gRPC port and as an enveloped
  `application/connect+json` stream on the HTTP listener.

Workloads run in interleaved rounds (default 3); each row is the round with the median p50, and each
ratio is taken within a round, then the median over rounds, so a burst of load on a shared machine
does not decide a ratio. The client runs in the services' event loop, in both protocols alike.

    .venv/bin/python -m bench.bench_connect [--calls 300] [--rounds 3] [--tasks 30]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import struct
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc.aio
import httpx
from starlette.routing import Route

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentmesh.authenticator import Authenticator
from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.dev.localredis import LocalRedis
from agentmesh.rpc.http import HttpListener
from agentmesh.v1 import dispatcher_pb2, dispatcher_pb2_grpc
from bench.common import BENCH_DIR, STATS_HEADER, BareEchoServer, Stats, bar_plot, measure, table
from tests.contract.stack import AGENT, Stack

DISPATCHER = "/agentmesh.v1.DispatcherService"
PAYLOAD = b"x" * 64
BARE = "bare gRPC round trip"
HTTP_BARE = "bare HTTP round trip (httpx, uvicorn)"
GRPC_UNARY = "GetTask over gRPC"
JSON_UNARY = "GetTask over Connect JSON"
PROTO_UNARY = "GetTask over Connect proto"
GRPC_STREAM = "RunTask over gRPC (to last event)"
JSON_STREAM = "RunTask over connect+json (to last event)"
DONE = "TASK_STATUS_SUCCEEDED"
# The stack's scripted model without the provider's default rate limit (60 calls a minute): a bench
# runs more tasks in a minute than that, and would measure the limiter's waits.
UNLIMITED = {
    "providers": {
        "backends": [
            {
                "name": "scripted",
                "type": "scripted",
                "rate_limit_per_min": None,
                "models": [{"name": "smoke", "policy": "tests.contract.stack:policy"}],
            }
        ]
    }
}
Call = Callable[[], Awaitable[Any]]


class HttpEcho:
    """An ASGI app answering a POST with its own body: no Connect, no edge."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _frames(body: bytes) -> list[tuple[int, bytes]]:
    """The (flags, data) frames of an enveloped Connect stream."""
    out, at = [], 0
    while at < len(body):
        flags, size = struct.unpack(">BI", body[at : at + 5])
        out.append((flags, body[at + 5 : at + 5 + size]))
        at += 5 + size
    return out


def _envelope(message: dict[str, Any]) -> bytes:
    data = json.dumps(message).encode()
    return struct.pack(">BI", 0, len(data)) + data


def workloads(
    stack: Stack, bare: grpc.aio.Channel, http: httpx.AsyncClient, echo_url: str, task_id: str
) -> dict[str, Call]:
    """The measured calls (module docstring), each checking its answer."""
    assert stack.channel is not None
    token = Authenticator(stack.hosts["dispatcher"][0].settings.auth, "dev").mint(
        subject="operator", roles=("operator",)
    )
    md = ((IDENTITY_HEADER, token),)
    stub = dispatcher_pb2_grpc.DispatcherServiceStub(stack.channel)  # type: ignore[no-untyped-call]
    echo = bare.unary_unary("/bench.Echo/Echo")  # type: ignore[call-arg]
    get = dispatcher_pb2.GetTaskRequest(task_id=task_id)
    get_json = json.dumps({"taskId": task_id}).encode()
    get_proto = get.SerializeToString()
    auth = {"authorization": f"Bearer {token}", "connect-protocol-version": "1"}
    json_headers = {**auth, "content-type": "application/json"}
    proto_headers = {**auth, "content-type": "application/proto"}
    stream_headers = {**auth, "content-type": "application/connect+json"}
    goal = "compute 6*7"

    async def bare_grpc() -> None:
        await echo(PAYLOAD, timeout=10)

    async def bare_http() -> None:
        reply = await http.post(echo_url, content=PAYLOAD)
        assert reply.status_code == 200 and reply.content == PAYLOAD

    async def grpc_unary() -> None:
        reply = await stub.GetTask(get, metadata=md, timeout=10)
        assert reply.task.task_id == task_id

    async def json_unary() -> None:
        reply = await http.post(f"{DISPATCHER}/GetTask", content=get_json, headers=json_headers)
        assert reply.status_code == 200 and reply.json()["task"]["taskId"] == task_id, reply.text

    async def proto_unary() -> None:
        reply = await http.post(f"{DISPATCHER}/GetTask", content=get_proto, headers=proto_headers)
        assert reply.status_code == 200, reply.text
        assert dispatcher_pb2.GetTaskResponse.FromString(reply.content).task.task_id == task_id

    async def grpc_stream() -> None:
        start = dispatcher_pb2.StartTaskRequest(agent_id=AGENT, goal=goal)
        call = stub.RunTask(dispatcher_pb2.RunTaskRequest(start=start), metadata=md, timeout=60)
        events = [reply.event async for reply in call]
        assert dispatcher_pb2.TaskStatus.Name(events[-1].status) == DONE, events[-1]

    async def json_stream() -> None:
        body = _envelope({"start": {"agentId": AGENT, "goal": goal}})
        async with http.stream("POST", f"{DISPATCHER}/RunTask", content=body, headers=stream_headers) as reply:
            raw = b"".join([chunk async for chunk in reply.aiter_raw()])
        *messages, (flags, end) = _frames(raw)
        assert reply.status_code == 200 and flags == 0x02 and json.loads(end) == {}, end
        events = [json.loads(data)["event"] for _, data in messages]
        assert events[-1]["status"] == DONE, events[-1]

    return {
        BARE: bare_grpc,
        HTTP_BARE: bare_http,
        GRPC_UNARY: grpc_unary,
        JSON_UNARY: json_unary,
        PROTO_UNARY: proto_unary,
        GRPC_STREAM: grpc_stream,
        JSON_STREAM: json_stream,
    }


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


async def _rounds(calls: dict[str, tuple[Call, int]], rounds: int) -> tuple[dict[str, Stats], list[dict[str, Stats]]]:
    """Each workload once per round, interleaved; per workload the round with the median p50."""
    per_round: list[dict[str, Stats]] = []
    for _ in range(rounds):
        per_round.append({
            name: await measure(name, call, calls=n, concurrency=1, warmup=5) for name, (call, n) in calls.items()
        })  # fmt: skip
    median = {name: sorted((r[name] for r in per_round), key=lambda s: s.p50_ms)[rounds // 2] for name in calls}
    return median, per_round


# Each Connect row beside its gRPC twin.
TWIN = {JSON_UNARY: GRPC_UNARY, PROTO_UNARY: GRPC_UNARY, JSON_STREAM: GRPC_STREAM}


async def run(calls: int, rounds: int, tasks: int, plot: Path | None) -> int:
    for name in [k for k in os.environ if k.startswith(("AGENTMESH_", "OTEL_"))]:
        del os.environ[name]  # the services read only what this bench configures
    logging.getLogger().setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmpdir, LocalRedis() as redis:
        async with contextlib.AsyncExitStack() as exits:
            stack = await exits.enter_async_context(Stack(redis.url, Path(tmpdir), UNLIMITED, http=True))
            bare_server = await exits.enter_async_context(BareEchoServer())
            bare = grpc.aio.insecure_channel(f"127.0.0.1:{bare_server.port}")
            exits.push_async_callback(bare.close, None)
            listener = HttpListener("bench-echo", [Route("/echo", HttpEcho(), methods=["POST"])])
            echo_port = await listener.start("127.0.0.1:0")
            exits.push_async_callback(listener.stop)
            dispatcher_http = stack.hosts["dispatcher"][0].http_port
            http = await exits.enter_async_context(
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{dispatcher_http}", timeout=60)
            )
            events = await stack.run("compute 6*7")  # a task to read (and tool_svc's pool started)
            task_id = events[-1].task_id
            measured = workloads(stack, bare, http, f"http://127.0.0.1:{echo_port}/echo", task_id)
            streams = (GRPC_STREAM, JSON_STREAM)
            plan = {name: (call, tasks if name in streams else calls) for name, call in measured.items()}
            stats, per_round = await _rounds(plan, rounds)

    def ratio(name: str, base: str) -> float:
        return _median([r[name].p50_ms / r[base].p50_ms for r in per_round])

    rows = []
    for name, s in stats.items():
        twin = f"{ratio(name, TWIN[name]):.2f}x" if name in TWIN else ""
        rows.append([*s.row()[:5], f"{ratio(name, BARE):.2f}x", twin])
    print(f"services in this process, concurrency 1; {rounds} rounds, the median round (ratios within a round)")
    print(table([*STATS_HEADER[:5], "p50 / bare gRPC", "Connect / gRPC"], rows))
    if plot is not None:
        labels = [name for name in stats if name != BARE]
        bar_plot(plot, "p50 / bare gRPC round trip", labels, [ratio(name, BARE) for name in labels], "ratio (x)")
        print(f"plot: {plot}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=300, help="unary calls per workload and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=30, help="RunTask streams per protocol and round")
    parser.add_argument("--plot", type=Path, default=BENCH_DIR / "bench_connect.png")
    args = parser.parse_args()
    return asyncio.run(run(args.calls, args.rounds, args.tasks, args.plot))


if __name__ == "__main__":
    sys.exit(main())
