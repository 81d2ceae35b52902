"""The `redis:` section: where state lives."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from agentmesh.config.base import _Section


class RedisSettings(_Section):
    """Where state lives. Redis is the only store."""

    url: str | None = None
    """None: a local redis-server started by `agentmesh up` or the test fixtures."""
    socket_timeout_s: float = Field(2.0, gt=0)
    """Every command fails within this, never hangs."""
    connect_timeout_s: float = Field(2.0, gt=0)
    require_noeviction: bool = True
    """Refuse to start unless maxmemory-policy is noeviction: an evicting Redis drops tasks."""
    key_prefix: str = "am"
    max_connections: int = Field(64, ge=1)
    """Connections one process holds to Redis at most (a blocking pool; default: one per task of
    `dispatcher.max_concurrent_tasks`). A command finding none free waits for one, see below."""
    pool_timeout_s: float = Field(5.0, gt=0)
    """How long a command waits for a free pooled connection before failing UNAVAILABLE
    ("redis connection pool exhausted"), never MaxConnectionsError and never a hang."""
    cluster: bool = False
    """`url` names seed nodes of a Redis Cluster (redis-py's cluster client; `max_connections` is
    then per node). A `redis+cluster://host:port,host:port/` URL implies it (docs/design.md §10)."""
    cluster_wait_replicas: int = Field(0, ge=0)
    """> 0: every acknowledged write (task commits and claims, queue entries, idempotency claims and
    settlements, approvals, session appends, payloads, registered tools) is followed by
    `WAIT <n> <cluster_wait_timeout_s>` on its connection, and fails UNAVAILABLE unless n replicas
    have it. Also for a standalone primary with replicas."""
    cluster_wait_timeout_s: float = Field(1.0, gt=0)
    """How long a write waits for `cluster_wait_replicas` replicas; below `socket_timeout_s`."""

    @field_validator("url")
    @classmethod
    def _empty_is_unset(cls, url: str | None) -> str | None:
        # `${AGENTMESH_REDIS_URL:-}` in the YAML yields "" when the variable is unset.
        return url or None

    @model_validator(mode="after")
    def _wait_fits_in_a_command(self) -> RedisSettings:
        # WAIT blocks on the connection: past the socket timeout it would read as a dead server.
        if self.cluster_wait_replicas and self.cluster_wait_timeout_s >= self.socket_timeout_s:
            raise ValueError(
                f"cluster_wait_timeout_s ({self.cluster_wait_timeout_s}) must be below socket_timeout_s "
                f"({self.socket_timeout_s}): WAIT blocks the connection"
            )
        return self
