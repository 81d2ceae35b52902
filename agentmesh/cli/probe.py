"""`agentmesh probe <addr>`: a gRPC health check for container health checks (Docker, Compose).

Exit 0 only when the target answers SERVING; otherwise exit 1 with one typed line on stderr
(`NOT_SERVING`, `SERVICE_UNKNOWN`, `UNREACHABLE`, `TIMEOUT`, `NO_HEALTH_SERVICE`, ...), so a failing
probe says why in `docker inspect`. A failed check is never exit 2, which Docker reserves (the
`agentmesh` command itself exits 2 on an unreadable configuration, the same one the service loaded).
Kubernetes needs none of this: its native `grpc:` probes call the same Health service.
"""

from __future__ import annotations

import argparse
import enum
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentmesh.config import ConfigError, Settings
from agentmesh.rpc.tls import sync_channel

__all__ = ["ProbeResult", "ProbeState", "positive_seconds", "probe", "run_probe"]


class ProbeState(enum.Enum):
    """The outcome of one health check."""

    SERVING = "SERVING"
    NOT_SERVING = "NOT_SERVING"
    """The server answers but reports NOT_SERVING (starting, or draining after SIGTERM)."""
    SERVICE_UNKNOWN = "SERVICE_UNKNOWN"
    """The server does not know the service name asked for (gRPC NOT_FOUND)."""
    UNREACHABLE = "UNREACHABLE"
    """Nothing answers at the address (connection refused, DNS failure)."""
    TIMEOUT = "TIMEOUT"
    """No answer within the timeout."""
    NO_HEALTH_SERVICE = "NO_HEALTH_SERVICE"
    """The server answers gRPC but has no grpc.health.v1.Health service."""
    UNKNOWN = "UNKNOWN"
    """Any other answer (status UNKNOWN, or an RPC error not listed above)."""


_ERRORS = {
    grpc.StatusCode.NOT_FOUND: ProbeState.SERVICE_UNKNOWN,
    grpc.StatusCode.UNAVAILABLE: ProbeState.UNREACHABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED: ProbeState.TIMEOUT,
    grpc.StatusCode.UNIMPLEMENTED: ProbeState.NO_HEALTH_SERVICE,
}


@dataclass(frozen=True)
class ProbeResult:
    """One health check: the state and a one-line explanation."""

    state: ProbeState
    target: str
    service: str
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.state is ProbeState.SERVING

    def line(self) -> str:
        """`<STATE>: <target> [service <name>][: detail]`."""
        what = f"{self.target} service {self.service}" if self.service else self.target
        return f"{self.state.value}: {what}" + (f": {self.detail}" if self.detail else "")


def probe(target: str, service: str = "", timeout_s: float = 2.0, settings: Settings | None = None) -> ProbeResult:
    """Calls grpc.health.v1.Health/Check once on `target` (host:port or any gRPC target), over mTLS
    when `settings.tls` is enabled (the config's, or `--ca/--cert/--key`)."""
    if timeout_s <= 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout_s}")
    with sync_channel(target, settings) if settings is not None else grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout_s)
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
            details = (exc.details() if isinstance(exc, grpc.Call) else "") or code.name
            return ProbeResult(_ERRORS.get(code, ProbeState.UNKNOWN), target, service, details)
    name = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    state = ProbeState.__members__.get(name, ProbeState.UNKNOWN)
    return ProbeResult(state, target, service, "" if state is ProbeState.SERVING else f"health status {name}")


def positive_seconds(text: str) -> float:
    """argparse type of `--timeout`: a number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0 seconds, got {text}")
    return value


def run_probe(
    target: str, service: str = "", timeout_s: float = 2.0, settings: Settings | None = None
) -> tuple[int, str]:
    """The exit code (0 SERVING, else 1) and the line `agentmesh probe` prints."""
    try:
        result = probe(target, service, timeout_s, settings)
    except ConfigError as exc:  # unreadable TLS files: say which, as a failed check (never Docker's 2)
        return 1, f"{ProbeState.UNKNOWN.value}: {target}: {exc}"
    return (0 if result.ok else 1), result.line()
