"""The circuit breaker of one replica (tool_svc/breaker.py) on a fake clock: exact thresholds and
boundaries, the open answer's retry hint and fallback, the ramp's admitted share, the census metrics read,
whose breaker a call counts against, and the pipeline step's verdicts. Pure: no Redis."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from agentmesh.errors import AgentmeshError, ErrorCode
from tool_svc.breaker import (
    UPSTREAM_FAULTS,
    Breaker,
    BreakerConfig,
    Breakers,
    CircuitBreaker,
    breaker_owner,
)
from tool_svc.call import CallState
from tool_svc.model import Caller, CallRequest, Permission, ToolDef
from tool_svc.registry import RegisteredTool
from tool_svc.validation import SchemaCheck


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def opened(config: BreakerConfig, clock: Clock) -> Breakers:
    breakers = Breakers(config, clock)
    for _ in range(config.failure_threshold):
        breakers.record("i", "t", success=False)
    assert breakers.state("i", "t") == "open"
    return breakers


def test_the_defaults() -> None:
    assert BreakerConfig() == BreakerConfig(5, 30.0, 30.0, 0.25, 10_000)
    assert Breaker() == Breaker("closed", 0, 0.0, False, 0.0, 0.0)
    assert {ErrorCode.UPSTREAM_TIMEOUT, ErrorCode.UPSTREAM_UNAVAILABLE, ErrorCode.INTERNAL} == UPSTREAM_FAULTS


def test_it_opens_at_exactly_the_threshold_of_consecutive_failures() -> None:
    breakers = Breakers(BreakerConfig(failure_threshold=3), Clock())
    breakers.record("i", "t", success=False)
    breakers.record("i", "t", success=False)
    breakers.record("i", "t", success=True)  # a success resets the count
    breakers.record("i", "t", success=False)
    breakers.record("i", "t", success=False)
    assert breakers.state("i", "t") == "closed"
    breakers.record("i", "t", success=False)
    assert breakers.state("i", "t") == "open"
    assert breakers.state("i", "other") == "closed" and breakers.state("j", "t") == "closed"


def test_the_open_answer_counts_down_and_names_the_fallback() -> None:
    clock = Clock()
    breakers = opened(BreakerConfig(failure_threshold=2, open_s=10), clock)
    clock.now += 4
    refused = breakers.admit("i", "t", fallback_tool="query_logs")
    assert refused is not None and refused.code == ErrorCode.CIRCUIT_OPEN
    assert refused.retry_after == pytest.approx(6.0) and refused.fallback_tool == "query_logs"
    assert refused.message == "circuit breaker for t is open (2 consecutive failures); the call was not run"
    assert breakers.admit("i", "t").fallback_tool == ""  # type: ignore[union-attr]
    clock.now += 5.75  # under a second left: the hint says so, not a rounded-up second
    assert breakers.admit("i", "t").retry_after == pytest.approx(0.25)  # type: ignore[union-attr]


def test_half_open_exactly_at_open_s_admits_one_probe() -> None:
    clock = Clock()
    breakers = opened(BreakerConfig(failure_threshold=1, open_s=10), clock)
    clock.now += 9.999
    assert breakers.state("i", "t") == "open"
    clock.now = 1010.0
    assert breakers.state("i", "t") == "half_open"
    assert breakers.admit("i", "t") is None
    second = breakers.admit("i", "t", fallback_tool="f")
    assert second is not None and second.retry_after == 1.0 and second.fallback_tool == "f"
    assert second.message == (
        "circuit breaker for t is open (a probe call is testing the upstream); the call was not run"
    )


def test_a_probe_that_passes_starts_the_ramp_which_admits_a_growing_share() -> None:
    clock = Clock()
    breakers = opened(BreakerConfig(failure_threshold=1, open_s=10, ramp_s=20, ramp_start_fraction=0.25), clock)
    clock.now += 10
    assert breakers.admit("i", "t") is None
    breakers.record("i", "t", success=True)
    assert breakers.state("i", "t") == "ramping"
    entry = breakers._entries[("i", "t")]
    assert entry.ramp_started == clock.now and entry.credit == 0.0 and not entry.probe_in_flight
    assert breakers.share(entry) == 0.25
    # A quarter: calls 4, 8, 12, ... are admitted (each earns 0.25 credit, one is admitted per whole credit).
    answers = [breakers.admit("i", "t", fallback_tool="f") for _ in range(8)]
    assert [a is None for a in answers] == [False, False, False, True] * 2
    refused = answers[0]
    assert refused is not None and refused.retry_after == 0.5 and refused.fallback_tool == "f"
    assert refused.message == (
        "circuit breaker for t is open (the breaker is letting traffic back in gradually); the call was not run"
    )
    clock.now += 10  # half-way: 0.25 + 0.75 / 2
    assert breakers.share(entry) == pytest.approx(0.625)
    clock.now += 10
    assert breakers.share(entry) == 1.0
    assert breakers.state("i", "t") == "closed" and entry.failures == 0


def test_the_share_never_exceeds_one_nor_drops_below_the_start() -> None:
    clock = Clock()
    breakers = Breakers(BreakerConfig(ramp_s=10, ramp_start_fraction=0.5), clock)
    entry = Breaker(state="ramping", ramp_started=clock.now + 5)  # a clock that stepped back
    assert breakers.share(entry) == 0.5
    entry.ramp_started = clock.now - 100
    assert breakers.share(entry) == 1.0
    assert Breakers(BreakerConfig(ramp_s=0), clock).share(entry) == 1.0


def test_without_a_ramp_a_passing_probe_closes_the_breaker() -> None:
    clock = Clock()
    breakers = opened(BreakerConfig(failure_threshold=1, open_s=1, ramp_s=0), clock)
    clock.now += 1
    assert breakers.admit("i", "t") is None
    breakers.record("i", "t", success=True)
    assert breakers.state("i", "t") == "closed"
    assert all(breakers.admit("i", "t") is None for _ in range(5))


def test_any_failure_while_ramping_reopens_at_once() -> None:
    clock = Clock()
    breakers = opened(BreakerConfig(failure_threshold=5, open_s=1, ramp_s=10), clock)
    clock.now += 1
    breakers.admit("i", "t")
    breakers.record("i", "t", success=True)
    clock.now += 3
    breakers.record("i", "t", success=False)  # one failure, far below the threshold
    entry = breakers._entries[("i", "t")]
    assert entry.state == "open" and entry.opened_at == clock.now and not entry.probe_in_flight


def test_a_released_probe_lets_the_next_one_through_only_when_half_open() -> None:
    clock = Clock()
    breakers = opened(BreakerConfig(failure_threshold=1, open_s=1), clock)
    breakers.release_probe("i", "t")  # open: nothing to release
    breakers.release_probe("i", "unknown")  # no breaker: nothing happens
    assert breakers.admit("i", "t") is not None
    clock.now += 1
    assert breakers.admit("i", "t") is None
    assert breakers.admit("i", "t") is not None
    breakers.release_probe("i", "t")
    assert breakers.admit("i", "t") is None


def test_the_least_recently_used_breaker_goes_first() -> None:
    breakers = Breakers(BreakerConfig(failure_threshold=1, max_entries=2), Clock())
    breakers.record("a", "t", success=False)
    breakers.admit("b", "t")
    breakers.admit("a", "t")  # a is used again: b is now the oldest
    breakers.admit("c", "t")
    assert list(breakers._entries) == [("a", "t"), ("c", "t")]
    assert breakers.state("a", "t") == "open"


def test_the_census_boundaries() -> None:
    clock = Clock()
    breakers = opened(BreakerConfig(failure_threshold=1, open_s=10, ramp_s=10), clock)
    clock.now += 10
    assert breakers.census() == [("t", "half_open", 1)]
    breakers.admit("i", "t")
    breakers.record("i", "t", success=True)
    assert breakers.census() == [("t", "ramping", 1)]
    clock.now += 9.5
    assert breakers.census() == [("t", "ramping", 1)]
    clock.now += 0.5
    assert breakers.census() == [("t", "closed", 1)]


@pytest.mark.parametrize(
    ("caller", "agent_scope", "instance_scope"),
    [
        (Caller(subject="s", agent_id="a", instance="a/task-1"), "a", "a/task-1"),
        (Caller(subject="s", agent_id="a"), "a", "a"),
        (Caller(subject="s", instance="a/task-1"), "a/task-1", "a/task-1"),
        (Caller(subject="s"), "s", "s"),
    ],
)
def test_whose_breaker_a_call_counts_against(caller: Caller, agent_scope: str, instance_scope: str) -> None:
    assert breaker_owner(caller, "agent") == agent_scope
    assert breaker_owner(caller, "instance") == instance_scope


# -- the pipeline step ---------------------------------------------------------------------------------

TOOL = ToolDef(name="t", description="d", input_schema={}, permission=Permission(), fallback_tool="backup")


def make_call(caller: Caller | None = None) -> CallState:
    return CallState(
        CallRequest("c", "t", "{}", "s"),
        caller or Caller(subject="s", agent_id="a", instance="a/task-1"),
        "dev",
        tool=RegisteredTool(TOOL, SchemaCheck.compile({}), None, "config"),
    )


async def run(step: CircuitBreaker, call: CallState, *, executed: bool, error: AgentmeshError | None) -> Any:
    answer = await step(call)
    if answer is None:
        call.executed, call.exec_error = executed, error
        for finalizer in reversed(call.finalizers):
            await finalizer(None)
    return answer


@pytest.mark.parametrize("code", sorted(UPSTREAM_FAULTS))
async def test_the_step_counts_upstream_faults_only(code: ErrorCode) -> None:
    breakers = Breakers(BreakerConfig(failure_threshold=2), Clock())
    step = CircuitBreaker(breakers)
    rejected = AgentmeshError(ErrorCode.UPSTREAM_REJECTED, "404")
    for _ in range(3):
        assert await run(step, make_call(), executed=True, error=rejected) is None
    assert breakers.state("a", "t") == "closed"
    await run(step, make_call(), executed=True, error=AgentmeshError(code, "x"))
    await run(step, make_call(), executed=True, error=AgentmeshError(code, "x"))
    assert breakers.state("a", "t") == "open"
    refused = await step(make_call())
    assert isinstance(refused, AgentmeshError) and refused.code == ErrorCode.CIRCUIT_OPEN
    assert refused.fallback_tool == "backup"


async def test_the_step_keys_by_scope() -> None:
    breakers = Breakers(BreakerConfig(failure_threshold=1), Clock())
    fault = AgentmeshError(ErrorCode.UPSTREAM_TIMEOUT, "x")
    await run(CircuitBreaker(breakers, "instance"), make_call(), executed=True, error=fault)
    assert breakers.state("a/task-1", "t") == "open" and breakers.state("a", "t") == "closed"
    await run(CircuitBreaker(breakers), make_call(), executed=True, error=fault)
    assert breakers.state("a", "t") == "open"


async def test_a_call_that_never_executed_releases_the_probe_without_a_verdict() -> None:
    clock = Clock()
    breakers = opened(BreakerConfig(failure_threshold=1, open_s=1), clock)
    step = CircuitBreaker(breakers, "instance")
    clock.now += 1
    caller = Caller(subject="s", instance="i")
    # Cancelled before the executor ran: neither a pass nor a failure, the next call may probe.
    assert await run(step, make_call(caller), executed=False, error=None) is None
    assert breakers.state("i", "t") == "half_open"
    assert await run(step, make_call(caller), executed=True, error=None) is None
    assert breakers.state("i", "t") == "ramping"


class FailingShared:
    """Shared breakers whose Redis is away after admitting: the verdict cannot be recorded."""

    def __init__(self) -> None:
        self.recorded: list[bool] = []
        self.released = 0

    async def admit(self, instance: str, tool: str, *, fallback_tool: str = "") -> AgentmeshError | None:
        return None

    async def record(self, instance: str, tool: str, *, success: bool) -> None:
        self.recorded.append(success)
        raise AgentmeshError(ErrorCode.UNAVAILABLE, "redis away")

    async def release_probe(self, instance: str, tool: str) -> None:
        self.released += 1
        raise AgentmeshError(ErrorCode.UNAVAILABLE, "redis away")


async def test_a_verdict_that_cannot_be_recorded_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    shared = FailingShared()
    step = CircuitBreaker(shared)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="tool_svc.breaker"):
        await run(step, make_call(), executed=True, error=AgentmeshError(ErrorCode.UPSTREAM_TIMEOUT, "x"))
        await run(step, make_call(), executed=True, error=None)
        await run(step, make_call(), executed=False, error=None)
    assert shared.recorded == [False, True] and shared.released == 1
    warnings = [r.getMessage() for r in caplog.records if r.name == "tool_svc.breaker"]
    assert warnings == ["circuit breaker of t for a not updated: UNAVAILABLE: redis away"] * 3


def test_the_census_counts_breakers_per_tool_and_state_as_they_read_now() -> None:
    clock = Clock()
    breakers = Breakers(BreakerConfig(failure_threshold=1, open_s=10), clock)
    for instance in ("a", "b"):
        breakers.record(instance, "t", success=False)
    breakers.record("c", "t", success=True)
    breakers.record("a", "u", success=False)
    clock.now += 9.5  # not yet open_s: still open
    assert breakers.census() == [("t", "closed", 1), ("t", "open", 2), ("u", "open", 1)]


def test_a_short_ramp_is_still_a_ramp() -> None:
    clock = Clock()
    breakers = opened(BreakerConfig(failure_threshold=1, open_s=1, ramp_s=1, ramp_start_fraction=0.5), clock)
    clock.now += 1
    assert breakers.admit("i", "t") is None
    breakers.record("i", "t", success=True)
    assert breakers.state("i", "t") == "ramping"
    assert breakers.share(breakers._entries[("i", "t")]) == 0.5
    clock.now += 0.5
    assert breakers.share(breakers._entries[("i", "t")]) == 0.75


def test_a_probe_failing_after_a_failed_ramp_reopens_the_breaker() -> None:
    # The ramp's failure reopened it with one failure on record, below the threshold: the next probe that
    # fails must reopen it all the same (the half-open state, not the count, decides).
    clock = Clock()
    breakers = opened(BreakerConfig(failure_threshold=3, open_s=10, ramp_s=10, ramp_start_fraction=1.0), clock)
    clock.now += 10
    assert breakers.admit("i", "t") is None
    breakers.record("i", "t", success=True)
    assert breakers.admit("i", "t") is None  # ramping, the whole share admitted
    breakers.record("i", "t", success=False)
    assert breakers.state("i", "t") == "open"
    clock.now += 10
    assert breakers.admit("i", "t") is None  # the probe
    breakers.record("i", "t", success=False)
    assert breakers.state("i", "t") == "open"
    refused = breakers.admit("i", "t")
    assert refused is not None and refused.retry_after == 10


class RefusingShared:
    """Shared breakers (they ask Redis, so admit is a coroutine) holding the breaker open."""

    async def admit(self, instance: str, tool: str, *, fallback_tool: str = "") -> AgentmeshError | None:
        return AgentmeshError(ErrorCode.CIRCUIT_OPEN, f"{tool} open", retry_after=3, fallback_tool=fallback_tool)


async def test_the_step_answers_the_shared_breakers_refusal() -> None:
    call = make_call()
    refused = await CircuitBreaker(RefusingShared())(call)  # type: ignore[arg-type]
    assert isinstance(refused, AgentmeshError) and refused.code == ErrorCode.CIRCUIT_OPEN
    assert (refused.message, refused.retry_after, refused.fallback_tool) == ("t open", 3, "backup")
    assert call.finalizers == []  # refused: no verdict to record
