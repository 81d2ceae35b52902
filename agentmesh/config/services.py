"""The `services:`, `server:`, `tls:` and `client:` sections: where each service listens and how the
services call each other."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from agentmesh.config.base import MiB, _Section


class ServiceEndpoint(_Section):
    """How one service listens and how the others dial it."""

    host: str = "127.0.0.1"
    port: int = Field(ge=0, le=65535)
    target: str | None = None
    """gRPC target others dial, e.g. `dns:///tool-svc.agentmesh.svc:50053`; default host:port."""
    http_port: int = Field(0, ge=0, le=65535)
    """The service's HTTP listener on `host` (agentmesh/rpc/http.py: Prometheus `/metrics`, and the Connect
    protocol when `server.connect` is on); 0: none."""

    @property
    def dial_target(self) -> str:
        """The target a client should dial."""
        if self.target:
            return self.target
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "[::]") else self.host
        return f"{host}:{self.port}"

    @property
    def bind_address(self) -> str:
        """The address a server binds."""
        return f"{self.host}:{self.port}"

    @property
    def http_bind_address(self) -> str | None:
        """The address the HTTP listener binds, None when it is off."""
        return f"{self.host}:{self.http_port}" if self.http_port else None


class ServicesSettings(_Section):
    """The four services; ports follow docs/design.md §2."""

    dispatcher: ServiceEndpoint = ServiceEndpoint(port=50051)
    context: ServiceEndpoint = ServiceEndpoint(port=50052)
    tool: ServiceEndpoint = ServiceEndpoint(port=50053)
    provider: ServiceEndpoint = ServiceEndpoint(port=50054)

    def endpoint(self, service: str) -> ServiceEndpoint:
        """The endpoint of `dispatcher`, `context`, `tool` or `provider`."""
        value = getattr(self, service, None)
        if not isinstance(value, ServiceEndpoint):
            raise KeyError(f"unknown service {service!r}")
        return value


class ServerSettings(_Section):
    """Limits every grpc.aio server applies (docs/design.md §10)."""

    max_message_bytes: int = Field(32 * MiB, gt=0)
    max_concurrent_rpcs: int = Field(256, gt=0)
    """Beyond this the server sheds load with RESOURCE_EXHAUSTED instead of queueing."""
    max_json_depth: int = Field(64, ge=1, le=500)
    """Deepest nesting of arrays/objects a JSON text in a request (`*_json` fields, tool arguments) may
    have; checked by a bracket scan before parsing, deeper is INVALID_ARGUMENT naming the field."""
    drain_delay_s: float = Field(1.0, ge=0)
    """On SIGTERM: NOT_SERVING at once, still accepting calls this long so balancers notice."""
    grace_period_s: float = Field(10.0, ge=0)
    """Then new calls are refused and in-flight calls get this long to finish."""
    keepalive_time_s: float = Field(30.0, gt=0)
    keepalive_timeout_s: float = Field(10.0, gt=0)
    health_port: int = Field(0, ge=0, le=65535)
    """Health and reflection are also served in plaintext on this port, for probes: when set, and always
    with TLS on (0 then means the service's port + 1000, e.g. 51053 for tool_svc). One value serves
    every pod of a cluster; on one machine leave it 0 (four services would share it)."""
    connect: bool = True
    """Serve the Connect protocol (HTTP/JSON, gRPC-Web) on each service's HTTP listener (`http_port`):
    every dispatcher RPC, the read-only RPCs of the others, through the same edge (agentmesh/rpc/connect.py)."""
    cors_allowed_origins: list[str] = []
    """Browser origins (e.g. `https://console.example.com`) allowed to call the HTTP listener; none by default."""
    http_max_concurrent: int = Field(128, gt=0)
    """HTTP calls (Connect, a service's own routes) in flight on the HTTP listener, counted apart from
    gRPC's `max_concurrent_rpcs`: a slow HTTP client never takes a gRPC slot (agentmesh/rpc/httplimits.py)."""
    http_max_per_identity: int = Field(16, gt=0)
    """HTTP calls in flight per identity token (subject and agent); API keys are bounded by their quotas."""
    http_header_timeout_s: float = Field(10.0, gt=0)
    """A request's line and headers must arrive within this (from their first byte), else the connection
    is closed (slowloris)."""
    http_body_grace_s: float = Field(5.0, gt=0)
    """A request body may take this long before `http_min_body_rate` applies."""
    http_min_body_rate: float = Field(1024.0, gt=0)
    """Bytes per second a request body must keep up with after the grace; slower: 408, connection closed."""
    readiness_interval_s: float = Field(1.0, gt=0)
    """How often the host PINGs Redis for readiness: while it does not answer (within this but at least
    1 s, at most `redis.socket_timeout_s`) each service's health name is NOT_SERVING; "" (liveness)
    stays SERVING."""


class TlsSettings(_Section):
    """mTLS between services and for clients (off by default: in a mesh the sidecar does it; §9)."""

    enabled: bool = False
    ca_file: Path | None = None
    """CA bundle that signs the peers' certificates (servers verify clients with it, clients servers)."""
    cert_file: Path | None = None
    """This process's certificate chain (PEM): served by servers, presented by clients."""
    key_file: Path | None = None
    require_client_cert: bool = True
    """Servers refuse a client that presents no certificate signed by `ca_file`."""
    server_name: str = ""
    """Name to verify in the servers' certificates instead of the dialled host (e.g. one shared name)."""
    reload_check_s: float = Field(1.0, gt=0)
    """Clients look at the files at most this often; a change makes new connections use the new files.
    Servers read them again at every handshake when they changed."""

    @model_validator(mode="after")
    def _files_when_enabled(self) -> TlsSettings:
        if self.enabled and self.ca_file is None:
            raise ValueError("enabled: needs ca_file (and for a server or a client certificate cert_file, key_file)")
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file: give both or neither")
        return self


class ClientSettings(_Section):
    """Channels to the other services."""

    default_timeout_s: float = Field(30.0, gt=0)
    """Deadline of a call made outside any incoming call (an edge call)."""
    retry_max_attempts: int = Field(3, ge=1, le=5)
    """Attempts for UNAVAILABLE on idempotent RPCs only (gRPC caps this at 5)."""
    retry_initial_backoff_s: float = Field(0.1, gt=0)
    retry_max_backoff_s: float = Field(2.0, gt=0)
    load_balancing: Literal["pick_first", "round_robin"] = "pick_first"
    """round_robin over `dns:///` targets spreads calls without a mesh."""
