"""The whole configuration (`Settings`, every section and the checks across sections) and how it is read:
the YAML layers, `${VAR}` interpolation, `AGENTMESH_*` overrides, errors that name the key and its origin."""

from __future__ import annotations

import json
import os
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ValidationError, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, SettingsError

from agentmesh.config.auth import AuditSettings, AuthSettings
from agentmesh.config.base import DEV_AUTH_KEY, MIN_AUTH_KEY_BYTES, NO_AUTH_KEY, NoAuthKeyError
from agentmesh.config.console import ConsoleSettings
from agentmesh.config.context import ContextSettings
from agentmesh.config.dispatcher import AgentSettings, DispatcherSettings
from agentmesh.config.gateway import GatewaySettings
from agentmesh.config.providers import ProvidersSettings
from agentmesh.config.redis import RedisSettings
from agentmesh.config.services import ClientSettings, ServerSettings, ServicesSettings, TlsSettings
from agentmesh.config.telemetry import TelemetrySettings
from agentmesh.config.tools import ToolsSettings
from agentmesh.configfiles import ConfigError, ConfigFiles, Layer, config_paths, deep_merge, overlay, read_layers
from agentmesh.workflow_config import WorkflowsSettings


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
