"""Fixtures of the deploy tests: settings as a container would load them, and no network."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from agentmesh.config import Settings, load_settings


@pytest.fixture
def container_settings(monkeypatch: pytest.MonkeyPatch) -> Callable[[Mapping[str, str], Path], Settings]:
    """`container_settings(env, config_file)`: Settings loaded with exactly `env` as the AGENTMESH_*
    environment (the test's own AGENTMESH_* variables removed), like the container's process."""

    def load(env: Mapping[str, str], config_file: Path) -> Settings:
        for key in list(os.environ):
            if key.startswith(("AGENTMESH_", "OTEL_")):
                monkeypatch.delenv(key)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        return load_settings(config_file)

    return load


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to open a network connection fails the test: schema checks must work offline."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"network access attempted: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
