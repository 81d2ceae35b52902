"""Fixtures of the deploy tests: settings as a container would load them, and no network."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from agentmesh.config import Settings, load_settings
from tests.unit.deploy.manifests import K8S_BASE, k8s_deployments, k8s_env, k8s_resources


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


SECRETS = {"agentmesh-secrets/auth-key": "k8s-test-key-" + "s" * 32, "agentmesh-secrets/redis-url": "redis://r:6379/0"}


@pytest.fixture
def pod_settings(container_settings: Any, tmp_path: Path) -> Any:
    """`pod_settings(key, tree)`: the Settings a pod of that Deployment loads (its env + mounted config)."""

    def load(key: str, tree: Path = K8S_BASE) -> Any:
        deployment = k8s_deployments(tree)[key]
        env = k8s_env(deployment, SECRETS, tree)
        mounts = {
            m["mountPath"]: m["name"] for m in deployment["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
        }
        volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
        config_dir = str(Path(env["AGENTMESH_CONFIG"]).parent)
        mounted = k8s_resources("ConfigMap", tree)[volumes[mounts[config_dir]]["configMap"]["name"]]
        config_file = tmp_path / Path(env["AGENTMESH_CONFIG"]).name
        config_file.write_text(mounted["data"][config_file.name], encoding="utf-8")
        return container_settings(env, config_file)

    return load
