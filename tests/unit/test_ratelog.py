"""RateLimitedLog: a few lines per kind per window, and one line saying how many were suppressed."""

from __future__ import annotations

import logging

import pytest

from agentmesh.rpc.ratelog import RateLimitedLog


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_per_kind_then_a_suppressed_count(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    limited = RateLimitedLog(logging.getLogger("test.ratelog"), burst=3, window_s=10, clock=clock)
    with caplog.at_level(logging.INFO, logger="test.ratelog"):
        logged = [limited.log(("/S/M", "NOT_FOUND"), logging.INFO, "no %s", i) for i in range(100)]
        assert logged == [True] * 3 + [False] * 97
        # Another kind has its own burst.
        assert limited.log(("/S/M", "INVALID_REQUEST"), logging.INFO, "bad")
        clock.now += 10
        assert limited.log(("/S/M", "NOT_FOUND"), logging.INFO, "no %s", "more")
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["no 0", "no 1", "no 2", "bad", "suppressed 97 similar lines in 10s: no more", "no more"]
    assert all(r.exc_info is None for r in caplog.records)


def test_a_disabled_level_costs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    limited = RateLimitedLog(logging.getLogger("test.ratelog.quiet"), burst=1)
    with caplog.at_level(logging.WARNING, logger="test.ratelog.quiet"):
        assert not limited.log("k", logging.INFO, "hidden")
        assert limited.log("k", logging.WARNING, "shown")
    assert [r.getMessage() for r in caplog.records] == ["shown"]
