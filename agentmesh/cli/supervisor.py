"""Runs the four services as child processes (`agentmesh up`), with a local Redis when none is set.

Children ask the kernel for SIGTERM when their supervisor dies (`die_with_supervisor`), so even a
SIGKILLed `agentmesh up` leaves none behind; a clean stop sends SIGTERM (each service drains
within its grace period) before SIGKILL.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentmesh.config import Settings
from agentmesh.dev.localredis import LocalRedis
from agentmesh.process import SUPERVISOR_PID_ENV

log = logging.getLogger(__name__)

SERVICES: tuple[str, ...] = ("context", "tool", "provider", "dispatcher")
"""Start order: the dispatcher depends on the other three."""


def health_target(settings: Settings, name: str) -> str:
    """Where a service answers health checks: its port, or with TLS on its plaintext health port."""
    endpoint = settings.services.endpoint(name)
    if not (settings.tls.enabled or settings.server.health_port):
        return endpoint.dial_target
    host = "127.0.0.1" if endpoint.host in ("0.0.0.0", "::", "[::]") else endpoint.host
    return f"{host}:{settings.server.health_port or endpoint.port + 1000}"


def health_status(target: str, timeout_s: float = 2.0, service: str = "") -> str:
    """The gRPC health status of a target: SERVING, NOT_SERVING, ..., or UNREACHABLE."""
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout_s)
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else None
            return "UNREACHABLE" if code in (None, grpc.StatusCode.UNAVAILABLE) else str(code.name)
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))


READINESS_NAMES: dict[str, str] = {
    "dispatcher": "agentmesh.v1.DispatcherService",
    "context": "agentmesh.v1.ContextService",
    "tool": "agentmesh.v1.ToolService",
    "provider": "agentmesh.v1.ProviderService",
}
"""The health service name of each service's readiness (SERVING once it can reach Redis)."""


def wait_serving(settings: Settings, name: str, timeout_s: float, on_wait: Callable[[str], None]) -> bool:
    """Waits up to `timeout_s` while a service is unreachable or NOT_SERVING (e.g. while `agentmesh up`
    starts); calls `on_wait(target)` once if it has to wait. True when it is SERVING. Any other answer
    (a proxy without health, say) ends the wait at once: the caller's own call will tell."""
    target = health_target(settings, name)
    deadline = time.monotonic() + timeout_s
    waited = False
    while True:
        status = health_status(target, timeout_s=1.0, service=READINESS_NAMES[name])
        if status not in ("UNREACHABLE", "NOT_SERVING", "SERVICE_UNKNOWN"):
            return status == "SERVING"
        if time.monotonic() >= deadline:
            return False
        if not waited:
            on_wait(target)
            waited = True
        time.sleep(0.2)


def up_state_file(settings: Settings) -> Path:
    """Where `agentmesh up` records the local Redis it started, for commands that read Redis themselves
    (`agentmesh audit`): one file per user and dispatcher port, in the temporary directory."""
    port = settings.services.endpoint("dispatcher").port
    return Path(tempfile.gettempdir()) / f"agentmesh-{os.getuid()}-up-{port}.json"


def local_redis_url(settings: Settings) -> str | None:
    """The URL of the Redis a running `agentmesh up` of this configuration started, else None."""
    path = up_state_file(settings)
    try:
        if path.stat().st_uid != os.getuid():
            return None
        state = json.loads(path.read_text(encoding="utf-8"))
        os.kill(int(state["pid"]), 0)
        url = state["redis_url"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return url if isinstance(url, str) else None


@dataclass
class Supervisor:
    """Starts, watches and stops the services of one `agentmesh up`."""

    settings: Settings
    config_files: Sequence[Path] = ()
    """The configuration files (a base, then overlays), passed to every service as AGENTMESH_CONFIG."""
    services: Sequence[str] = SERVICES
    extra_env: Mapping[str, str] = field(default_factory=dict)
    redis: LocalRedis | None = field(init=False, default=None)
    children: dict[str, subprocess.Popen[bytes]] = field(init=False, default_factory=dict)

    @property
    def redis_url(self) -> str | None:
        """The Redis the services use."""
        return self.redis.url if self.redis else self.settings.redis.url

    def child_env(self) -> dict[str, str]:
        """The environment every service starts with."""
        env = dict(os.environ)
        env.update(self.extra_env)
        if self.redis is not None:
            env["AGENTMESH_REDIS_URL"] = self.redis.url
        if self.config_files:
            env["AGENTMESH_CONFIG"] = os.pathsep.join(str(path) for path in self.config_files)
        env[SUPERVISOR_PID_ENV] = str(os.getpid())
        return env

    def start(self, ready_timeout_s: float = 30.0) -> None:
        """Starts Redis (if needed) and every service, and waits until all are SERVING."""
        if self.settings.redis.url is None:
            self.redis = LocalRedis(own_process_group=True)
            self.redis.start()
            log.info("started local redis-server on %s", self.redis.url)
            with contextlib.suppress(OSError):
                state = {"pid": os.getpid(), "redis_url": self.redis.url}
                up_state_file(self.settings).write_text(json.dumps(state), encoding="utf-8")
        env = self.child_env()
        deadline = time.monotonic() + ready_timeout_s
        # The dispatcher last, once what it calls is SERVING: a task started as soon as the dispatcher
        # answers (`agentmesh up &` then `agentmesh run`) finds every service up.
        first = [name for name in self.services if name != "dispatcher"]
        for group in (first, [name for name in self.services if name == "dispatcher"]):
            for name in group:
                self.children[name] = subprocess.Popen(
                    [sys.executable, "-m", f"{name}_svc"],
                    env=env,
                    start_new_session=True,
                )
            self.wait_ready(max(0.1, deadline - time.monotonic()), group, total_s=ready_timeout_s)

    def wait_ready(self, timeout_s: float, names: Sequence[str] | None = None, *, total_s: float = 0.0) -> None:
        """Waits until every service (or those `names`) answers SERVING; raises if one exits or time runs out."""
        deadline = time.monotonic() + timeout_s
        timeout_s = total_s or timeout_s
        pending = set(self.services if names is None else names)
        while pending:
            for name in sorted(pending):
                code = self.children[name].poll()
                if code is not None:
                    raise RuntimeError(f"{name}_svc exited with code {code} during start-up")
                if health_status(health_target(self.settings, name), timeout_s=1.0) == "SERVING":
                    pending.discard(name)
            if pending and time.monotonic() > deadline:
                raise TimeoutError(f"not SERVING after {timeout_s:.0f}s: {', '.join(sorted(pending))}")
            if pending:
                time.sleep(0.1)

    def target(self, name: str) -> str:
        """The address of a service."""
        return self.settings.services.endpoint(name).dial_target

    def exited(self) -> dict[str, int]:
        """Services that have exited, with their exit codes."""
        return {name: code for name, child in self.children.items() if (code := child.poll()) is not None}

    def stop(self) -> dict[str, int]:
        """SIGTERM every service (reverse start order), wait for the drain, SIGKILL stragglers."""
        grace = self.settings.server.grace_period_s + 5.0
        for name in reversed(list(self.children)):
            child = self.children[name]
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        codes: dict[str, int] = {}
        for name, child in self.children.items():
            try:
                codes[name] = child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("%s_svc did not stop within %.0fs; killing it", name, grace)
                child.kill()
                codes[name] = child.wait()
        if self.redis is not None:
            with contextlib.suppress(OSError):
                up_state_file(self.settings).unlink()
            self.redis.stop()
            self.redis = None
        return codes
