"""The Redis Cluster side of the Store (issue 28): seed-node URLs, and redis-py's cluster client bounded
the way agentmesh bounds its standalone pool (docs/design.md §10).

`redis+cluster://[user:password@]host:port[,host:port...]/[?query]` (or `rediss+cluster://` for TLS)
names seed nodes; `redis.cluster: true` with a plain `redis://` URL means the same with one seed.
`BoundedCluster` is redis-py's public `redis.asyncio.cluster.RedisCluster` with:

- at most `max_connections` commands and pipelines in flight per process (so at most that many
  connections to any node), a command finding none free waiting up to `pool_timeout_s` and then
  failing `PoolExhaustedError` (what the standalone `BlockingConnectionPool` does; the cluster client
  itself would raise MaxConnectionsError at once);
- no client-side replay: redis-py's cluster retries would resend a command after a timeout or a
  broken connection, when it may have run (a fenced commit appending its events twice). MOVED, ASK
  and TRYAGAIN, which mean the command did not run, are still followed. A command that meets a
  failover fails (UNAVAILABLE through `Store.guard`) and the next one reads the new topology.

Domain code only: this module must not import grpc (docs/design.md §1).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import redis.exceptions as rexc
from redis.asyncio.cluster import ClusterNode, ClusterPipeline, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

__all__ = ["CLUSTER_SCHEMES", "BoundedCluster", "ClusterTarget", "PoolExhaustedError", "parse_cluster_url"]

CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
"""URL schemes that name a Redis Cluster, and the plain scheme each node speaks."""
TOPOLOGY_REFRESH_S = 0.25
"""Failing pipelines re-read the slot map at most this often (a failover makes many fail at once)."""


class PoolExhaustedError(rexc.ConnectionError):
    """No pooled connection became free within `redis.pool_timeout_s` (mapped by `Store.guard`)."""


@dataclass(frozen=True)
class ClusterTarget:
    """A cluster URL taken apart: one node URL redis-py parses (credentials, TLS, options) and the
    other seed nodes."""

    first_url: str
    other_seeds: tuple[tuple[str, int], ...]


def _host_port(item: str, default_port: int) -> tuple[str, int]:
    item = item.strip()
    if item.startswith("["):  # [ipv6]:port
        host, _, rest = item[1:].partition("]")
        port = rest.removeprefix(":")
    else:
        host, _, port = item.rpartition(":") if ":" in item else (item, "", "")
    if not host:
        raise ValueError(f"seed node {item!r} has no host")
    try:
        number = int(port) if port else default_port
    except ValueError:
        raise ValueError(f"seed node {item!r} has a bad port") from None
    if not 0 < number < 65536:
        raise ValueError(f"seed node {item!r} has a bad port")
    return host, number


def parse_cluster_url(url: str) -> ClusterTarget:
    """`redis+cluster://a:1,b:2/?x=y` -> redis://a:1/?x=y and the seed (b, 2); a plain URL -> itself.

    ValueError (naming the problem, never the password) for a URL without a host or with a bad port.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError("redis URL has no scheme (redis://, rediss://, redis+cluster://)")
    scheme = CLUSTER_SCHEMES.get(scheme.lower(), scheme.lower())
    netloc, slash, tail = rest.partition("/")
    if not slash:
        netloc, qmark, query = netloc.partition("?")
        tail = f"?{query}" if qmark else ""
        slash = "/"
    userinfo, at, hosts = netloc.rpartition("@")
    seeds = [_host_port(item, 6379) for item in hosts.split(",") if item.strip()]
    if not seeds:
        raise ValueError("redis cluster URL names no seed node")
    host, port = seeds[0]
    shown = f"[{host}]" if ":" in host else host
    first = f"{scheme}://{userinfo}{at}{shown}:{port}{slash}{tail}"
    # Cluster mode has one database: a path of /0 is fine, anything else is refused by redis-py.
    urllib.parse.urlsplit(first)  # raises ValueError on what redis-py could not parse either
    return ClusterTarget(first, tuple(seeds[1:]))


# Set while this task holds an in-flight slot: a pipeline that resends a redirected command through
# the client does not wait for a second slot (it could wait for itself).
_HOLDING: contextvars.ContextVar[bool] = contextvars.ContextVar("agentmesh_cluster_slot", default=False)


@contextlib.asynccontextmanager
async def _closed_under_us() -> AsyncIterator[None]:
    """redis-py 8.1's cluster client, after a timeout or a broken connection to a node, disconnects that
    node's idle connections while another command may just have taken one: that command then fails
    with AttributeError inside redis-py's connection (its socket writer is gone). It is a lost
    connection, and reported as one (UNAVAILABLE through `Store.guard`), not as a bug of ours."""
    try:
        yield
    except AttributeError as exc:
        frame = exc.__traceback__
        while frame is not None and frame.tb_next is not None:
            frame = frame.tb_next
        if frame is None or frame.tb_frame.f_globals.get("__name__") != "redis.asyncio.connection":
            raise
        raise rexc.ConnectionError(f"connection closed under the command by the cluster client: {exc}") from exc


class BoundedCluster(RedisCluster):
    """redis-py's cluster client with a bounded, waiting in-flight limit and no replays (module doc)."""

    def __init__(self, *args: Any, pool_timeout_s: float, **kwargs: Any) -> None:
        kwargs["retry"] = Retry(NoBackoff(), 0)  # no replay: see the module docstring
        super().__init__(*args, **kwargs)
        self.pool_timeout_s = pool_timeout_s
        self.in_flight_limit = int(kwargs.get("max_connections", 100))
        self._slots = asyncio.Semaphore(self.in_flight_limit)
        self._refresh_lock = asyncio.Lock()
        self._refreshed_at = 0.0

    @classmethod
    def for_url(cls, url: str, **kwargs: Any) -> BoundedCluster:
        """The client for a cluster URL (or a plain node URL), not connected yet."""
        target = parse_cluster_url(url)
        seeds = [ClusterNode(host, port) for host, port in target.other_seeds]
        client = cls.from_url(target.first_url, startup_nodes=seeds or None, **kwargs)
        assert isinstance(client, BoundedCluster)
        return client

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Holds one of the `max_connections` in-flight slots, waiting up to `pool_timeout_s`."""
        if _HOLDING.get():
            yield
            return
        try:
            async with asyncio.timeout(self.pool_timeout_s):
                await self._slots.acquire()
        except TimeoutError:
            raise PoolExhaustedError(f"no connection free within {self.pool_timeout_s}s") from None
        # No await from here to the try: a cancellation reaches us inside it, and the slot is released.
        token = _HOLDING.set(True)
        try:
            yield
        finally:
            _HOLDING.reset(token)
            self._slots.release()

    async def refresh_topology(self) -> None:
        """Reads the slot map again (at most every `TOPOLOGY_REFRESH_S`): redis-py does so itself after
        a connection error of a single command, not of a pipeline, which would keep dialling a dead
        primary after its replica took over. Not aclose(), which would also cut the connections
        other commands are using. A failure is left for the next error to retry."""
        if time.monotonic() - self._refreshed_at < TOPOLOGY_REFRESH_S:
            return
        async with self._refresh_lock:
            if time.monotonic() - self._refreshed_at < TOPOLOGY_REFRESH_S:
                return
            self._refreshed_at = time.monotonic()
            with contextlib.suppress(rexc.RedisError, rexc.RedisClusterException, OSError):
                await self.nodes_manager.initialize()

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        async with self.slot(), _closed_under_us():
            return await super().execute_command(*args, **kwargs)

    def pipeline(self, transaction: Any | None = None, shard_hint: Any | None = None) -> ClusterPipeline:
        if shard_hint:
            return super().pipeline(transaction, shard_hint)  # redis-py's own refusal
        return _BoundedPipeline(self, transaction)  # type: ignore[abstract]  # as redis-py builds its own


class _BoundedPipeline(ClusterPipeline):
    """A cluster pipeline that holds one in-flight slot while it runs, and re-reads the topology
    after it met a dead or unreachable node."""

    async def execute(self, raise_on_error: bool = True, allow_redirections: bool = True) -> list[Any]:
        client = self.cluster_client
        assert isinstance(client, BoundedCluster)
        async with client.slot():
            try:
                async with _closed_under_us():
                    replies = await super().execute(raise_on_error, allow_redirections)
            except (rexc.ConnectionError, rexc.TimeoutError):
                await client.refresh_topology()
                raise
        if any(isinstance(reply, rexc.ConnectionError | rexc.TimeoutError) for reply in replies):
            await client.refresh_topology()
        return replies
