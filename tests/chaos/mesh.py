"""The chaos harness's mesh: its configuration file, Redis, and the services as separate processes.

The services run through `tests.e2e.dispatcher.conftest.Mesh` (one process per replica, each on
its own port, waited for until SERVING); Redis through `DurableRedis` (AOF on, fsync always, the
same port and data dir across restarts), or with `cluster` a local Redis Cluster of 3 primaries and
3 replicas (tests/rediscluster.py, every node with the same AOF settings; the services with
`redis.cluster_wait_replicas: 1`), whose nodes are killed one at a time (label `redis:<port>`).
A service with two replicas is dialled at both (`services.<svc>.target: ipv4:127.0.0.1:<p1>,
127.0.0.1:<p2>` with `client.load_balancing: round_robin`); two dispatchers each run on their own
port and the harness talks to either.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agentmesh.cli.supervisor import health_status
from agentmesh.config import ToolEntrySettings, ToolsSettings, load_settings
from tests.chaos.policy import TOOLS
from tests.chaos.redis_server import DurableRedis
from tests.chaos.upstreams import PATHS
from tests.e2e.conftest import AUTH_KEY, REPO, free_port
from tests.e2e.dispatcher.conftest import SERVICE_ORDER, Mesh
from tests.rediscluster import LocalRedisCluster

DURABLE_REDIS = ("--appendonly", "yes", "--appendfsync", "always")

AGENT_ID = "chaos"
PERMISSION = "*:chaos.effects:write"
READINESS = {
    "context": "agentmesh.v1.ContextService",
    "tool": "agentmesh.v1.ToolService",
    "provider": "agentmesh.v1.ProviderService",
    "dispatcher": "agentmesh.v1.DispatcherService",
}


@dataclass(frozen=True)
class Timings:
    """What makes a run fit in minutes: ownership, leases and retries, shortened."""

    claim_idle_s: float = 2.0
    claim_interval_s: float = 0.5
    idempotency_lease_s: float = 3.0
    idempotency_heartbeat_s: float = 0.5
    tool_timeout_s: float = 10.0
    call_timeout_s: float = 20.0
    service_retry_attempts: int = 3
    heartbeat_interval_s: float = 1.0
    pack_events: bool = True
    """Not a timing: dispatcher.pack_events (issue 45; on by default), False: one stream entry per event."""


def tool_entry(name: str, upstream_url: str, timings: Timings, options: set[str]) -> dict[str, Any]:
    """The registry entry of one of the three counting tools."""
    entry: dict[str, Any] = {
        "name": name,
        "description": f"Use when the chaos plan says {name}: records one side effect upstream.",
        "input_schema": {
            "type": "object",
            "properties": {
                "seq": {"type": "integer", "minimum": 1},
                "nonce": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
            },
            "required": ["seq", "nonce"],
            "additionalProperties": False,
        },
        "result_type": "structured",
        "permission": {"environment": "*", "group": "chaos.effects", "access": "write"},
        "requires_approval": False,
        "timeout_s": timings.tool_timeout_s,
        "executor": "http",
        "endpoint_url": upstream_url + PATHS[name],
        "method": "PUT" if name == "put_effect" else "POST",
        "idempotent": name == "put_effect",
    }
    if name == "keyed_effect" and "upstream_idempotency_key" in options:
        entry["upstream_idempotency_key"] = True
    return entry


def optional_keys() -> set[str]:
    """The issue-18 configuration keys today's config model accepts (they are being added)."""
    found = set()
    if "upstream_idempotency_key" in ToolEntrySettings.model_fields:
        found.add("upstream_idempotency_key")
    if "idempotency_heartbeat_s" in ToolsSettings.model_fields:
        found.add("idempotency_heartbeat_s")
    return found


def chaos_config(upstream_url: str, timings: Timings, *, round_robin: bool, cluster: bool = False) -> dict[str, Any]:
    options = optional_keys()
    tools: dict[str, Any] = {
        "builtins": ["read_payload"],
        "http_allowlist": [upstream_url + "/"],
        "registry": [tool_entry(name, upstream_url, timings, options) for name in TOOLS],
        # Thousands of calls by one agent in minutes: no rate limit or breaker should decide anything.
        "rate_limit": {"capacity": 1_000_000, "refill_per_second": 1_000_000},
        "breaker": {"failure_threshold": 1_000_000},
        "idempotency_lease_s": timings.idempotency_lease_s,
    }
    if "idempotency_heartbeat_s" in options:
        tools["idempotency_heartbeat_s"] = timings.idempotency_heartbeat_s
    return {
        # A whole configuration of its own: no packaged agent, tool or HTTP port under it.
        "inherit_defaults": False,
        "environment": "dev",
        # On a cluster every acknowledged write is on a replica too (a primary's kill loses none of them).
        **({"redis": {"cluster_wait_replicas": 1}} if cluster else {}),
        "server": {"drain_delay_s": 0, "grace_period_s": 1, "readiness_interval_s": 0.5},
        "client": {"load_balancing": "round_robin" if round_robin else "pick_first"},
        "telemetry": {"log_level": "INFO"},
        "providers": {
            "default_model": "scripted/chaos",
            "backends": [
                {
                    "name": "scripted",
                    "type": "scripted",
                    "rate_limit_per_min": None,
                    "concurrency": 64,
                    "models": [{"name": "chaos", "policy": "tests.chaos.policy:policy"}],
                }
            ],
        },
        "tools": tools,
        "agents": [
            {
                "id": AGENT_ID,
                "description": "Chaos agent: side effects on counting upstreams.",
                "model": "scripted/chaos",
                "tools": list(TOOLS),
                "permissions": [PERMISSION],
                "token_budget": 500_000,
                "max_steps": 10,
            }
        ],
        "dispatcher": {
            "claim_idle_s": timings.claim_idle_s,
            "claim_interval_s": timings.claim_interval_s,
            "heartbeat_interval_s": timings.heartbeat_interval_s,
            "call_timeout_s": timings.call_timeout_s,
            "service_retry_attempts": timings.service_retry_attempts,
            "approval_sweep_interval_s": 1.0,
            **({} if timings.pack_events else {"pack_events": False}),
        },
    }


@dataclass
class Replica:
    service: str
    label: str
    port: int
    generation: int = 0

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"


@dataclass
class ChaosMesh:
    """Redis (or a Redis Cluster) plus one or two replicas of each service; kill, pause and restart
    any of them."""

    workdir: Path
    upstream_url: str
    timings: Timings = Timings()
    dispatchers: int = 1
    tools: int = 1
    contexts: int = 1
    providers: int = 1
    cluster: bool = False
    replicas: dict[str, Replica] = field(default_factory=dict)
    redis: DurableRedis = field(init=False)
    redis_cluster: LocalRedisCluster | None = field(init=False, default=None)
    mesh: Mesh = field(init=False)
    config_file: Path = field(init=False)

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.redis = DurableRedis(self.workdir / "redis", free_port())
        if self.cluster:
            self.redis_cluster = LocalRedisCluster(extra_args=DURABLE_REDIS)
        counts = {
            "dispatcher": self.dispatchers,
            "tool": self.tools,
            "context": self.contexts,
            "provider": self.providers,
        }
        for service in SERVICE_ORDER:
            for i in range(1, counts[service] + 1):
                label = service if counts[service] == 1 else f"{service}-{i}"
                self.replicas[label] = Replica(service, label, free_port())
        ports = {s: self.replicas[s if s in self.replicas else f"{s}-1"].port for s in SERVICE_ORDER}
        services: dict[str, dict[str, Any]] = {s: {"host": "127.0.0.1", "port": p} for s, p in ports.items()}
        round_robin = False
        for service in ("tool", "context", "provider"):
            replica_ports = [r.port for r in self.replicas.values() if r.service == service]
            if len(replica_ports) > 1:
                services[service]["target"] = "ipv4:" + ",".join(f"127.0.0.1:{p}" for p in replica_ports)
                round_robin = True
        self.config_file = self.workdir / "agentmesh-chaos.yaml"
        config = chaos_config(self.upstream_url, self.timings, round_robin=round_robin, cluster=self.cluster)
        self.config_file.write_text(yaml.safe_dump(config, sort_keys=False))
        # Fail here, naming the key, rather than in four service logs.
        load_settings(self.config_file, overrides={"auth": {"key": AUTH_KEY}})
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTMESH_", "OTEL_"))}
        env.update(
            {
                "AGENTMESH_AUTH_KEY": AUTH_KEY,
                "AGENTMESH_CONFIG": str(self.config_file),
                "AGENTMESH_REDIS_URL": "" if self.cluster else self.redis.url,  # the cluster's: start_all
                "AGENTMESH_SERVICES": json.dumps(services),
                "AGENTMESH_TELEMETRY_SPAN_FILE": str(self.workdir / "spans.jsonl"),
                "AGENTMESH_SUPERVISOR_PID": str(os.getpid()),  # the services die with the harness
                "PYTHONPATH": str(REPO),
            }
        )
        self.mesh = Mesh(env=env, ports=ports, tmp=self.workdir)

    # -- processes ------------------------------------------------------------------------------

    def labels(self, service: str) -> list[str]:
        return [r.label for r in self.replicas.values() if r.service == service]

    def dispatcher_targets(self) -> list[str]:
        return [self.replicas[label].target for label in self.labels("dispatcher")]

    def start(self, label: str) -> None:
        """Starts (or restarts) one replica on its own port; returns once it is SERVING."""
        replica = self.replicas[label]
        first = replica.port == self.mesh.ports[replica.service]
        last_error: Exception | None = None
        for _ in range(3):
            replica.generation += 1
            try:
                self.mesh.start(
                    replica.service,
                    label=f"{label}.{replica.generation}",
                    port=None if first else replica.port,
                )
                return
            except (RuntimeError, TimeoutError) as exc:  # e.g. the port not yet released
                last_error = exc
                self.mesh.stop(f"{label}.{replica.generation}", signal.SIGKILL)
                time.sleep(0.5)
        raise RuntimeError(f"{label} does not start: {last_error}")

    def process(self, label: str) -> Any:
        replica = self.replicas[label]
        return self.mesh.processes[f"{label}.{replica.generation}"]

    @property
    def redis_url(self) -> str:
        return self.redis_cluster.url if self.redis_cluster is not None else self.redis.url

    def redis_labels(self) -> list[str]:
        """`redis`, or one `redis:<port>` per node of the cluster."""
        if self.redis_cluster is None:
            return ["redis"]
        return [f"redis:{port}" for port in self.redis_cluster.ports]

    def _node(self, label: str) -> int:
        return int(label.split(":", 1)[1])

    def kill9(self, label: str) -> None:
        if label.startswith("redis:"):
            assert self.redis_cluster is not None
            self.redis_cluster.kill9(self._node(label))
            return
        if label == "redis":
            self.redis.kill9()
            return
        process = self.process(label)
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.wait(10)

    def pause(self, label: str, sig: int) -> None:
        """SIGSTOP or SIGCONT."""
        if label.startswith("redis:"):
            assert self.redis_cluster is not None
            node = self.redis_cluster.node(self._node(label))
            if node.running():
                os.kill(node.pid, sig)
        elif label == "redis":
            self.redis.signal(sig)
        else:
            process = self.process(label)
            if process.poll() is None:
                os.kill(process.pid, sig)

    def restart(self, label: str) -> None:
        if label.startswith("redis:"):
            assert self.redis_cluster is not None
            self.redis_cluster.restart(self._node(label))
        elif label == "redis":
            self.redis.start()
        else:
            self.start(label)

    def start_all(self) -> None:
        if self.redis_cluster is not None:
            self.redis_cluster.start()
            self.mesh.env["AGENTMESH_REDIS_URL"] = self.redis_cluster.url
        else:
            self.redis.start()
        for label in self.replicas:
            self.start(label)

    def running(self, label: str) -> bool:
        if label.startswith("redis:"):
            assert self.redis_cluster is not None
            return self.redis_cluster.node(self._node(label)).running()
        return self.redis.running() if label == "redis" else self.process(label).poll() is None

    def ready(self) -> dict[str, str]:
        """Each replica's readiness (its service's health name: needs Redis)."""
        return {
            label: health_status(r.target, timeout_s=1.0, service=READINESS[r.service])
            for label, r in self.replicas.items()
        }

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            for label in [*self.redis_labels(), *self.replicas]:
                if not self.running(label):
                    self.restart(label)
            states = self.ready()
            cluster_ok = self.redis_cluster is None or self.redis_cluster.healthy()
            if cluster_ok and all(s == "SERVING" for s in states.values()):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the mesh is not ready within {timeout_s}s: {states}")
            time.sleep(0.2)

    def log(self, label: str) -> str:
        replica = self.replicas[label]
        return self.mesh.log(f"{label}.{replica.generation}")

    def stop_all(self) -> None:
        for label in self.replicas:
            process = self.mesh.processes.get(f"{label}.{self.replicas[label].generation}")
            if process is not None and process.poll() is None:
                os.kill(process.pid, signal.SIGCONT)
        self.mesh.stop_all()
        self.redis.stop()
        if self.redis_cluster is not None:
            for port in self.redis_cluster.ports:  # a SIGSTOPped node cannot exit
                self.pause(f"redis:{port}", signal.SIGCONT)
            self.redis_cluster.stop()
