"""Idempotency keys through a real gRPC server: side effects counted by the fake upstream."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.contract.tool.conftest import Client, class_name, error_name, output_json
from tests.contract.tool.fakes import FakeUpstream

CHARGE = {"order_id": "ORD-2025-0001", "amount": 1200}


async def test_concurrent_calls_with_one_key_run_the_side_effect_once(
    tool_service: Any, upstream: FakeUpstream
) -> None:
    c = Client(await tool_service())
    results = await asyncio.gather(*(c.execute("charge", CHARGE, key="task-9:call-1") for _ in range(8)))
    assert upstream.counts["/count"] == 1
    assert {r.output.inline for r in results} == {results[0].output.inline}
    assert output_json(results[0]) == {"n": 1}
    assert sum(r.stats.replayed for r in results) == 7
    later = await c.execute("charge", CHARGE, key="task-9:call-1")
    assert later.stats.replayed and output_json(later) == {"n": 1}
    assert upstream.counts["/count"] == 1
    # Without a key every call runs.
    await c.execute("charge", CHARGE)
    assert upstream.counts["/count"] == 2


async def test_a_repeat_of_a_read_after_a_transient_error_runs_again(tool_service: Any, upstream: FakeUpstream) -> None:
    c = Client(await tool_service())
    upstream.flaky_failures = 3  # more than the read's retries
    first = await c.execute("flaky_read", {}, key="k-flaky")
    assert error_name(first) == "UPSTREAM_UNAVAILABLE" and first.error.retryable
    second = await c.execute("flaky_read", {}, key="k-flaky")
    assert output_json(second)["ok"] is True and not second.stats.replayed
    third = await c.execute("flaky_read", {}, key="k-flaky")
    assert third.stats.replayed and output_json(third) == output_json(second)


async def test_a_write_that_reached_its_upstream_is_never_sent_again(tool_service: Any, upstream: FakeUpstream) -> None:
    """The upstream answered 503: that answer is the call's recorded outcome, replayed, never re-sent."""
    c = Client(await tool_service())
    upstream.flaky_failures = 1
    first = await c.execute("flaky_write", {}, key="k-flaky")
    assert error_name(first) == "UPSTREAM_UNAVAILABLE"
    second = await c.execute("flaky_write", {}, key="k-flaky")
    assert error_name(second) == "UPSTREAM_UNAVAILABLE" and second.stats.replayed
    assert upstream.counts["/flaky"] == 1


async def test_a_deterministic_error_is_replayed(tool_service: Any, upstream: FakeUpstream) -> None:
    c = Client(await tool_service())
    first = await c.execute("get_metrics", {}, key="k-404")
    second = await c.execute("get_metrics", {}, key="k-404")
    assert error_name(first) == error_name(second) == "UPSTREAM_NOT_FOUND"
    assert second.stats.replayed and upstream.counts["/404"] == 1


async def test_same_key_other_arguments_is_a_conflict(tool_service: Any, upstream: FakeUpstream) -> None:
    c = Client(await tool_service())
    assert output_json(await c.execute("charge", CHARGE, key="k-1")) == {"n": 1}
    conflict = await c.execute("charge", {**CHARGE, "amount": 9999}, key="k-1")
    assert error_name(conflict) == "IDEMPOTENCY_CONFLICT" and class_name(conflict) == "CONTRACT"
    assert upstream.counts["/count"] == 1
    # Key order and spacing are not "other arguments".
    same = await c.execute("charge", raw='{ "amount": 1200, "order_id": "ORD-2025-0001" }', key="k-1")
    assert same.stats.replayed


async def test_errors_before_the_key_is_claimed_do_not_take_it(tool_service: Any, upstream: FakeUpstream) -> None:
    c = Client(await tool_service())
    bad = await c.execute("charge", {"order_id": "nope", "amount": 1}, key="k-2")
    assert error_name(bad) == "SCHEMA_INVALID"
    fixed = await c.execute("charge", {"order_id": "ORD-2025-0002", "amount": 1}, key="k-2")
    assert output_json(fixed) == {"n": 1}
