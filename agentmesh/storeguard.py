"""What a Redis failure means to the caller, and how long each Redis operation took (`Store.guard`).

redis-py raises a dozen exception classes for "the server is down, frozen, loading, failing over or
full"; a servicer must see one typed `UnavailableError` (gRPC UNAVAILABLE) instead, and wrong
credentials must read as a misconfiguration, not an outage. `guard` does that mapping around a block
of Redis commands and records the block's duration (`db.client.operation.duration`) with a bounded
`error.type`. Programming errors (WRONGTYPE, a script bug, keys of one command in several slots)
propagate unchanged.

This module sits below `agentmesh.store` (which holds the connection and calls `guard`); it imports
nothing of the store. Domain code only: no grpc (docs/design.md §1).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Final

import redis.exceptions as rexc

from agentmesh.clusterclient import PoolExhaustedError
from agentmesh.config import RedisSettings
from agentmesh.errors import AgentmeshError, UnavailableError
from agentmesh.metrics import Metrics
from agentmesh.storecheck import StoreMisconfiguredError

__all__ = ["AUTH_ERRORS", "UNAVAILABLE_ERRORS", "error_type", "guard", "mapped_error"]

# redis-py raises these when the server is down, frozen, loading, failing over or full. They all
# mean "the store cannot serve this now" (transient for the caller), not "your request is wrong".
UNAVAILABLE_ERRORS: Final[tuple[type[BaseException], ...]] = (
    rexc.ConnectionError,  # includes BusyLoadingError, MaxConnectionsError
    rexc.TimeoutError,
    rexc.InvalidResponse,  # a protocol desync: the connection is unusable
    rexc.ReadOnlyError,  # a replica after failover
    rexc.TryAgainError,
    rexc.ClusterError,  # includes ClusterDownError, MasterDownError, "TTL exhausted" redirections
    rexc.SlotNotCoveredError,  # a primary failed and no replica took over (yet)
    rexc.AskError,  # includes MovedError: a slot moving while a pinned write ran (see Store.durable)
    rexc.OutOfMemoryError,  # noeviction refuses writes when full: loud, unlike eviction
    OSError,  # socket errors redis-py did not wrap (builtin TimeoutError is excluded in guard)
)
# Wrong credentials are not transient: retrying cannot help, an operator must fix the config.
AUTH_ERRORS: Final[tuple[type[BaseException], ...]] = (
    rexc.AuthenticationError,
    rexc.AuthorizationError,
)


@contextlib.asynccontextmanager
async def guard(
    op: str, *, settings: RedisSettings, safe_url: str, metrics: Metrics, blocking: bool = False
) -> AsyncIterator[None]:
    """Maps Redis outages inside the block to UnavailableError("redis unavailable during <op>")
    and bad credentials to StoreMisconfiguredError (`mapped_error`); other errors propagate unchanged.

    Records the block's duration under `op` (a fixed string per call site: a metric label), with
    `error.type` when it failed; a `blocking` read (XREAD BLOCK) is recorded only when it fails,
    since its duration is time spent waiting for news, not Redis latency."""
    started = time.perf_counter()
    error = ""
    try:
        yield
    except TimeoutError:
        # Builtin TimeoutError is the caller's own asyncio.timeout() expiring (redis-py wraps its
        # socket timeouts in redis.exceptions.TimeoutError): a deadline, not an outage.
        error = "deadline"
        raise
    except BaseException as exc:
        error = error_type(exc)
        mapped = mapped_error(op, exc, settings=settings, safe_url=safe_url)
        if mapped is not None:
            raise mapped from exc
        raise
    finally:
        if metrics.enabled and (error or not blocking):
            metrics.redis_operation(op, time.perf_counter() - started, error)


def mapped_error(op: str, exc: BaseException, *, settings: RedisSettings, safe_url: str) -> AgentmeshError | None:
    """The AgentmeshError a Redis failure during `op` maps to; None for anything else (raised unchanged).
    `safe_url` is the Redis URL with its password masked (`agentmesh.store.redact_url`)."""
    if isinstance(exc, PoolExhaustedError):
        return UnavailableError(
            f"redis connection pool exhausted during {op}: all {settings.max_connections} "
            f"connections stayed busy for {settings.pool_timeout_s}s (redis.max_connections)",
            retry_after=settings.pool_timeout_s,
            metadata={"store": "redis", "op": op, "redis_url": safe_url, "reason": "pool_exhausted"},
        )
    if isinstance(exc, AUTH_ERRORS):
        return StoreMisconfiguredError(f"redis at {safe_url} rejected our credentials during {op}: {exc}")
    if isinstance(exc, UNAVAILABLE_ERRORS):
        return UnavailableError(
            f"redis unavailable during {op}: {type(exc).__name__}: {exc}",
            metadata={"store": "redis", "op": op, "redis_url": safe_url},
        )
    if isinstance(exc, rexc.RedisClusterException):
        # The cluster client's own errors: no seed node reachable, no full slot map (an outage,
        # retryable), a node without cluster mode (misconfigured); anything else (keys of one
        # command in several slots) is a programming error and propagates.
        if "not enabled" in str(exc):
            return StoreMisconfiguredError(
                f"redis at {safe_url} is not a Redis Cluster node ({exc}): unset redis.cluster or use a redis:// URL"
            )
        if isinstance(exc.__cause__, UNAVAILABLE_ERRORS) or "not covered" in str(exc):
            return UnavailableError(
                f"redis cluster unavailable during {op}: {exc}",
                metadata={"store": "redis", "op": op, "redis_url": safe_url},
            )
    return None


def error_type(exc: BaseException) -> str:
    """The `error.type` of a failed Redis operation (a bounded set: our kinds, else the class name)."""
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled"
    if isinstance(exc, PoolExhaustedError):
        return "pool_exhausted"
    if isinstance(exc, AUTH_ERRORS):
        return "auth"
    if isinstance(exc, UNAVAILABLE_ERRORS):
        return "unavailable"
    return type(exc).__name__
