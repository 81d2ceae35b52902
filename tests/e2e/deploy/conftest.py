"""Fixtures of the deploy e2e tests: the image installed once per run, Redis, the Compose shell."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import AUTH_KEY
from tests.e2e.deploy.stack import Image, install_image

SHELL = {"AGENTMESH_AUTH_KEY": AUTH_KEY}
"""The environment `docker compose up` is run from: only the key it passes through."""


@pytest.fixture(scope="session")
def image(tmp_path_factory: pytest.TempPathFactory) -> Image:
    """deploy/Dockerfile's install, done once per test run (about two seconds)."""
    return install_image(tmp_path_factory.mktemp("image"))


@pytest.fixture
def shell() -> dict[str, str]:
    return dict(SHELL)


def log_tail(path: Path, lines: int = 40) -> str:
    text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
    return "\n".join(text.splitlines()[-lines:])
