"""Slow HTTP bodies never starve gRPC (issue 39, high), on a real service's two ports.

The red team's attack: many `POST`s with `Content-Length: 100000` sending one byte every few seconds.
They used to hold slots of the one concurrency count both ports shared, until gRPC calls were shed.
Now the HTTP listener has its own count (after authentication), a cap per identity, and a minimum body
rate after which a trickling body is cut (agentmesh/rpc/httplimits.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentmesh.v1 import tool_pb2, tool_pb2_grpc
from tests.conftest import RunningService
from tool_svc.server import SPEC as TOOL_SPEC

LIST_TOOLS = "/agentmesh.v1.ToolService/ListTools"

GRANT = ["dev:shop:read"]
"""Some grant: a token with none is refused before it holds a slot (the last tests)."""

LIMITS = {
    "server": {
        "http_header_timeout_s": 0.5,
        "http_max_concurrent": 8,
        "http_max_per_identity": 4,
        "http_body_grace_s": 0.5,
        "http_min_body_rate": 100,
    }
}


async def slow_post(
    port: int, token: str | None, path: str = LIST_TOOLS
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Opens a POST announcing 100,000 bytes of body and sends one."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    auth = f"authorization: Bearer {token}\r\n" if token else ""
    writer.write(
        (
            f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n{auth}"
            "content-length: 100000\r\n\r\n{"
        ).encode()
    )
    await writer.drain()
    return reader, writer


async def status_of(reader: asyncio.StreamReader, timeout: float = 20) -> int:  # noqa: ASYNC109 - a bound
    line = await asyncio.wait_for(reader.readline(), timeout)
    return int(line.split()[1])


async def wait_for(predicate: Callable[[], bool]) -> None:
    for _ in range(500):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached")


async def test_slow_bodies_never_take_grpc_slots_and_are_cut(
    start_service: Callable[..., Awaitable[RunningService]],
) -> None:
    svc = await start_service(
        TOOL_SPEC, {**LIMITS, "server": {**LIMITS["server"], "max_concurrent_rpcs": 4}}, http=True
    )
    host = svc.host
    port = host.http_port
    tokens = [svc.token(("agent",), subject=f"attacker-{i}", permissions=GRANT) for i in range(12)]
    conns = [await slow_post(port, tokens[i]) for i in range(12)]
    await wait_for(lambda: host.http_limiter.in_flight == 8)
    assert host.limiter.in_flight == 0  # not one gRPC slot is held by them
    # The 4 over the HTTP limit were refused at once, without their body.
    refused = []
    for reader, _ in conns:
        with contextlib.suppress(TimeoutError):
            refused.append(await status_of(reader, timeout=0.05))
    assert refused == [429] * 4
    # gRPC is answered in full meanwhile (its limit is 4: a shared count would have been full twice over).
    # At most 4 at once: more would be shed by gRPC's own limit whenever the handlers overlap, which
    # depends on the machine's load, not on the trickles.
    stub = tool_pb2_grpc.ToolServiceStub(svc.channel)  # type: ignore[no-untyped-call]
    slots = asyncio.Semaphore(4)

    async def list_tools() -> tool_pb2.ListToolsResponse:
        async with slots:
            reply: tool_pb2.ListToolsResponse = await stub.ListTools(
                tool_pb2.ListToolsRequest(), metadata=svc.metadata(), timeout=10
            )
            return reply

    replies = await asyncio.gather(*(list_tools() for _ in range(15)))
    assert all(r.tools for r in replies)
    health = health_pb2_grpc.HealthStub(svc.channel)
    assert (
        await health.Check(health_pb2.HealthCheckRequest(), timeout=5)
    ).status == health_pb2.HealthCheckResponse.SERVING
    # The trickles are cut after the grace (408, connection closed) and every HTTP slot comes back.
    statuses = []
    for reader, writer in conns:
        try:
            statuses.append(await status_of(reader))
        except (TimeoutError, ValueError, IndexError):
            statuses.append(0)
        writer.close()
    # Connect's deadline_exceeded (504) on these Connect routes; 408 on a route of a service's own.
    assert statuses.count(504) == 8, statuses
    await wait_for(lambda: host.http_limiter.in_flight == 0)


async def test_one_identity_holds_at_most_its_share(start_service: Callable[..., Awaitable[RunningService]]) -> None:
    svc = await start_service(TOOL_SPEC, LIMITS, http=True)
    host = svc.host
    mine = svc.token(("agent",), subject="greedy", permissions=GRANT)
    conns = [await slow_post(host.http_port, mine) for _ in range(5)]
    await wait_for(lambda: host.http_limiter.in_flight == 4)
    overs = []
    for reader, _ in conns:
        with contextlib.suppress(TimeoutError):
            overs.append(await status_of(reader, timeout=0.05))
    assert overs == [429]
    # Another identity still gets in, and its request is served.
    other = svc.token(("agent",), subject="polite", permissions=GRANT)
    reader, writer = await asyncio.open_connection("127.0.0.1", host.http_port)
    writer.write(
        f"POST {LIST_TOOLS} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        f"authorization: Bearer {other}\r\ncontent-length: 2\r\n\r\n{{}}".encode()
    )
    assert await status_of(reader) == 200
    writer.close()
    for _, w in conns:
        w.close()


async def test_an_unauthenticated_or_ungranted_caller_is_refused_before_its_body_and_holds_no_slot(
    start_service: Callable[..., Awaitable[RunningService]],
) -> None:
    svc = await start_service(TOOL_SPEC, LIMITS, http=True)
    host = svc.host
    conns = [await slow_post(host.http_port, None) for _ in range(3)]
    conns += [await slow_post(host.http_port, "not-a-token") for _ in range(3)]
    ungranted = [await slow_post(host.http_port, svc.token(("agent",), subject=f"n{i}")) for i in range(10)]
    for reader, writer in conns:
        assert await status_of(reader, timeout=5) == 401  # answered with 99,999 bytes still unsent
        writer.close()
    for reader, writer in ungranted:
        assert await status_of(reader, timeout=5) == 403
        writer.close()
    assert host.http_limiter.in_flight == 0 and host.limiter.in_flight == 0


async def test_a_body_at_a_fair_rate_is_served(start_service: Callable[..., Awaitable[RunningService]]) -> None:
    """Above the minimum rate a body may take longer than the grace."""
    svc = await start_service(TOOL_SPEC, LIMITS, http=True)
    token = svc.token(("agent",), subject="fair", permissions=GRANT)
    body = b"{" + b" " * 118 + b"}"  # 120 bytes at ~400 bytes/s: 0.3 s, past nothing
    reader, writer = await asyncio.open_connection("127.0.0.1", svc.host.http_port)
    writer.write(
        f"POST {LIST_TOOLS} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        f"authorization: Bearer {token}\r\ncontent-length: {len(body)}\r\n\r\n".encode()
    )
    for i in range(0, len(body), 20):
        writer.write(body[i : i + 20])
        await writer.drain()
        await asyncio.sleep(0.05)
    assert await status_of(reader) == 200
    writer.close()


async def test_headers_that_never_end_have_their_connection_closed(
    start_service: Callable[..., Awaitable[RunningService]],
) -> None:
    svc = await start_service(TOOL_SPEC, LIMITS, http=True)
    port = svc.host.http_port
    silent = await asyncio.open_connection("127.0.0.1", port)  # connects, sends nothing
    trickle = await asyncio.open_connection("127.0.0.1", port)
    trickle[1].write(b"POST " + LIST_TOOLS.encode() + b" HTTP/1.1\r\nhost: x\r\n")
    await trickle[1].drain()
    for reader, writer in (silent, trickle):
        assert await asyncio.wait_for(reader.read(), 20) == b""  # closed by the server, nothing answered
        writer.close()
    # A prompt client on a kept-alive connection is served twice, idle past the header timeout between.
    token = svc.token(("agent",), subject="prompt", permissions=GRANT)
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}", headers={"authorization": f"Bearer {token}"}
    ) as http:
        for _ in range(2):
            assert (await http.post(LIST_TOOLS, json={})).status_code == 200
            await asyncio.sleep(0.6)
