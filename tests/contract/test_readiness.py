"""Readiness follows Redis, liveness does not (issue 19; agentmesh/rpc/host.py).

Each service's health name is readiness: NOT_SERVING while Redis does not answer, SERVING again by
itself once it does. The server-wide name "" is liveness: it stays SERVING through the outage (a
restart would not bring Redis back). deploy/k8s probes match: readinessProbe names the service,
livenessProbe none.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Awaitable, Callable, Iterator

import grpc.aio
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentmesh.dev.localredis import LocalRedis, find_redis_server
from context_svc.server import SPEC as CONTEXT_SPEC
from dispatcher_svc.server import SPEC as DISPATCHER_SPEC
from tests.conftest import RunningService

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
FAST = {"server": {"readiness_interval_s": 0.05}, "redis": {"socket_timeout_s": 0.5, "connect_timeout_s": 0.5}}


async def status(channel: grpc.aio.Channel, service: str) -> int:
    reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
    return int(reply.status)


async def until(channel: grpc.aio.Channel, service: str, wanted: int, *, also_live: bool = True) -> None:
    """Polls the health of `service` until it is `wanted` (the test's timeout bounds the wait);
    liveness ("") must answer SERVING at every poll meanwhile."""
    while await status(channel, service) != wanted:
        if also_live:
            assert await status(channel, "") == SERVING
        await asyncio.sleep(0.05)


@pytest.fixture
def restart_on_port() -> Iterator[Callable[[int], None]]:
    """Starts a redis-server again on a port (the killed one's), stopped at the end of the test."""
    started: list[subprocess.Popen[bytes]] = []

    def start(port: int) -> None:
        args = [find_redis_server(), "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
                "--maxmemory-policy", "noeviction"]  # fmt: skip
        started.append(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    yield start
    for proc in started:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@pytest.mark.parametrize("spec", [CONTEXT_SPEC, DISPATCHER_SPEC], ids=["context", "dispatcher"])
async def test_readiness_drops_while_redis_is_down_and_comes_back_by_itself(
    spec: object,
    start_service: Callable[..., Awaitable[RunningService]],
    fresh_redis: LocalRedis,
    restart_on_port: Callable[[int], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTMESH_REDIS_URL", fresh_redis.url)  # the environment wins over overrides
    svc = await start_service(spec, FAST)
    names = svc.host._service_names
    assert names
    for name in ["", *names]:
        assert await status(svc.channel, name) == SERVING

    fresh_redis.kill()
    for name in names:
        await until(svc.channel, name, NOT_SERVING)
    assert not svc.host.ready
    assert await status(svc.channel, "") == SERVING  # liveness is not Redis's

    restart_on_port(fresh_redis.port)
    for name in names:
        await until(svc.channel, name, SERVING)
    assert svc.host.ready and await status(svc.channel, "") == SERVING


async def test_a_frozen_redis_reads_not_ready_and_the_watcher_stops_with_the_host(
    start_service: Callable[..., Awaitable[RunningService]],
    fresh_redis: LocalRedis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTMESH_REDIS_URL", fresh_redis.url)
    svc = await start_service(CONTEXT_SPEC, FAST)
    name = svc.host._service_names[0]
    watcher = svc.host._readiness
    assert watcher is not None and not watcher.done()
    os.kill(fresh_redis.pid, signal.SIGSTOP)  # accepts connections, answers nothing
    try:
        await until(svc.channel, name, NOT_SERVING)
    finally:
        os.kill(fresh_redis.pid, signal.SIGCONT)
    await until(svc.channel, name, SERVING)

    # Shutdown: the watcher ends before the drain starts, so nothing can set SERVING during it.
    stopping = asyncio.create_task(svc.host.stop(grace=0, drain_delay=0.5))
    await until(svc.channel, "", NOT_SERVING, also_live=False)
    assert watcher.done() and svc.host._readiness is None
    assert await status(svc.channel, name) == NOT_SERVING
    await stopping
