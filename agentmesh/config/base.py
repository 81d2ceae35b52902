"""Shared by every section: the base model (unknown keys are errors) and the auth-key constants."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from agentmesh.configfiles import ConfigError

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
