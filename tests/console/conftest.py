"""Fixtures of the console's tests: one headless Chromium per test (tests/console/browser.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.console.browser import Browser


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    started = await Browser.start()
    try:
        yield started
    finally:
        await started.close()
