"""The idempotency step (tool_svc/idempotency.py) on the test Redis: what a claim stores, what a repeat
gets, when a write is marked sent, what a finished call records, and when a waiting repeat gives up.
Every assertion reads Redis as a second replica would. No wall-clock waits: the step's sleep and clock
are fakes."""

from __future__ import annotations

import asyncio
import logging
import types
from typing import Any

import pytest

from agentmesh.config import RedisSettings
from agentmesh.errors import AgentmeshError, ErrorCode, UnavailableError
from agentmesh.store import Store
from tests.metricsutil import recorded_metrics
from tests.unit.tool.idem_support import (
    APPROVAL_TTL_S,
    DEDUPED,
    IDEMPOTENT,
    LEASE_S,
    READ,
    TTL_S,
    WRITE,
    Env,
    Sleeps,
    finish,
    make_call,
    ok,
    send,
)
from tool_svc import idempotency as idem_module
from tool_svc.approvals import ApprovalBook
from tool_svc.idempotency import (
    Idempotency,
    is_transient,
    ran_output,
    retry_safe,
    settlement_id,
    unknown_delivery,
)
from tool_svc.model import Output, Pending, ToolResult, outcome_from_json


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(idem_module, "time", types.SimpleNamespace(monotonic=fake.monotonic))
    return fake


class TimedSleeps(Sleeps):
    """Sleeps that move the fake clock by what they wait."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock

    async def __call__(self, seconds: float) -> None:
        self.clock.now += seconds
        await super().__call__(seconds)


@pytest.fixture
def env(store: Store, clock: Clock) -> Env:
    return Env(store, ApprovalBook(store, APPROVAL_TTL_S), TimedSleeps(clock), [None])


# -- pure rules --------------------------------------------------------------------------------


def test_transient_outcomes_are_not_replayed() -> None:
    call = make_call("k")
    assert is_transient(None)
    assert not is_transient(ok(call))
    for code in (ErrorCode.INTERNAL, ErrorCode.UNAVAILABLE, ErrorCode.DEADLINE_EXCEEDED, ErrorCode.APPROVAL_EXPIRED):
        assert is_transient(ToolResult("c", "t", AgentmeshError(code, "x")))
    assert is_transient(ToolResult("c", "t", AgentmeshError(ErrorCode.UPSTREAM_REJECTED, "x", retryable=True)))
    assert not is_transient(ToolResult("c", "t", AgentmeshError(ErrorCode.UPSTREAM_REJECTED, "x")))


def test_retry_safe_tools() -> None:
    assert retry_safe(READ) and retry_safe(IDEMPOTENT) and retry_safe(DEDUPED)
    assert not retry_safe(WRITE)


def test_unknown_delivery() -> None:
    assert unknown_delivery(None)
    assert not unknown_delivery(Output("text", inline="x"))
    assert unknown_delivery(AgentmeshError(ErrorCode.OUTCOME_UNKNOWN, "x"))
    assert unknown_delivery(AgentmeshError(ErrorCode.UPSTREAM_TIMEOUT, "x"))
    assert not unknown_delivery(AgentmeshError(ErrorCode.UPSTREAM_TIMEOUT, "x", metadata={"http_status": "504"}))
    assert not unknown_delivery(AgentmeshError(ErrorCode.UPSTREAM_TIMEOUT, "x", metadata={"mcp_error_code": "-1"}))
    assert not unknown_delivery(AgentmeshError(ErrorCode.UPSTREAM_TIMEOUT, "x", metadata={"sent": "no"}))
    assert unknown_delivery(AgentmeshError(ErrorCode.UPSTREAM_TIMEOUT, "x", metadata={"sent": "yes"}))
    assert not unknown_delivery(AgentmeshError(ErrorCode.UPSTREAM_REJECTED, "x"))


def test_settlement_ids_are_per_key_and_generation() -> None:
    import hashlib

    assert settlement_id("k", 3) == "stl_" + hashlib.sha256(b"k\n3").hexdigest()[:32]
    assert len({settlement_id("k", 0), settlement_id("k", 1), settlement_id("k2", 0)}) == 3


def test_ran_output_names_the_settler() -> None:
    out = ran_output("bob")
    assert out.result_type == "structured"
    assert out.inline.startswith('{"note":"the call ran; its output is unknown.')
    assert '"settled":"ran","settled_by":"bob"' in out.inline and '"output":null' in out.inline


def test_lease_and_heartbeat_figures(env: Env) -> None:
    assert env.idem(lease_s=3.0, heartbeat_s=2.0).heartbeat_s == 1.0
    assert env.idem(lease_s=30.0, heartbeat_s=2.0).heartbeat_s == 2.0
    assert env.idem(lease_s=1.5).lease_ms == 1500
    assert env.idem(lease_s=0.0001).lease_ms == 1


# -- claims ------------------------------------------------------------------------------------


async def test_no_key_or_no_store_is_not_claimed(env: Env) -> None:
    call = make_call("")
    assert await env.idem()(call) is None
    assert call.finalizers == [] and call.owner == ""
    idem = env.idem()
    idem.store = None
    call = make_call("k-nostore")
    assert await idem(call) is None
    assert call.finalizers == [] and await env.record("k-nostore") is None


async def test_a_claim_stores_run_with_its_ttl_and_a_heartbeat(env: Env) -> None:
    call = make_call("k1")
    assert await env.idem()(call) is None
    record = await env.record("k1")
    assert record is not None
    assert record == {"s": "run", "h": call.call_sha256, "t": call.owner, "g": 0}
    assert call.owner.startswith("t_") and len(call.owner) == 26 and call.generation == 0
    assert (await env.raw("k1") or b"").startswith(b'{"s":"run","h":')  # compact JSON
    assert TTL_S * 1000 - 5000 < await env.pttl("k1") <= TTL_S * 1000
    assert await env.heartbeat("k1") == call.owner
    assert 25_000 < await env.heartbeat_pttl("k1") <= 30_000
    assert len(call.finalizers) == 1 and len(call.before_send) == 1
    await finish(call, ok(call))


async def test_retry_safe_calls_are_never_marked_sent(env: Env) -> None:
    call = make_call("k-read", READ)
    await env.idem()(call)
    assert call.before_send == []
    await finish(call, ok(call))


async def test_a_finished_call_is_replayed_to_a_repeat(env: Env) -> None:
    first = make_call("k2")
    await env.idem()(first)
    await send(first)
    assert first.sent
    assert (await env.record("k2") or {})["s"] == "sent"
    assert await env.heartbeat("k2") == first.owner
    await finish(first, ok(first, attempts=2))
    record = await env.record("k2")
    assert record is not None and record["s"] == "done" and record["h"] == first.call_sha256
    assert outcome_from_json(record["o"]).outcome == Output("structured", inline='{"charged":5}')
    assert await env.pttl("k2") > TTL_S * 1000 - 5000
    # Left to lapse within its lease (issue 45: no DEL); a repeat of a `done` call never looks at it.
    assert await env.heartbeat("k2") == first.owner and 0 < await env.heartbeat_pttl("k2") <= LEASE_S * 1000

    repeat = make_call("k2", call_id="call-2")
    answer = await env.idem()(repeat)
    assert answer == Output("structured", inline='{"charged":5}')
    assert repeat.stats.replayed and repeat.stats.attempts == 2 and repeat.stats.output_bytes == 13
    assert repeat.finalizers == []


async def test_other_arguments_are_a_conflict(env: Env) -> None:
    first = make_call("k3")
    await env.idem()(first)
    other = make_call("k3", arguments={"amount": 6})
    answer = await env.idem()(other)
    assert isinstance(answer, AgentmeshError) and answer.code == ErrorCode.IDEMPOTENCY_CONFLICT
    assert answer.metadata["idempotency_key"] == "k3" and "other arguments" in answer.message
    await finish(first, ok(first))


async def test_a_transient_outcome_releases_the_key(env: Env) -> None:
    call = make_call("k4", READ)
    await env.idem()(call)
    await finish(call, ToolResult("c", "t", AgentmeshError(ErrorCode.UNAVAILABLE, "x")))
    assert await env.record("k4") is None and await env.heartbeat("k4") is None


async def test_a_write_that_never_left_is_released_on_a_transient_error(env: Env) -> None:
    call = make_call("k5")
    await env.idem()(call)
    await send(call)
    never = AgentmeshError(ErrorCode.UPSTREAM_UNAVAILABLE, "refused", retryable=True, metadata={"sent": "no"})
    await finish(call, ToolResult("c", "t", never))
    assert await env.record("k5") is None


async def test_a_sent_write_with_a_known_error_is_recorded(env: Env) -> None:
    call = make_call("k6")
    await env.idem()(call)
    await send(call)
    refused = AgentmeshError(ErrorCode.UPSTREAM_REJECTED, "402", retryable=True, metadata={"http_status": "402"})
    await finish(call, ToolResult("c", "charge", refused))
    record = await env.record("k6")
    assert record is not None and record["s"] == "done"
    assert outcome_from_json(record["o"]).outcome.code == ErrorCode.UPSTREAM_REJECTED  # type: ignore[union-attr]


async def test_a_pending_approval_holds_the_key_past_its_ttl(env: Env) -> None:
    call = make_call("k7")
    await env.idem()(call)
    pending = Pending("apr_1", "call-1", "charge", "{}", "moves money", call.arguments_sha256, 1.0, "ops-agent")
    await finish(call, ToolResult("call-1", "charge", pending))
    record = await env.record("k7")
    assert record == {"s": "pending", "h": call.call_sha256, "a": "apr_1", "g": 0}
    assert (APPROVAL_TTL_S + 55) * 1000 < await env.pttl("k7") <= (APPROVAL_TTL_S + 60) * 1000


async def test_marking_sent_after_losing_the_claim_refuses_to_send(env: Env) -> None:
    call = make_call("k8")
    await env.idem()(call)
    await env.put("k8", {"s": "run", "h": call.call_sha256, "t": "t_other", "g": 0}, heartbeat="t_other")
    with pytest.raises(AgentmeshError) as caught:
        await send(call)
    assert caught.value.code == ErrorCode.UNAVAILABLE and caught.value.retryable
    assert caught.value.retry_after == 0.5 and "lost its claim" in caught.value.message
    assert not call.sent
    assert (await env.record("k8") or {})["t"] == "t_other"
    await finish(call, None)


async def test_an_old_release_claim_is_waited_for(env: Env) -> None:
    call = make_call("k9")
    await env.put("k9", {"s": "run", "h": call.call_sha256, "t": "t_old"})
    env.left[0] = 0.5
    with pytest.raises(AgentmeshError) as caught:
        await env.idem()(call)
    assert caught.value.code == ErrorCode.UNAVAILABLE and call.owner == ""


async def test_a_dead_owner_that_sent_nothing_is_taken_over(env: Env) -> None:
    call = make_call("k10")
    await env.put("k10", {"s": "run", "h": call.call_sha256, "t": "t_dead", "g": 4})
    assert await env.idem()(call) is None
    assert call.owner.startswith("t_") and call.owner != "t_dead" and call.generation == 4
    assert await env.record("k10") == {"s": "run", "h": call.call_sha256, "t": call.owner, "g": 4}
    assert await env.heartbeat("k10") == call.owner
    assert await env.pttl("k10") > TTL_S * 1000 - 5000
    await finish(call, ok(call))


async def test_a_live_owner_is_not_taken_over(env: Env) -> None:
    call = make_call("k11")
    await env.put("k11", {"s": "run", "h": call.call_sha256, "t": "t_live", "g": 0}, heartbeat="t_live")
    env.left[0] = 0.0
    with pytest.raises(AgentmeshError):
        await env.idem()(call)
    assert (await env.record("k11") or {})["t"] == "t_live"


async def test_a_repeat_waits_then_gets_in_progress(env: Env) -> None:
    first = make_call("k12")
    await env.idem(heartbeat_s=0.7)(first)
    env.left[0] = 1.0  # 0.75 s to wait, the answer's margin kept back
    repeat = make_call("k12", call_id="call-2")
    with pytest.raises(AgentmeshError) as caught:
        await env.idem(heartbeat_s=0.7)(repeat)
    assert env.sleeps.waits == [0.01, 0.02, 0.05, 0.1, 0.2, 0.2, 0.2]
    error = caught.value
    assert error.code == ErrorCode.UNAVAILABLE and error.retryable and error.retry_after == 0.7
    assert error.metadata == {"reason": "in_progress", "idempotency_key": "k12"}
    assert "still in progress" in error.message
    await finish(first, ok(first))


async def test_in_progress_retry_after_has_a_floor_and_keys_are_cut(env: Env) -> None:
    key = "k" * 300
    first = make_call(key)
    await env.idem(heartbeat_s=0.05)(first)
    env.left[0] = 0.1
    with pytest.raises(AgentmeshError) as caught:
        await env.idem(heartbeat_s=0.05)(make_call(key))
    assert env.sleeps.waits == []
    assert caught.value.retry_after == 0.2 and caught.value.metadata["idempotency_key"] == key[:200]
    await finish(first, ok(first))


async def test_without_a_deadline_a_repeat_waits_two_leases(env: Env) -> None:
    first = make_call("k13")
    await env.idem(lease_s=1.0)(first)
    with pytest.raises(AgentmeshError):
        await env.idem(lease_s=1.0)(make_call("k13"))
    assert sum(env.sleeps.waits) >= 2.0 > sum(env.sleeps.waits[:-1])
    await finish(first, ok(first))


async def test_a_repeat_that_waited_gets_the_outcome(env: Env) -> None:
    first = make_call("k14")
    await env.idem()(first)
    env.left[0] = 5.0
    done = ok(first)

    class FinishingSleeps(TimedSleeps):
        async def __call__(self, seconds: float) -> None:
            await super().__call__(seconds)
            if len(self.waits) == 3:
                await finish(first, done)

    env.sleeps = FinishingSleeps(env.sleeps.clock)  # type: ignore[attr-defined]
    answer = await env.idem()(make_call("k14"))
    assert answer == done.outcome and len(env.sleeps.waits) == 3


async def test_pending_repeat_gets_the_same_approval(env: Env) -> None:
    call = make_call("k15")
    pending = await env.approvals.create(call)
    await env.put("k15", {"s": "pending", "h": call.call_sha256, "a": pending.approval_id, "g": 0})
    answer = await env.idem()(make_call("k15"))
    assert isinstance(answer, Pending) and answer.approval_id == pending.approval_id


async def test_pending_record_without_its_approval_is_released(env: Env) -> None:
    call = make_call("k16")
    await env.put("k16", {"s": "pending", "h": call.call_sha256, "a": "apr_gone", "g": 0})
    assert await env.idem()(call) is None  # released, then claimed afresh
    assert (await env.record("k16") or {})["s"] == "run"
    await finish(call, ok(call))


async def test_expired_approval_answers_expired_and_releases(env: Env) -> None:
    book = ApprovalBook(env.store, 0.0)
    call = make_call("k17")
    pending = await book.create(call)
    await env.put("k17", {"s": "pending", "h": call.call_sha256, "a": pending.approval_id, "g": 0})
    answer = await env.idem()(make_call("k17"))
    assert isinstance(answer, AgentmeshError) and answer.code == ErrorCode.APPROVAL_EXPIRED
    assert answer.metadata == {"approval_id": pending.approval_id} and "expired" in answer.message
    assert await env.record("k17") is None


class BeatSleeps:
    """The heartbeat's asyncio.sleep: records each wait and yields once."""

    def __init__(self) -> None:
        self.waits: list[float] = []
        self.beat = asyncio.Event()

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.beat.set()
        await asyncio.sleep(0)

    async def next(self, count: int = 2) -> None:
        """Until the heartbeat has gone round `count` more times (each round: a refresh, then a wait)."""
        for _ in range(count):
            self.beat.clear()
            await asyncio.wait_for(self.beat.wait(), 10)


@pytest.fixture
def beats(monkeypatch: pytest.MonkeyPatch) -> BeatSleeps:
    fake = BeatSleeps()
    proxy = types.SimpleNamespace(
        create_task=asyncio.create_task, sleep=fake.sleep, CancelledError=asyncio.CancelledError
    )
    monkeypatch.setattr(idem_module, "asyncio", proxy)
    return fake


async def test_the_heartbeat_refreshes_until_the_key_is_no_longer_ours(env: Env, beats: BeatSleeps) -> None:
    call = make_call("hb1")
    idem = env.idem(lease_s=3.0, heartbeat_s=2.0)
    await idem(call)
    await env.store.redis.pexpire(env.record_key("hb1") + ":hb", 100)
    await beats.next()
    assert beats.waits and set(beats.waits) == {1.0}
    assert 2500 < await env.heartbeat_pttl("hb1") <= 3000  # refreshed to the whole lease
    assert await env.heartbeat("hb1") == call.owner
    # One loop per replica beats every call in flight (issue 45), not a task per call.
    task = [t for t in asyncio.all_tasks() if t.get_name() == "idempotency heartbeats"]
    assert task == [idem.heartbeats._loop] and idem.heartbeats.beating == {"hb1": call.owner}
    # Another owner took the key: the heartbeat stops by itself and leaves theirs alone.
    await env.put("hb1", {"s": "run", "h": call.call_sha256, "t": "t_other", "g": 0}, heartbeat="t_other")
    await asyncio.wait_for(task[0], 10)  # it returned by itself (nothing else to beat)
    assert idem.heartbeats.beating == {}
    assert await env.heartbeat("hb1") == "t_other"
    await finish(call, None)


async def test_a_conflict_names_the_key_cut(env: Env) -> None:
    key = "task-" + "k" * 295
    first = make_call(key)
    await env.idem()(first)
    answer = await env.idem()(make_call(key, arguments={"amount": 6}))
    assert isinstance(answer, AgentmeshError) and answer.code == ErrorCode.IDEMPOTENCY_CONFLICT
    assert answer.metadata == {"idempotency_key": key[:200]}
    assert answer.message == (
        f"idempotency key {key[:80]!r} was used with other arguments; use a new key for a new call"
    )
    await finish(first, ok(first))


def test_ran_output_is_the_note_the_model_reads() -> None:
    import json

    assert json.loads(ran_output("bob").inline) == {
        "settled": "ran",
        "settled_by": "bob",
        "output": None,
        "note": "the call ran; its output is unknown. Do not repeat it; read the current state if you need it.",
    }


async def test_an_owner_whose_heartbeat_returns_before_the_takeover_keeps_its_key(env: Env) -> None:
    call = make_call("k20")
    claimed = {"s": "run", "h": call.call_sha256, "t": "t_slow", "g": 0}
    await env.put("k20", claimed)  # no heartbeat: it looks dead
    idem = env.idem()
    cas = idem.cas

    async def owner_beats_first(*args: Any, **kwargs: Any) -> bool:
        # Between this replica's look and its takeover, the slow owner's heartbeat comes back.
        await env.store.redis.set(env.record_key("k20") + ":hb", "t_slow", px=30_000)
        return await cas(*args, **kwargs)

    idem.cas = owner_beats_first  # type: ignore[method-assign]
    env.left[0] = 0.0
    with pytest.raises(AgentmeshError) as caught:
        await idem(call)
    assert caught.value.metadata["reason"] == "in_progress" and call.owner == ""
    assert await env.record("k20") == claimed


async def test_a_live_owner_that_sent_opens_no_settlement(env: Env) -> None:
    call = make_call("k21")
    sent = {"s": "sent", "h": call.call_sha256, "t": "t_live", "g": 0}
    await env.put("k21", sent, heartbeat="t_live")
    env.left[0] = 0.0
    with pytest.raises(AgentmeshError) as caught:
        await env.idem()(call)
    assert caught.value.metadata["reason"] == "in_progress"
    assert await env.record("k21") == sent
    # Nothing for an operator to settle: the call is in flight and will record its own outcome.
    with pytest.raises(AgentmeshError) as missing:
        await env.approvals.get(settlement_id("k21", 0))
    assert missing.value.code == ErrorCode.NOT_FOUND


async def test_a_takeover_is_logged_for_operators(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    key = "task-" + "k" * 95
    call = make_call(key)
    await env.put(key, {"s": "run", "h": call.call_sha256, "t": "t_dead", "g": 0})
    with caplog.at_level(logging.INFO, logger="tool_svc.idempotency"):
        assert await env.idem()(call) is None
    logged = [r.getMessage() for r in caplog.records if r.name == "tool_svc.idempotency"]
    assert logged == [f"took over idempotency key {key[:80]} from a dead owner"]
    await finish(call, ok(call))


async def test_a_write_marked_sent_keeps_its_arguments_hash_and_generation(env: Env) -> None:
    call = make_call("k22")
    await env.put("k22", {"s": "run", "h": call.call_sha256, "t": "t_dead", "g": 4})
    await env.idem()(call)  # taken over at generation 4
    assert TTL_S * 1000 - 5000 < await env.pttl("k22") <= TTL_S * 1000  # taken over with the key's TTL
    await send(call)
    # What a replica that finds it dead reads: which arguments, whose, and which settlement to open.
    assert await env.record("k22") == {"s": "sent", "h": call.call_sha256, "t": call.owner, "g": 4}
    await finish(call, ok(call))
    assert TTL_S * 1000 - 5000 < await env.pttl("k22") <= TTL_S * 1000


async def test_a_finished_call_is_kept_exactly_its_ttl(env: Env) -> None:
    call = make_call("k23", READ)
    await env.idem()(call)
    await finish(call, ok(call))
    assert (await env.record("k23") or {})["s"] == "done"
    assert TTL_S * 1000 - 5000 < await env.pttl("k23") <= TTL_S * 1000


async def test_finishing_stops_the_heartbeat(env: Env, beats: BeatSleeps) -> None:
    key = "task-" + "k" * 95
    call, other = make_call(key), make_call("task-other")
    idem = env.idem()
    await idem(call)
    await idem(other)
    beat = idem.heartbeats._loop
    assert beat is not None and not beat.done()
    assert set(idem.heartbeats.beating) == {key, "task-other"}  # one loop for both
    await finish(call, ok(call))
    assert set(idem.heartbeats.beating) == {"task-other"}
    await beats.next()
    assert not beat.done()  # the other call is still in flight
    await finish(other, ok(other))
    await asyncio.wait_for(beat, 10)  # nothing left to beat: the loop ends


async def test_a_heartbeat_that_fails_is_logged_and_goes_on(
    env: Env, beats: BeatSleeps, caplog: pytest.LogCaptureFixture
) -> None:
    key = "hb2-" + "x" * 96  # the log names a key by its first 80 characters
    call = make_call(key)
    idem = env.idem(lease_s=3.0, heartbeat_s=2.0)
    await idem(call)
    record = await env.raw(key)
    # The record's key answers WRONGTYPE for a moment (any Redis error would do): the beat fails.
    swap = "redis.call('DEL', KEYS[1]); redis.call('HSET', KEYS[1], 'x', '1')"  # at once: never seen gone
    await env.store.redis.eval(swap, 1, env.record_key(key))
    with caplog.at_level(logging.WARNING, logger="tool_svc.idempotency"):
        await beats.next()
    logged = [r.getMessage() for r in caplog.records if r.name == "tool_svc.idempotency"]
    assert logged and logged[0].startswith(f"heartbeat of {key[:80]} failed: ") and "WRONGTYPE" in logged[0]
    # Redis answers again: the same heartbeat refreshes the lease.
    await env.store.redis.set(env.record_key(key), record or b"", px=60_000)  # SET replaces the hash
    await env.store.redis.pexpire(env.record_key(key) + ":hb", 100)
    await beats.next()
    assert 2500 < await env.heartbeat_pttl(key) <= 3000
    # Let it stop by itself (its key taken) rather than cancel it in the middle of a Redis call.
    task = idem.heartbeats._loop
    assert task is not None
    await env.put(key, {"s": "run", "h": call.call_sha256, "t": "t_other", "g": 0}, heartbeat="t_other")
    await asyncio.wait_for(task, 10)
    await finish(call, None)


def test_the_default_heartbeat_is_two_seconds(env: Env) -> None:
    idem = Idempotency(env.store, None, ttl_s=TTL_S, lease_s=30.0, approval_ttl_s=APPROVAL_TTL_S)
    assert idem.heartbeat_s == 2.0 and idem.lease_ms == 30_000


async def test_every_write_of_the_step_waits_for_its_replicas(redis_settings: RedisSettings) -> None:
    # With redis.cluster_wait_replicas a claim or a settle is acknowledged only once replicas hold it; the
    # test Redis has none, so each answers UNAVAILABLE (replication) naming its script instead of claiming.
    settings = redis_settings.model_copy(update={"cluster_wait_replicas": 1, "cluster_wait_timeout_s": 0.05})
    async with await Store.connect(settings, "dev") as waiting:
        idem = Idempotency(waiting, None, ttl_s=TTL_S, lease_s=30.0, approval_ttl_s=APPROVAL_TTL_S)
        with pytest.raises(UnavailableError) as claim:
            await idem(make_call("k-wait"))
        assert claim.value.metadata["reason"] == "replication" and "(idempotency_claim)" in claim.value.message
        with pytest.raises(UnavailableError) as settle:
            await idem.cas("k-wait", "t_x", None, 0)
        assert settle.value.metadata["reason"] == "replication" and "(idempotency_cas)" in settle.value.message


async def test_each_redis_operation_of_a_claim_is_measured_under_its_name(env: Env) -> None:
    got = recorded_metrics()
    env.store.metrics = got.metrics

    def ops() -> set[str]:
        return {a["db.operation.name"] for a, _ in got.points("db.client.operation.duration")}

    call = make_call("k24")
    await env.idem()(call)
    assert ops() == {"claim idempotency key"}
    await finish(call, ok(call))
    assert ops() == {"claim idempotency key", "settle idempotency key"}


async def test_a_free_key_is_claimed_with_one_set_and_a_held_one_read_once(env: Env) -> None:
    """Issue 45: SET NX claims a free key (no GET first); `done` leaves the heartbeat to lapse; only a
    held key's claim reads it."""

    async def spent() -> dict[str, int]:
        stats: Any = await env.store.redis.info("commandstats")
        return {n.removeprefix("cmdstat_"): int(v["calls"]) for n, v in stats.items() if n != "cmdstat_info"}

    await env.idem()(make_call("k-warm"))  # the script is loaded
    before = await spent()
    first = make_call("k25")
    assert await env.idem()(first) is None and first.owner
    after = await spent()
    assert {n: after[n] - before.get(n, 0) for n in after if after[n] != before.get(n, 0)} == {"evalsha": 1, "set": 2}
    before = await spent()
    await finish(first, ok(first))
    after = await spent()
    # Settled `done` with one compare-and-set, its heartbeat left to lapse (no DEL).
    assert {n: after[n] - before.get(n, 0) for n in after if after[n] != before.get(n, 0)} == {
        "evalsha": 1,
        "get": 1,
        "set": 1,
    }
    before = await spent()
    repeat = make_call("k25")
    replay = await env.idem()(repeat)
    assert isinstance(replay, Output) and repeat.stats.replayed
    after = await spent()
    delta = {n: after[n] - before.get(n, 0) for n in after if after[n] != before.get(n, 0)}
    assert delta == {"evalsha": 1, "set": 1, "get": 1, "exists": 1}  # the SET NX that failed, then the read


async def test_in_progress_and_lost_claim_answers_name_the_key_cut(env: Env) -> None:
    key = "task-" + "k" * 295
    first = make_call(key)
    await env.idem()(first)
    env.left[0] = 0.0
    with pytest.raises(AgentmeshError) as caught:
        await env.idem()(make_call(key))
    assert caught.value.message == (
        f"a call with idempotency key {key[:80]!r} is still in progress; retry to get its outcome"
    )
    assert TTL_S * 1000 - 5000 < await env.pttl(key) <= TTL_S * 1000
    await env.put(key, {"s": "run", "h": first.call_sha256, "t": "t_other", "g": 0}, heartbeat="t_other")
    with pytest.raises(AgentmeshError) as lost:
        await send(first)
    assert lost.value.message == (
        f"the call with idempotency key {key[:80]!r} lost its claim before it was sent; retry"
    )
    await finish(first, None)


async def test_marking_sent_keeps_the_ttl(env: Env) -> None:
    call = make_call("k25")
    await env.idem()(call)
    await send(call)
    assert (await env.record("k25") or {})["s"] == "sent"
    assert TTL_S * 1000 - 5000 < await env.pttl("k25") <= TTL_S * 1000
    await finish(call, ok(call))
