"""The Store's Redis pool is bounded and blocking (issue 19; agentmesh/store.py), on a Cluster too (issue 28)."""

from __future__ import annotations

import asyncio

import pytest

from agentmesh.config import RedisSettings
from agentmesh.errors import ErrorCode, UnavailableError
from agentmesh.store import Store


async def test_a_busy_pool_waits_then_fails_typed_unavailable(redis_url: str) -> None:
    settings = RedisSettings(url=redis_url, max_connections=2, pool_timeout_s=0.2)
    async with await Store.connect(settings, "dev") as store:
        assert store.connection_limit == 2  # on a Cluster: commands in flight (agentmesh/clusterclient.py)

        async def hold(key: str) -> object:
            # BLPOP keeps its connection until the timeout: the pool is full meanwhile.
            return await store.call("hold", store.redis.blpop([key], timeout=1))

        holders = [asyncio.create_task(hold(f"k{i}")) for i in range(2)]
        await asyncio.sleep(0.1)
        with pytest.raises(UnavailableError) as caught:
            await store.call("get", store.redis.get("x"))
        assert caught.value.code is ErrorCode.UNAVAILABLE
        assert caught.value.message.startswith("redis connection pool exhausted during get")
        assert caught.value.metadata["reason"] == "pool_exhausted"

        # Waiting within the timeout is not an error: the command runs once a connection frees up.
        async with await Store.connect(RedisSettings(url=redis_url, max_connections=1), "dev") as one:
            results = await asyncio.gather(*(one.call("set", one.redis.set(f"y{i}", i)) for i in range(50)))
            assert results == [True] * 50
        assert await asyncio.gather(*holders) == [None, None]
