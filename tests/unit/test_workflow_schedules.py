"""Schedule ticks (issue 46): cron matching, catch-up and overlap policies, one run id per tick."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agentmesh.workflow_config import Schedule
from dispatcher_svc.workflows.schedules import (
    GRACE_S,
    due_tick,
    next_tick,
    parse_cron,
    previous_tick,
    should_fire,
    tick_run_id,
)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("cron", "after", "expected"),
    [
        ("0 7 * * *", "2026-12-06T03:00", "2026-12-06T07:00"),
        ("0 7 * * *", "2026-12-06T07:00", "2026-12-07T07:00"),  # strictly after
        ("*/15 * * * *", "2026-12-06T03:07", "2026-12-06T03:15"),
        ("30 9 * * 1-5", "2026-12-05T10:00", "2026-12-07T09:30"),  # Saturday -> Monday
        ("0 0 29 2 *", "2026-03-01T00:00", "2028-02-29T00:00"),  # the next leap day
        ("0 12 1 * 0", "2026-12-02T00:00", "2026-12-06T12:00"),  # day 1 OR Sunday
        ("0 12 * * 7", "2026-12-02T00:00", "2026-12-06T12:00"),  # 7 is Sunday too
        ("5,10 8-9 * * *", "2026-12-06T08:06", "2026-12-06T08:10"),
        ("5/20 * * * *", "2026-12-06T08:06", "2026-12-06T08:25"),
        ("0 10-16/3 * * *", "2026-12-06T10:01", "2026-12-06T13:00"),
    ],
)
def test_next_tick(cron: str, after: str, expected: str) -> None:
    assert next_tick(parse_cron(cron), "UTC", at(after)) == at(expected)


def test_a_zone_moves_the_tick() -> None:
    # 07:00 in Berlin in December is 06:00 UTC; in July (summer time) 05:00 UTC.
    assert next_tick(parse_cron("0 7 * * *"), "Europe/Berlin", at("2026-12-06T00:00")) == at("2026-12-06T06:00")
    assert next_tick(parse_cron("0 7 * * *"), "Europe/Berlin", at("2026-07-01T00:00")) == at("2026-07-01T05:00")
    assert previous_tick(parse_cron("0 7 * * *"), "UTC", at("2026-12-06T06:59")) == at("2026-12-05T07:00")


def test_a_date_that_never_comes_is_refused() -> None:
    with pytest.raises(ValueError, match="never fires"):
        next_tick(parse_cron("0 0 31 2 *"), "UTC", at("2026-01-01T00:00"))


def test_catch_up_latest_fires_the_newest_missed_tick_once() -> None:
    daily = Schedule(cron="0 7 * * *", catch_up="latest")
    last = at("2026-12-03T07:00")
    assert due_tick(daily, last, at("2026-12-06T10:00")) == at("2026-12-06T07:00")  # not the 4th and 5th too
    assert due_tick(daily, at("2026-12-06T07:00"), at("2026-12-06T10:00")) is None  # fired already


def test_catch_up_none_fires_only_within_the_grace() -> None:
    daily = Schedule(cron="0 7 * * *", catch_up="none")
    last = at("2026-12-05T07:00")
    assert due_tick(daily, last, at("2026-12-06T07:00:30")) == at("2026-12-06T07:00")
    assert due_tick(daily, last, at(f"2026-12-06T07:0{int(GRACE_S // 60) + 1}")) is None


def test_a_new_schedule_does_not_fire_for_a_tick_long_past() -> None:
    daily = Schedule(cron="0 7 * * *")
    assert due_tick(daily, None, at("2026-12-06T10:00")) is None
    assert due_tick(daily, None, at("2026-12-06T07:00:10")) == at("2026-12-06T07:00")


def test_overlap_and_the_run_id_of_a_tick() -> None:
    assert should_fire(Schedule(cron="* * * * *", overlap="skip"), previous_unfinished=True) is False
    assert should_fire(Schedule(cron="* * * * *", overlap="skip"), previous_unfinished=False) is True
    assert should_fire(Schedule(cron="* * * * *", overlap="allow"), previous_unfinished=True) is True
    tick = at("2026-12-06T07:00")
    assert tick_run_id("incident", tick) == "incident.schedule.20261206T0700Z"
    assert tick_run_id("incident", tick.astimezone()) == tick_run_id("incident", tick)
