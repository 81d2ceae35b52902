"""One configuration for every service: `agentmesh.yaml` plus `AGENTMESH_*` environment overrides.

Precedence, highest first: explicit arguments, environment variables, the YAML file, defaults.
Environment variables name a section and a key joined by one underscore (`AGENTMESH_REDIS_URL`
sets `redis.url`, `AGENTMESH_AUTH_KEY` sets `auth.key`); a whole section can be given as JSON
(`AGENTMESH_SERVICES='{"tool": {"port": 6053}}'`). String values in the YAML may reference the
environment as `${VAR}` or `${VAR:-default}`, so secrets never live in the file. Unknown keys, wrong
types and unset secret variables are errors that name the key and the file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
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

CONFIG_ENV_VAR = "AGENTMESH_CONFIG"
DEFAULT_CONFIG_FILE = "agentmesh.yaml"
MiB = 1024 * 1024
DEV_AUTH_KEY = "agentmesh-dev-only-insecure-key"
"""The key the example agentmesh.yaml falls back to; refused outside environment dev."""
MIN_AUTH_KEY_BYTES = 32

_INTERPOLATION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class ConfigError(Exception):
    """The configuration cannot be used; the message names the file and the key."""


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

    @field_validator("url")
    @classmethod
    def _empty_is_unset(cls, url: str | None) -> str | None:
        # `${AGENTMESH_REDIS_URL:-}` in the YAML yields "" when the variable is unset.
        return url or None


class AuthSettings(_Section):
    """Signed identity tokens (DESIGN.md §9)."""

    mode: Literal["enabled", "disabled"] = "enabled"
    key: SecretStr | None = None
    """HMAC-SHA256 key; required when mode is enabled."""
    token_ttl_s: int = Field(3600, gt=0)
    clock_skew_s: int = Field(30, ge=0)


class ServiceEndpoint(_Section):
    """How one service listens and how the others dial it."""

    host: str = "127.0.0.1"
    port: int = Field(ge=0, le=65535)
    target: str | None = None
    """gRPC target others dial, e.g. `dns:///tool-svc.agentmesh.svc:50053`; default host:port."""

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


class ServicesSettings(_Section):
    """The four services; ports follow DESIGN.md §2."""

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
    """Limits every grpc.aio server applies (DESIGN.md §10)."""

    max_message_bytes: int = Field(32 * MiB, gt=0)
    max_concurrent_rpcs: int = Field(256, gt=0)
    """Beyond this the server sheds load with RESOURCE_EXHAUSTED instead of queueing."""
    drain_delay_s: float = Field(1.0, ge=0)
    """On SIGTERM: NOT_SERVING at once, still accepting calls this long so balancers notice."""
    grace_period_s: float = Field(10.0, ge=0)
    """Then new calls are refused and in-flight calls get this long to finish."""
    keepalive_time_s: float = Field(30.0, gt=0)
    keepalive_timeout_s: float = Field(10.0, gt=0)


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
    """Traces and logs (DESIGN.md §8). OTLP is chosen by OTEL_EXPORTER_OTLP_ENDPOINT."""

    span_file: Path = Path("var/spans.jsonl")
    """Where spans go when no OTLP endpoint is set; `agentmesh trace` reads it."""
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_file: Path | None = None
    """JSON log lines go to stderr, and also here when set."""


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
    telemetry: TelemetrySettings = TelemetrySettings()

    @model_validator(mode="after")
    def _auth_is_safe(self) -> Settings:
        auth = self.auth
        if auth.mode == "disabled":
            if self.environment != "dev":
                raise ValueError(f"auth.mode: disabled is allowed in environment dev only, not {self.environment}")
            return self
        key = auth.key.get_secret_value() if auth.key else ""
        if not key:
            raise ValueError("auth.key: required when auth.mode is enabled (set AGENTMESH_AUTH_KEY)")
        if self.environment != "dev" and (key == DEV_AUTH_KEY or len(key.encode()) < MIN_AUTH_KEY_BYTES):
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


def interpolate(value: Any, env: Mapping[str, str], *, where: str, path: str = "") -> Any:
    """Replaces `${VAR}` / `${VAR:-default}` in every string of a parsed YAML tree."""
    if isinstance(value, dict):
        return {k: interpolate(v, env, where=where, path=f"{path}.{k}" if path else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env, where=where, path=f"{path}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        raise ConfigError(f"{where}: {path}: environment variable {name} is not set")

    return _INTERPOLATION.sub(substitute, value)


def config_path(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """The YAML file to read: the argument, else $AGENTMESH_CONFIG, else ./agentmesh.yaml if present."""
    if explicit is not None:
        return Path(explicit)
    from_env = os.environ.get(CONFIG_ENV_VAR)
    if from_env:
        return Path(from_env)
    default = Path(DEFAULT_CONFIG_FILE)
    return default if default.exists() else None


def load_settings(
    path: str | os.PathLike[str] | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Reads the YAML file (if any), interpolates `${VAR}`, applies `AGENTMESH_*` overrides, validates.

    Raises ConfigError naming the file (or the environment variable) and the key on any problem.
    """
    file = config_path(path)
    where = str(file) if file else "defaults"
    data: dict[str, Any] = {}
    if file is not None:
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{file}: cannot read configuration: {exc.strerror or exc}") from exc
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{file}: not valid YAML: {exc}") from exc
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{file}: the top level must be a mapping, got {type(loaded).__name__}")
        data = interpolate(loaded, os.environ, where=where)
    if overrides:
        data = deep_merge(data, dict(overrides))
    try:
        return Settings(**data)
    except ValidationError as exc:
        raise ConfigError(_format_validation_error(exc, where)) from exc
    except SettingsError as exc:
        # Raised for an AGENTMESH_* variable whose JSON does not parse.
        raise ConfigError(f"invalid configuration: {exc}") from exc


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


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """`extra` merged into `base`, recursively for nested mappings (neither is modified)."""
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged
