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

One module per section of agentmesh.yaml (`redis`, `auth`, `services`, `console`, `telemetry`,
`dispatcher`, `tools`, `providers`, `gateway`, `context`), the shared base in `base`, and the whole
`Settings` with its loading in `settings`; every name is importable from `agentmesh.config`.
"""

from __future__ import annotations

from agentmesh.config.auth import (
    JWT_ALGORITHMS,
    AuditSettings,
    AuthSettings,
    JwtAlgorithm,
    OidcClaimSettings,
    OidcIssuerSettings,
)
from agentmesh.config.base import (
    DEV_AUTH_KEY,
    MIN_AUTH_KEY_BYTES,
    NO_AUTH_KEY,
    MiB,
    NoAuthKeyError,
)
from agentmesh.config.console import (
    ConsoleOidcSettings,
    ConsoleSettings,
)
from agentmesh.config.context import (
    ContextBudgetOverride,
    ContextSettings,
)
from agentmesh.config.dispatcher import (
    CAPABILITY_PATTERN,
    AgentSettings,
    DispatcherSettings,
    HandoffSettings,
    RoutingSettings,
)
from agentmesh.config.gateway import (
    GatewaySettings,
    ModelHealthSettings,
    QuotaLimits,
    SpendAlertSettings,
)
from agentmesh.config.providers import (
    PriceRouteSettings,
    ProviderBackendSettings,
    ProviderModelSettings,
    ProviderRetrySettings,
    ProvidersSettings,
    ProviderTimeoutSettings,
)
from agentmesh.config.redis import (
    RedisSettings,
)
from agentmesh.config.services import (
    ClientSettings,
    ServerSettings,
    ServiceEndpoint,
    ServicesSettings,
    TlsSettings,
)
from agentmesh.config.settings import (
    JsonVariable,
    Settings,
    check_json_variables,
    json_variables,
    load_settings,
    settings_from_layers,
)
from agentmesh.config.telemetry import (
    TelemetrySettings,
)
from agentmesh.config.tools import (
    McpServerSettings,
    McpToolOverride,
    ToolBreakerSettings,
    ToolEntrySettings,
    ToolPermissionSettings,
    ToolRateLimitSettings,
    ToolRetrySettings,
    ToolSandboxSettings,
    ToolsSettings,
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

__all__ = [
    "CAPABILITY_PATTERN",
    "CONFIG_ENV_VAR",
    "DEFAULT_CONFIG_FILE",
    "DEV_AUTH_KEY",
    "JWT_ALGORITHMS",
    "MIN_AUTH_KEY_BYTES",
    "NO_AUTH_KEY",
    "PACKAGED_CONFIG",
    "AgentSettings",
    "AuditSettings",
    "AuthSettings",
    "ClientSettings",
    "ConfigError",
    "ConfigFiles",
    "ConsoleOidcSettings",
    "ConsoleSettings",
    "ContextBudgetOverride",
    "ContextSettings",
    "DispatcherSettings",
    "FoundConfig",
    "GatewaySettings",
    "HandoffSettings",
    "JsonVariable",
    "JwtAlgorithm",
    "Layer",
    "McpServerSettings",
    "McpToolOverride",
    "MiB",
    "ModelHealthSettings",
    "NoAuthKeyError",
    "OidcClaimSettings",
    "OidcIssuerSettings",
    "PriceRouteSettings",
    "ProviderBackendSettings",
    "ProviderModelSettings",
    "ProviderRetrySettings",
    "ProviderTimeoutSettings",
    "ProvidersSettings",
    "QuotaLimits",
    "RedisSettings",
    "RoutingSettings",
    "ServerSettings",
    "ServiceEndpoint",
    "ServicesSettings",
    "Settings",
    "SpendAlertSettings",
    "TelemetrySettings",
    "TlsSettings",
    "ToolBreakerSettings",
    "ToolEntrySettings",
    "ToolPermissionSettings",
    "ToolRateLimitSettings",
    "ToolRetrySettings",
    "ToolSandboxSettings",
    "ToolsSettings",
    "check_json_variables",
    "config_path",
    "config_paths",
    "deep_merge",
    "find_config",
    "interpolate",
    "json_variables",
    "load_settings",
    "overlay",
    "read_layers",
    "settings_from_layers",
]
