"""Redis, the only store: connection, failure mapping, Lua scripts, key builders.

Every service reaches Redis through one `Store`. Its guarantees:

- no command hangs: socket and connect timeouts come from `RedisSettings`, the retry is bounded
  (one retry, connection errors only), so a dead or frozen server surfaces within ~2x the timeout;
- connections are bounded: one blocking pool of `redis.max_connections`; a command finding none
  free waits up to `redis.pool_timeout_s`, then fails UnavailableError("redis connection pool
  exhausted ..."), never MaxConnectionsError (what the default, non-blocking pool raises at once);
- every Redis outage becomes a typed `UnavailableError` (via `Store.guard` / `Store.call`, the mapping
  in `agentmesh.storeguard`), never a raw redis-py exception, so servicers map it to gRPC UNAVAILABLE
  without knowing about Redis;
- start-up refuses an evicting Redis (`maxmemory-policy` must be `noeviction`): eviction would
  silently drop tasks, sessions and idempotency records;
- a Redis Cluster is spoken to with redis-py's cluster client (`redis.cluster`, or a
  `redis+cluster://` URL; `agentmesh.clusterclient`), every multi-key script and transaction on one
  hash tag; with `redis.cluster_wait_replicas` every durable write (`Store.script(..., durable=True)`,
  `Store.durable`) is followed by WAIT on its connection and fails UNAVAILABLE unless replicated.

The throwaway local redis-server (CLI, tests) is `agentmesh.dev.localredis`.

Domain code only: this module must not import grpc (docs/design.md §1).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import urllib.parse
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Self, TypeVar

import redis
import redis.asyncio
import redis.exceptions as rexc
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.commands.core import AsyncScript

from agentmesh import storeguard
from agentmesh.clusterclient import CLUSTER_SCHEMES, BoundedCluster, PoolExhaustedError
from agentmesh.config import RedisSettings
from agentmesh.errors import InvalidRequestError, UnavailableError
from agentmesh.lua_source import package_lua
from agentmesh.metrics import Metrics
from agentmesh.storecheck import StoreMisconfiguredError, check_server

__all__ = [
    "SCRIPTS",
    "BucketResult",
    "InvalidKeyError",
    "Keys",
    "PoolExhaustedError",
    "RedisClient",
    "Store",
    "StoreMisconfiguredError",
    "StoreScript",
    "redact_url",
]

log = logging.getLogger("agentmesh.store")

T = TypeVar("T")

# Idle pooled connections are PINGed before reuse after this long, so a connection silently cut by
# a proxy or a Redis restart is replaced instead of failing the next real command.
HEALTH_CHECK_INTERVAL_S: Final = 10


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


class _BoundedPool(redis.asyncio.BlockingConnectionPool):
    """redis-py's blocking pool, its wait timeout raised as `PoolExhaustedError` so `guard` can tell
    "every connection is busy" from "the server is down" (both are a plain ConnectionError there)."""

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]
        except rexc.ConnectionError as exc:
            if isinstance(exc.__cause__, TimeoutError):  # the pool's own wait expired
                raise PoolExhaustedError(f"no connection free within {self.timeout}s") from exc
            raise


class InvalidKeyError(InvalidRequestError, ValueError):
    """An id that would break a key (or its Cluster hash tag). Also a ValueError for plain callers."""


def redact_url(url: str) -> str:
    """`url` safe for logs and error messages: the password (userinfo or ?password=) is masked."""
    try:
        parts = urllib.parse.urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, host = netloc.rsplit("@", 1)
            user = userinfo.split(":", 1)[0]
            netloc = f"{user}:***@{host}" if ":" in userinfo else f"{userinfo}@{host}"
        query = urllib.parse.urlencode(
            [
                (k, "***" if k.lower() == "password" else v)
                for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
            ]
        )
        return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    except ValueError:
        # Unparseable: say nothing rather than risk echoing a secret.
        return "<unparseable redis url>"


# --------------------------------------------------------------------------------------------
# Keys
# --------------------------------------------------------------------------------------------

_MAX_ID_LEN: Final = 512
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def _check_id(kind: str, value: str) -> str:
    # Braces would move or split the Cluster hash tag (Redis hashes the first {...}); whitespace and
    # control characters make keys unreadable in tooling and are never legitimate in our ids.
    if not isinstance(value, str) or not value:
        raise InvalidKeyError(kind, "must be a non-empty string")
    if len(value) > _MAX_ID_LEN:
        raise InvalidKeyError(kind, f"must be at most {_MAX_ID_LEN} characters, got {len(value)}")
    # Every whitespace character but the space is unprintable: three C-speed scans, not a loop in Python
    # (ids are checked on every key built, dozens per task: issue 45).
    if "{" in value or "}" in value or " " in value or not value.isprintable():
        bad = next(ch for ch in value if ch in "{}" or ch.isspace() or not ch.isprintable())
        raise InvalidKeyError(kind, f"must not contain braces, whitespace or control characters: {bad!r}")
    return value


class Keys:
    """Cluster-safe key builders (docs/design.md §2). The `{...}` is a literal Redis Cluster hash tag:
    every key of one task / session / subject hashes to the same slot, so multi-key Lua scripts and
    transactions over them stay valid on a Cluster."""

    def __init__(self, prefix: str = "am") -> None:
        self.prefix = _check_id("key_prefix", prefix)

    def task(self, task_id: str) -> str:
        return f"{self.prefix}:task:{{{_check_id('task_id', task_id)}}}"

    def task_events(self, task_id: str) -> str:
        return f"{self.task(task_id)}:events"

    def task_prompts(self, task_id: str) -> str:
        return f"{self.task(task_id)}:prompts"

    def task_tree(self, root_task_id: str) -> str:
        """The ids of the tasks handoffs created under a root task (a set in the root's slot)."""
        return f"{self.task(root_task_id)}:tree"

    def tasks_stream(self) -> str:
        return f"{self.prefix}:tasks"

    def tasks_index(self) -> str:
        """Every task id scored by its create time (ms): ListTasks' index (dispatcher_svc/task_index.py)."""
        return f"{self.prefix}:tasks:index"

    def session(self, session_id: str, part: str) -> str:
        return f"{self.prefix}:sess:{{{_check_id('session_id', session_id)}}}:{_check_id('part', part)}"

    def payload(self, session_id: str, sha256: str) -> str:
        # Content-addressed: only a real lowercase hex digest is accepted, so a ref can never be a
        # path-like string pointing outside the session's keys.
        if not isinstance(sha256, str) or not _SHA256_HEX.fullmatch(sha256):
            raise InvalidKeyError("sha256", "must be 64 lowercase hex characters")
        return f"{self.prefix}:payload:{{{_check_id('session_id', session_id)}}}:{sha256}"

    def ratelimit(self, subject: str) -> str:
        return f"{self.prefix}:rl:{{{_check_id('subject', subject)}}}"

    def idempotency(self, key: str) -> str:
        return f"{self.prefix}:idem:{{{_check_id('idempotency_key', key)}}}"

    def approval(self, approval_id: str) -> str:
        return f"{self.prefix}:approval:{{{_check_id('approval_id', approval_id)}}}"

    def agent_active(self, agent: str) -> str:
        """The agent's unfinished tasks (ZSET, member task id, score ms): its depth for capability routing."""
        return f"{self.prefix}:agentload:{{{_check_id('agent', agent)}}}:active"

    def agent_outcomes(self, agent: str) -> str:
        """How many of the agent's tasks ended, and ended FAILED, per recent minute (`<minute>:e`, `<minute>:f`)."""
        return f"{self.prefix}:agentload:{{{_check_id('agent', agent)}}}:ended"

    def usage(self, agent: str, day: str) -> str:
        return f"{self.prefix}:usage:{{{_check_id('agent', agent)}}}:{_check_id('day', day)}"


# --------------------------------------------------------------------------------------------
# Lua scripts
# --------------------------------------------------------------------------------------------


TOKEN_BUCKET_LUA: Final = package_lua("agentmesh", "token_bucket")
"""The one token bucket: an exact take (`Store.take_token`) or a lease of up to `most` whole tokens
(tool_svc's per-agent rate limit); see the script's header."""

SCRIPTS: Final[Mapping[str, str]] = {"token_bucket": TOKEN_BUCKET_LUA}


@dataclass(frozen=True, slots=True)
class BucketResult:
    """Outcome of one `Store.take_token`."""

    allowed: bool
    remaining: int
    """Whole tokens left after this take."""
    retry_after_s: float
    """0 when allowed; otherwise how long until `cost` tokens are available."""


# --------------------------------------------------------------------------------------------
# Store
# --------------------------------------------------------------------------------------------

RedisClient = redis.asyncio.Redis | BoundedCluster
"""What `Store.redis` is: the standalone client, or the cluster client (the same commands)."""


def is_cluster_url(url: str, settings: RedisSettings) -> bool:
    """Whether `url` is to be spoken to with the cluster client."""
    return settings.cluster or url.split("://", 1)[0].lower() in CLUSTER_SCHEMES


class StoreScript:
    """A Lua script registered with the Store: `await script(keys=[...], args=[...])` runs it by
    EVALSHA (loading it on NOSCRIPT). A durable script's run is followed by WAIT when
    `redis.cluster_wait_replicas` is set (`Store.durable`)."""

    def __init__(self, store: Store, name: str, source: str, *, durable: bool) -> None:
        self.name = name
        self.source = source
        self.durable = durable
        self._store = store
        self._script: AsyncScript = store.redis.register_script(source)

    @property
    def sha(self) -> str:
        return str(self._script.sha)

    async def __call__(self, keys: Sequence[str] = (), args: Sequence[Any] = ()) -> Any:
        if self.durable and self._store.settings.cluster_wait_replicas and keys:
            return await self._store.durable(keys[0], "EVALSHA", self.sha, len(keys), *keys, *args, script=self)
        return await self._script(keys=list(keys), args=list(args))


class Store:
    """One Redis client plus the mechanisms every service shares. Create with `Store.connect`."""

    def __init__(
        self,
        client: RedisClient,
        *,
        url: str,
        settings: RedisSettings,
        environment: str,
        metrics: Metrics | None = None,
    ) -> None:
        self._redis = client
        self.metrics = metrics if metrics is not None else Metrics()
        """Where `guard` records each operation's duration (`db.client.operation.duration`)."""
        self._safe_url = redact_url(url)
        self.settings = settings
        self.environment = environment
        self.keys = Keys(settings.key_prefix)
        self._scripts: dict[str, StoreScript] = {}

    @property
    def connection_limit(self) -> int:
        """Connections this process holds at most (on a Cluster: commands in flight, so per node)."""
        if isinstance(self._redis, BoundedCluster):
            return self._redis.in_flight_limit
        return int(self._redis.connection_pool.max_connections)

    @property
    def cluster(self) -> BoundedCluster | None:
        """The cluster client when Redis is a Cluster, else None."""
        return self._redis if isinstance(self._redis, BoundedCluster) else None

    @staticmethod
    def client_for(url: str, settings: RedisSettings) -> RedisClient:
        """A redis.asyncio client with agentmesh's timeouts, bounded retry and bounded blocking pool
        (no I/O yet); the client owns the pool and closes it with itself. For a cluster
        (`is_cluster_url`) redis-py's cluster client bounded the same way, per node
        (`agentmesh.clusterclient`)."""
        if is_cluster_url(url, settings):
            try:
                return BoundedCluster.for_url(
                    url,
                    max_connections=settings.max_connections,
                    pool_timeout_s=settings.pool_timeout_s,
                    decode_responses=False,
                    socket_timeout=settings.socket_timeout_s,
                    socket_connect_timeout=settings.connect_timeout_s,
                    health_check_interval=HEALTH_CHECK_INTERVAL_S,
                )
            except (ValueError, rexc.RedisClusterException) as exc:
                raise StoreMisconfiguredError(f"redis cluster URL {redact_url(url)}: {exc}") from None
        # One retry, on connection errors only: enough to replace a stale pooled connection. Not on
        # TimeoutError: the command may have run, and replaying e.g. SET NX would misreport a lease.
        # Worst case per command: 2 attempts x timeout + 0.1 s backoff.
        retry = Retry(ExponentialBackoff(cap=0.1, base=0.05), retries=1, supported_errors=(rexc.ConnectionError,))
        pool = _BoundedPool.from_url(
            url,
            max_connections=settings.max_connections,
            timeout=settings.pool_timeout_s,
            decode_responses=False,
            socket_timeout=settings.socket_timeout_s,
            socket_connect_timeout=settings.connect_timeout_s,
            retry=retry,
            health_check_interval=HEALTH_CHECK_INTERVAL_S,
        )
        return redis.asyncio.Redis.from_pool(pool)

    @classmethod
    async def connect(
        cls,
        settings: RedisSettings,
        environment: str,
        *,
        url: str | None = None,
        check: bool = True,
        metrics: Metrics | None = None,
    ) -> Store:
        """Connects, PINGs, and (with `check`) verifies the server is fit for agentmesh.

        `url` overrides `settings.url` (e.g. the URL of a LocalRedis started by the CLI); `metrics`
        receives the duration of every guarded operation.
        Raises UnavailableError if Redis cannot be reached, StoreMisconfiguredError if it is unfit.
        """
        target = url or settings.url
        if not target:
            raise StoreMisconfiguredError(
                "no Redis URL configured: set redis.url (AGENTMESH_REDIS_URL) or start a local "
                "redis-server with `agentmesh up`"
            )
        store = cls(
            cls.client_for(target, settings), url=target, settings=settings, environment=environment, metrics=metrics
        )
        try:
            async with store.guard("connect"):
                await store._redis.ping()
            if check:
                await store.check_server()
        except BaseException:
            await store.close()
            raise
        return store

    @property
    def redis(self) -> RedisClient:
        """The underlying client for service-specific commands; wrap calls in `guard` / `call`."""
        return self._redis

    @property
    def url(self) -> str:
        """The Redis URL with any password masked."""
        return self._safe_url

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._redis.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # -- failure mapping -----------------------------------------------------------------------

    def guard(self, op: str, *, blocking: bool = False) -> contextlib.AbstractAsyncContextManager[None]:
        """Maps Redis outages inside the block to UnavailableError("redis unavailable during <op>")
        and bad credentials to StoreMisconfiguredError, and records the block's duration under `op`
        (`agentmesh.storeguard.guard`; a `blocking` read is recorded only when it fails)."""
        return storeguard.guard(
            op, settings=self.settings, safe_url=self._safe_url, metrics=self.metrics, blocking=blocking
        )

    async def call(self, op: str, awaitable: Awaitable[T]) -> T:
        """`await store.call("load task", store.redis.hgetall(key))`: one guarded command."""
        async with self.guard(op):
            return await awaitable

    async def ping(self, timeout_s: float | None = None) -> None:
        """PINGs Redis; UnavailableError if it does not answer (within `timeout_s`, when given)."""
        async with self.guard("ping"):
            if timeout_s is None:
                await self._redis.ping()
                return
            try:
                async with asyncio.timeout(timeout_s):
                    await self._redis.ping()
            except TimeoutError as exc:
                raise UnavailableError(
                    f"redis did not answer PING within {timeout_s}s",
                    metadata={"store": "redis", "op": "ping", "redis_url": self._safe_url},
                ) from exc

    # -- start-up check ------------------------------------------------------------------------

    async def check_server(self) -> None:
        """Refuses an evicting Redis (every node of a Cluster), or a Cluster node spoken to with the
        standalone client; warns when persistence is off outside dev or replicas are missing
        (`agentmesh.storecheck`)."""
        await check_server(self)

    def _on(self, node: ClusterNode | None) -> dict[str, Any]:
        return {} if node is None else {"target_nodes": node}

    # -- Lua -----------------------------------------------------------------------------------

    def script(self, name: str, source: str | None = None, *, durable: bool = False) -> StoreScript:
        """The registered script `name` (EVALSHA, reloaded automatically on NOSCRIPT).

        `source` defaults to the built-in `SCRIPTS[name]`. Call it inside `guard`:
        `async with store.guard("fence"): await store.script("fence", SRC)(keys=[...], args=[...])`.
        Every key of a script must share one hash tag (one Cluster slot). `durable`: the script's
        writes are acknowledged to callers as kept (commits, claims, appends): with
        `redis.cluster_wait_replicas` each run waits for the replicas (`durable`).
        """
        if source is None:
            if name not in SCRIPTS:
                raise KeyError(f"no built-in Lua script {name!r}; pass its source")
            source = SCRIPTS[name]
        cached = self._scripts.get(name)
        if cached is not None:
            if cached.source != source or cached.durable != durable:
                raise ValueError(f"Lua script {name!r} is already registered with a different source")
            return cached
        script = self._scripts[name] = StoreScript(self, name, source, durable=durable)
        return script

    async def durable(self, key: str, *command: Any, script: StoreScript | None = None) -> Any:
        """Runs `command`, a write of `key`, and with `redis.cluster_wait_replicas` n > 0 then
        `WAIT n <cluster_wait_timeout_s>` on the same connection (WAIT counts the replicas that have
        this connection's writes): its reply once n replicas hold the write; UnavailableError when
        fewer acknowledged it in time (the write may still be on the primary, and lost if it fails
        over). Without n, just the command. Call it inside `guard`.

        On a Cluster both go to the primary of `key`'s slot in one pipeline; a MOVED or ASK reply
        (the slot moved: the write did not run) is followed, at most twice.
        """
        wanted = self.settings.cluster_wait_replicas
        if not wanted:
            return await self._redis.execute_command(*command)  # type: ignore[no-untyped-call]
        timeout_ms = max(1, int(self.settings.cluster_wait_timeout_s * 1000))
        cluster = self.cluster
        node: ClusterNode | None = None
        if cluster is not None:
            await cluster.initialize()  # a fresh slot map if a failure asked for one
            node = cluster.get_node_from_key(key)
        asking = False
        for _ in range(3):
            pinned = self._on(node)
            pipe = self._redis.pipeline(transaction=False)
            if asking:
                pipe.execute_command("ASKING", **pinned)
            pipe.execute_command(*command, **pinned)
            pipe.execute_command("WAIT", wanted, timeout_ms, **pinned)
            if node is None:
                replies = await pipe.execute(raise_on_error=False)
            else:  # a redirect must not send the write elsewhere without its WAIT
                replies = await pipe.execute(raise_on_error=False, allow_redirections=False)  # type: ignore[call-arg]
            reply, acked = replies[-2], replies[-1]
            asking = False
            if isinstance(reply, rexc.NoScriptError) and script is not None:
                await self._redis.script_load(script.source)  # Redis restarted or failed over
                continue
            if cluster is not None and isinstance(reply, rexc.AskError):  # MovedError is an AskError
                node = cluster.get_node(host=reply.host, port=reply.port)
                asking = not isinstance(reply, rexc.MovedError)
                if not asking or node is None:
                    await cluster.refresh_topology()  # the slot map is stale
                if node is None:
                    raise reply
                continue
            if isinstance(reply, Exception):
                raise reply
            if isinstance(acked, Exception):
                raise acked
            if int(acked) < wanted:
                what = script.name if script is not None else str(command[0])
                raise UnavailableError(
                    f"redis write ({what}) reached {int(acked)} of {wanted} replicas within "
                    f"{self.settings.cluster_wait_timeout_s}s (redis.cluster_wait_replicas): it may be lost "
                    "if its primary fails over; retry",
                    metadata={"store": "redis", "reason": "replication", "replicas_acked": str(int(acked))},
                )
            return reply
        raise UnavailableError(
            f"redis write ({command[0]}) was redirected three times: its slot is moving; retry",
            metadata={"store": "redis", "reason": "slot_moving"},
        )

    async def take_token(
        self,
        key: str,
        capacity: float,
        refill_per_second: float,
        cost: float = 1,
        *,
        now_ms: int | None = None,
    ) -> BucketResult:
        """Atomically takes `cost` tokens from the bucket at `key` (build it with `keys.ratelimit`).

        `now_ms` is for tests; by default Redis TIME is the clock, so replicas never disagree.
        """
        if capacity <= 0 or refill_per_second <= 0:
            raise ValueError("capacity and refill_per_second must be > 0")
        if not 0 < cost <= capacity:
            raise ValueError(f"cost must be in (0, capacity={capacity}], got {cost}")
        args: list[str | int | float] = [capacity, refill_per_second, "" if now_ms is None else now_ms, cost]
        async with self.guard("rate limit"):
            reply = await self.script("token_bucket")(keys=[key], args=args)
        allowed, remaining, retry_ms, _taken = (int(x) for x in reply)
        return BucketResult(allowed=bool(allowed), remaining=remaining, retry_after_s=retry_ms / 1000)
