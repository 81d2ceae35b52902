"""Schedule ticks of workflows, as pure functions: when a cron fires, which ticks a replica must fire
after a pause, and the run id of a tick.

Exactly once across replicas comes from the run id: it is derived from the workflow and the tick, and
creating a run whose id exists is refused (`RunStore.create`), so two replicas that fire one tick
start one run. Catch-up (`schedule.catch_up`): `latest` fires the newest tick missed while no replica
ran, `none` fires a missed tick only within `GRACE_S` of it. Overlap (`schedule.overlap`): `skip` fires
no tick while the previous scheduled run is unfinished, `allow` fires regardless. Times are wall-clock
times in the schedule's zone; a wall time that a daylight-saving change skips fires at the time
Python's zoneinfo maps it to (fold 0). The driver that calls these is still to come.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from agentmesh.workflow_config import Schedule, check_cron

__all__ = ["GRACE_S", "Cron", "due_tick", "next_tick", "parse_cron", "previous_tick", "should_fire", "tick_run_id"]

GRACE_S = 60.0
"""With catch_up none, a tick is still fired this long after its time (a replica's normal lag)."""
_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_SEARCH_DAYS = 366 * 5  # covers 29 February in every leap cycle


@dataclass(frozen=True)
class Cron:
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    """0 = Sunday (7 is folded into 0)."""
    any_day: bool
    """Day of month is `*`: only the weekday restricts the day (and the other way round)."""
    any_weekday: bool

    def day_matches(self, day: datetime) -> bool:
        if day.month not in self.months:
            return False
        weekday = (day.weekday() + 1) % 7  # Python: Monday 0; cron: Sunday 0
        by_day, by_weekday = day.day in self.days, weekday in self.weekdays
        if self.any_day or self.any_weekday:
            return by_day and by_weekday
        return by_day or by_weekday  # both restricted: cron fires on either


def _field(text: str, low: int, high: int) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        span, _, step = part.partition("/")
        if span == "*":
            first, last = low, high
        else:
            bounds = [int(x) for x in span.split("-")]
            first, last = bounds[0], bounds[-1]
            if len(bounds) == 1 and step:
                last = high  # "5/10": from 5 on, every 10th
        values.update(range(first, last + 1, int(step) if step else 1))
    return frozenset(values)


def parse_cron(expression: str) -> Cron:
    """The sets a five-field cron expression fires on; ValueError as `check_cron` says."""
    check_cron(expression)
    fields = expression.split()
    minutes, hours, days, months, weekdays = (_field(t, lo, hi) for t, (lo, hi) in zip(fields, _RANGES, strict=True))
    return Cron(minutes, hours, days, months, frozenset(w % 7 for w in weekdays), fields[2] == "*", fields[4] == "*")


def next_tick(cron: Cron, zone: str, after: datetime) -> datetime:
    """The first time (UTC) strictly after `after` (aware) when `cron` fires in `zone`."""
    tz = ZoneInfo(zone)
    local = after.astimezone(tz).replace(second=0, microsecond=0, tzinfo=None)
    day = local.replace(hour=0, minute=0)
    for _ in range(_SEARCH_DAYS):
        if cron.day_matches(day):
            for hour in sorted(cron.hours):
                for minute in sorted(cron.minutes):
                    wall = day.replace(hour=hour, minute=minute)
                    when = wall.replace(tzinfo=tz).astimezone(UTC)
                    if when > after:
                        return when
        day += timedelta(days=1)
    raise ValueError("the cron expression never fires (a date that does not exist)")


def previous_tick(cron: Cron, zone: str, at: datetime) -> datetime | None:
    """The last time (UTC) at or before `at` when `cron` fired in `zone` (None: not in five years)."""
    tz = ZoneInfo(zone)
    local = at.astimezone(tz).replace(second=0, microsecond=0, tzinfo=None)
    day = local.replace(hour=0, minute=0)
    for _ in range(_SEARCH_DAYS):
        if cron.day_matches(day):
            for hour in sorted(cron.hours, reverse=True):
                for minute in sorted(cron.minutes, reverse=True):
                    when = day.replace(hour=hour, minute=minute).replace(tzinfo=tz).astimezone(UTC)
                    if when <= at:
                        return when
        day -= timedelta(days=1)
    return None


def due_tick(schedule: Schedule, last: datetime | None, now: datetime) -> datetime | None:
    """The tick to fire now, if any: the newest tick in (last, now] (catch_up latest), or only one
    within GRACE_S of now (catch_up none). `last` None: the schedule never fired; only a tick within
    GRACE_S counts then, so a new schedule does not fire at once for a tick long past."""
    newest = previous_tick(parse_cron(schedule.cron), schedule.timezone, now)
    if newest is None or (last is not None and newest <= last):
        return None
    if schedule.catch_up == "none" or last is None:
        return newest if (now - newest).total_seconds() <= GRACE_S else None
    return newest


def should_fire(schedule: Schedule, previous_unfinished: bool) -> bool:
    """Overlap: `skip` fires no tick while the previous scheduled run is unfinished."""
    return schedule.overlap == "allow" or not previous_unfinished


def tick_run_id(workflow: str, tick: datetime) -> str:
    """The one run id of a tick: every replica that fires it names the same run."""
    return f"{workflow}.schedule.{tick.astimezone(UTC):%Y%m%dT%H%MZ}"
