"""The whole stack in-process (tests/contract/stack.py) for the Python client (clients/python)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentmesh.authenticator import Authenticator
from tests.contract.stack import Stack


@pytest.fixture
async def stack(redis_url: str, tmp_path: Path) -> AsyncIterator[Stack]:
    async with Stack(redis_url, tmp_path) as running:
        yield running


def target(stack: Stack) -> str:
    return f"127.0.0.1:{stack.hosts['dispatcher'][0].port}"


def token(stack: Stack, subject: str = "client-test", roles: tuple[str, ...] = ("operator",)) -> str:
    """A token the stack accepts, as `agentmesh token --role operator` mints one."""
    return Authenticator(stack.hosts["dispatcher"][0].settings.auth, "dev").mint(subject=subject, roles=roles)
