"""Fixtures of the console's tests: one headless Chromium per test (tests/console/browser.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from tests.console.browser import Browser
from tests.contract.tool.fakes import FakeUpstream


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    started = await Browser.start()
    try:
        yield started
    finally:
        await started.close()


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    """A fake HTTP upstream counting the requests (side effects) it receives."""
    server = FakeUpstream().start()
    try:
        yield server
    finally:
        server.stop()
