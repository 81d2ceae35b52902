"""The Store's start-up check (`Store.check_server`): is this Redis fit for agentmesh?

This module sits below `agentmesh.store`: the store imports it (and re-exports
StoreMisconfiguredError, defined here so both can raise it); it sees the Store only as a type.

- every node (each node of a Cluster: a replica becomes a primary in a failover) must run
  `maxmemory-policy noeviction`, or start-up is refused: eviction silently drops tasks, sessions and
  idempotency records;
- persistence off outside environment dev is warned about;
- a Redis Cluster node spoken to with the standalone client is refused (it would serve only its own
  slots and answer MOVED for the rest);
- a primary with fewer connected replicas than `redis.cluster_wait_replicas` is warned about: every
  durable write fails UNAVAILABLE until enough are connected.

CONFIG may be renamed or forbidden on managed Redis: then INFO is used, and if neither answers we
warn and continue rather than block start-up on an unknowable setting.

Domain code only: this module must not import grpc (docs/design.md §1).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import redis.exceptions as rexc
from redis.asyncio.cluster import ClusterNode

from agentmesh.errors import FailedPreconditionError

if TYPE_CHECKING:  # a type only: the store imports this module, so no runtime import back
    from agentmesh.store import Store

__all__ = ["StoreMisconfiguredError", "check_server"]

log = logging.getLogger("agentmesh.store")


class StoreMisconfiguredError(FailedPreconditionError):
    """Redis is reachable but unfit for agentmesh (evicting policy, bad credentials, no URL)."""

    __module__ = "agentmesh.store"  # its public home: named so in tracebacks and error docs


async def check_server(store: Store) -> None:
    """See the module docstring."""
    cluster = store.cluster
    nodes: list[ClusterNode | None] = [None] if cluster is None else list(cluster.get_nodes())
    for node in nodes:
        where = store.url if node is None else f"{store.url} (node {node.name})"
        policy = await _maxmemory_policy(store, node)
        if policy is None:
            log.warning(
                "could not read maxmemory-policy of redis at %s (CONFIG and INFO unavailable); "
                "make sure it is noeviction, an evicting Redis silently drops agentmesh state",
                where,
            )
        elif policy != "noeviction":
            reason = (
                f"redis at {where}: maxmemory-policy is {policy}; agentmesh requires noeviction "
                "because an evicting Redis silently drops tasks, sessions and idempotency records; "
                "set `maxmemory-policy noeviction`"
            )
            if store.settings.require_noeviction:
                raise StoreMisconfiguredError(reason, metadata={"maxmemory_policy": policy})
            log.warning("%s (continuing: redis.require_noeviction is false)", reason)

        persistent = await _persistence_enabled(store, node)
        if persistent is False and store.environment != "dev":
            log.warning(
                "redis at %s has persistence off (save '' and appendonly no) in environment %s: "
                "a restart loses every task, session and approval",
                where,
                store.environment,
            )
    await _check_topology(store)


async def _check_topology(store: Store) -> None:
    cluster = store.cluster
    if cluster is None and _text((await _info(store, "cluster", None)).get("cluster_enabled", 0)) == "1":
        raise StoreMisconfiguredError(
            f"redis at {store.url} is a Redis Cluster node: set redis.cluster: true or use a "
            "redis+cluster:// URL (the standalone client would reach only this node's slots)"
        )
    wanted = store.settings.cluster_wait_replicas
    if not wanted:
        return
    primaries: list[ClusterNode | None] = [None] if cluster is None else list(cluster.get_primaries())
    for node in primaries:
        info = await _info(store, "replication", node)
        replicas = int(info.get("connected_slaves", 0) or 0)
        if info and replicas < wanted:
            log.warning(
                "redis primary %s has %d connected replicas but redis.cluster_wait_replicas is %d: "
                "durable writes fail UNAVAILABLE until enough replicas are connected",
                store.url if node is None else node.name,
                replicas,
                wanted,
            )


def _on(node: ClusterNode | None) -> dict[str, Any]:
    return {} if node is None else {"target_nodes": node}


async def _info(store: Store, section: str, node: ClusterNode | None) -> Mapping[str, Any]:
    """INFO `section` (of one cluster node), or {} when INFO is renamed or forbidden."""
    try:
        async with store.guard(f"info {section}"):
            info: Mapping[str, Any] = await store.redis.info(section, **_on(node))
    except rexc.ResponseError:
        return {}
    return info


async def _config_get(store: Store, name: str, node: ClusterNode | None) -> str | None:
    """CONFIG GET `name`, or None when CONFIG is renamed/forbidden (a ResponseError)."""
    try:
        async with store.guard(f"config get {name}"):
            reply: Mapping[Any, Any] = await store.redis.config_get(name, **_on(node))
    except rexc.ResponseError:
        return None
    for key, value in reply.items():
        if _text(key) == name:
            return _text(value)
    return None


async def _maxmemory_policy(store: Store, node: ClusterNode | None) -> str | None:
    policy = await _config_get(store, "maxmemory-policy", node)
    if policy is not None:
        return policy
    value = (await _info(store, "memory", node)).get("maxmemory_policy")
    return None if value is None else _text(value)


async def _persistence_enabled(store: Store, node: ClusterNode | None) -> bool | None:
    save = await _config_get(store, "save", node)
    appendonly = await _config_get(store, "appendonly", node)
    if save is None or appendonly is None:
        return None  # unknown: managed Redis usually persists; do not cry wolf
    return bool(save.strip()) or appendonly.strip().lower() == "yes"


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
