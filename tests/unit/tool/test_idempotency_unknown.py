"""Unknown outcomes of the idempotency step (tool_svc/idempotency.py) on the test Redis: a sent write whose
effect is unknown opens a settlement and is never re-sent until an operator settles it; RAN is recorded,
NOT_RAN re-sends once under the next generation. Checked through what Redis holds afterwards."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from agentmesh.errors import AgentmeshError, ErrorCode, FailedPreconditionError
from agentmesh.store import Store
from tests.metricsutil import recorded_metrics
from tests.unit.tool.idem_support import (
    APPROVAL_TTL_S,
    READ,
    TTL_S,
    Env,
    Sleeps,
    finish,
    make_call,
    ok,
    send,
)
from tool_svc.approvals import ApprovalBook
from tool_svc.call import CallState
from tool_svc.idempotency import settlement_id
from tool_svc.model import Output, Pending, ToolResult, outcome_from_json

TIMEOUT = AgentmeshError(ErrorCode.UPSTREAM_TIMEOUT, "no answer in 10s")


@pytest.fixture
def env(store: Store) -> Env:
    return Env(store, ApprovalBook(store, APPROVAL_TTL_S), Sleeps(), [0.0])


async def sent_then_timed_out(env: Env, key: str) -> tuple[AgentmeshError, str]:
    call = make_call(key)
    await env.idem()(call)
    await send(call)
    answer = await env.idem().after(call, TIMEOUT)
    assert isinstance(answer, AgentmeshError)
    await finish(call, ToolResult("call-1", "charge", answer))
    return answer, call.call_sha256


async def test_a_sent_write_that_timed_out_answers_outcome_unknown(env: Env) -> None:
    answer, sha = await sent_then_timed_out(env, "u1")
    sid = settlement_id("u1", 0)
    assert answer.code == ErrorCode.OUTCOME_UNKNOWN
    assert answer.metadata["settlement_id"] == sid and answer.metadata["idempotency_key"] == "u1"
    assert "(cause: UPSTREAM_TIMEOUT: no answer in 10s)" in answer.message
    assert await env.record("u1") == {"s": "unknown", "h": sha, "a": sid, "g": 0}
    assert TTL_S * 1000 - 5000 < await env.pttl("u1") <= TTL_S * 1000
    assert await env.heartbeat("u1") is None
    settlement = await env.approvals.get(sid)
    assert settlement.kind == "settlement" and settlement.state == "pending"


async def test_a_repeat_is_not_resent_while_unsettled(env: Env) -> None:
    await sent_then_timed_out(env, "u2")
    repeat = make_call("u2", call_id="call-2")
    answer = await env.idem()(repeat)
    assert isinstance(answer, AgentmeshError) and answer.code == ErrorCode.OUTCOME_UNKNOWN
    assert answer.metadata["settlement_id"] == settlement_id("u2", 0)
    assert repeat.owner == "" and repeat.finalizers == []


async def test_settled_ran_is_recorded_and_replayed(env: Env) -> None:
    await sent_then_timed_out(env, "u3")
    await env.settle(settlement_id("u3", 0), "ran")
    env.left[0] = 5.0  # the first look records RAN, the next replays it
    answer = await env.idem()(make_call("u3", call_id="call-2"))
    assert isinstance(answer, Output) and '"settled_by":"bob"' in answer.inline
    record = await env.record("u3")
    assert record is not None and record["s"] == "done"
    assert outcome_from_json(record["o"]).outcome == answer
    assert await env.pttl("u3") > TTL_S * 1000 - 5000


async def test_settled_not_ran_resends_once_under_the_next_generation(env: Env) -> None:
    _, sha = await sent_then_timed_out(env, "u4")
    sid = settlement_id("u4", 0)
    await env.settle(sid, "not_ran")
    resend = make_call("u4", approved_id=sid)
    assert await env.idem()(resend) is None
    assert resend.owner == sid and resend.generation == 1
    assert await env.record("u4") == {"s": "run", "h": sha, "t": sid, "g": 1}
    assert await env.heartbeat("u4") == sid
    await send(resend)
    answer = await env.idem().after(resend, TIMEOUT)
    assert isinstance(answer, AgentmeshError) and answer.metadata["settlement_id"] == settlement_id("u4", 1)
    await finish(resend, ToolResult("c", "charge", answer))
    assert (await env.record("u4") or {})["g"] == 1
    # A second re-send under the same settlement finds the key no longer waiting for it.
    with pytest.raises(FailedPreconditionError):
        await env.idem()(make_call("u4", approved_id=sid))


async def test_an_unknown_record_naming_a_lost_settlement_opens_the_next(env: Env) -> None:
    call = make_call("u5")
    await env.put("u5", {"s": "unknown", "h": call.call_sha256, "a": "stl_gone", "g": 2})
    answer = await env.idem()(call)
    assert isinstance(answer, AgentmeshError) and answer.metadata["settlement_id"] == settlement_id("u5", 3)
    assert await env.record("u5") == {"s": "unknown", "h": call.call_sha256, "a": settlement_id("u5", 3), "g": 3}


async def test_a_dead_owner_that_sent_leaves_the_outcome_unknown(env: Env) -> None:
    call = make_call("u6")
    await env.put("u6", {"s": "sent", "h": call.call_sha256, "t": "t_dead", "g": 1})
    answer = await env.idem()(call)
    assert isinstance(answer, AgentmeshError) and answer.code == ErrorCode.OUTCOME_UNKNOWN
    assert await env.record("u6") == {"s": "unknown", "h": call.call_sha256, "a": settlement_id("u6", 1), "g": 1}
    assert call.owner == ""


async def test_a_dead_owner_that_sent_a_read_is_taken_over(env: Env) -> None:
    call = make_call("u7", READ)
    await env.put("u7", {"s": "sent", "h": call.call_sha256, "t": "t_dead", "g": 0})
    assert await env.idem()(call) is None
    assert (await env.record("u7") or {})["s"] == "run" and call.owner.startswith("t_")
    await finish(call, ok(call))


async def test_a_crash_after_sending_records_unknown(env: Env) -> None:
    call = make_call("u8")
    await env.idem()(call)
    await send(call)
    await finish(call, None)
    assert await env.record("u8") == {"s": "unknown", "h": call.call_sha256, "a": settlement_id("u8", 0), "g": 0}


async def test_known_outcomes_pass_through_after(env: Env) -> None:
    call = make_call("u9")
    await env.idem()(call)
    out = Output("text", inline="x")
    assert await env.idem().after(call, out) is out
    assert await env.idem().after(call, TIMEOUT) is TIMEOUT  # not sent yet
    await finish(call, ok(call))


async def test_an_approved_call_takes_the_key_from_its_approval(env: Env) -> None:
    call = make_call("u10")
    pending = await env.approvals.create(call)
    await env.put("u10", {"s": "pending", "h": call.call_sha256, "a": pending.approval_id, "g": 0})
    resumed = make_call("u10", approved_id=pending.approval_id)
    assert await env.idem()(resumed) is None
    assert await env.record("u10") == {"s": "run", "h": call.call_sha256, "t": pending.approval_id, "g": 0}
    await finish(resumed, ok(resumed))


async def test_an_approved_call_whose_record_expired_claims_afresh(env: Env) -> None:
    resumed = make_call("u11", approved_id="apr_x")
    assert await env.idem()(resumed) is None
    assert (await env.record("u11") or {})["t"] == "apr_x"
    assert await env.pttl("u11") > TTL_S * 1000 - 5000
    await finish(resumed, ok(resumed))


async def test_a_settlement_resend_never_claims_a_missing_key(env: Env) -> None:
    with pytest.raises(FailedPreconditionError):
        await env.idem()(make_call("u12", approved_id="stl_x"))
    assert await env.record("u12") is None


# -- what an OUTCOME_UNKNOWN says, and the settlement it names ----------------------------------------

LONG_KEY = "task-" + "k" * 295  # 300 characters: every echo of it is cut


async def test_outcome_unknown_names_its_settlement_and_what_it_is_bound_to(env: Env) -> None:
    call = make_call(LONG_KEY)
    await env.idem()(call)
    await send(call)
    cause = AgentmeshError(ErrorCode.UPSTREAM_TIMEOUT, "x" * 300)
    answer = await env.idem().after(call, cause)
    assert isinstance(answer, AgentmeshError) and answer.code == ErrorCode.OUTCOME_UNKNOWN
    sid = settlement_id(LONG_KEY, 0)
    settlement = await env.approvals.get(sid)
    # What the dispatcher parks the task on: the settlement, the key, the arguments it is bound to, its expiry.
    assert answer.metadata == {
        "settlement_id": sid,
        "idempotency_key": LONG_KEY[:200],
        "arguments_sha256": call.arguments_sha256,
        "expire_at": f"{settlement.pending.expire_at:.3f}",
    }
    assert answer.message == (
        f"charge: the call may have reached its upstream but its outcome is unknown; it is not re-sent "
        f"until an operator settles {sid} (RAN or NOT_RAN) (cause: UPSTREAM_TIMEOUT: {'x' * 200})"
    )
    await finish(call, ToolResult("call-1", "charge", answer))
    # A repeat gets the same settlement, named the same way.
    repeat = await env.idem()(make_call(LONG_KEY, call_id="call-2"))
    assert isinstance(repeat, AgentmeshError) and repeat.metadata == answer.metadata
    assert repeat.message.startswith("charge: the call may have reached its upstream")


async def test_a_known_outcome_of_a_sent_write_passes_through_after(env: Env) -> None:
    call = make_call("u20")
    await env.idem()(call)
    await send(call)
    out = Output("text", inline="charged")
    assert await env.idem().after(call, out) is out
    answered = AgentmeshError(ErrorCode.UPSTREAM_TIMEOUT, "504", metadata={"http_status": "504"})
    assert await env.idem().after(call, answered) is answered
    assert (await env.record("u20") or {})["s"] == "sent"  # no settlement opened
    assert not call.went_unknown
    await finish(call, ok(call))
    assert (await env.record("u20") or {})["s"] == "done"


async def unknown_at(env: Env, key: str, generation: int, book: ApprovalBook | None = None) -> tuple[str, str]:
    """A key recorded unknown under its settlement of `generation`, as a replica left it."""
    call = make_call(key)
    sid = settlement_id(key, generation)
    await (book or env.approvals).create_settlement(sid, call, key)
    await env.put(key, {"s": "unknown", "h": call.call_sha256, "a": sid, "g": generation}, ttl_ms=TTL_S * 1000)
    return sid, call.call_sha256


async def test_a_settlement_that_expired_unsettled_is_followed_by_the_next(env: Env) -> None:
    await unknown_at(env, "u21", 2, ApprovalBook(env.store, 0.0))
    answer = await env.idem()(make_call("u21", call_id="call-2"))
    nxt = settlement_id("u21", 3)
    assert isinstance(answer, AgentmeshError) and answer.code == ErrorCode.OUTCOME_UNKNOWN
    assert answer.metadata["settlement_id"] == nxt
    record = await env.record("u21")
    assert record == {"s": "unknown", "h": make_call("u21").call_sha256, "a": nxt, "g": 3}
    assert (await env.approvals.get(nxt)).state == "pending"


async def test_not_ran_whose_resend_never_took_the_key_is_still_unknown(env: Env) -> None:
    # NOT_RAN was decided, but the re-send never came: nothing ran, so nothing may be replayed as RAN.
    sid, sha = await unknown_at(env, "u22", 1)
    await env.settle(sid, "not_ran")
    answer = await env.idem()(make_call("u22", call_id="call-2"))
    assert isinstance(answer, AgentmeshError) and answer.code == ErrorCode.OUTCOME_UNKNOWN
    assert answer.metadata["settlement_id"] == settlement_id("u22", 2)
    assert await env.record("u22") == {"s": "unknown", "h": sha, "a": settlement_id("u22", 2), "g": 2}


async def test_settled_ran_records_the_repeats_call(env: Env) -> None:
    sid, _ = await unknown_at(env, "u23", 0)
    await env.settle(sid, "ran")
    env.left[0] = 5.0
    answer = await env.idem()(make_call("u23", call_id="call-2"))
    assert isinstance(answer, Output)
    record = await env.record("u23") or {}
    assert record["o"]["call_id"] == "call-2" and record["o"]["tool_name"] == "charge"
    assert TTL_S * 1000 - 5000 < await env.pttl("u23") <= TTL_S * 1000


def hook_settlements(env: Env, meanwhile: Callable[[], Awaitable[None]]) -> None:
    """Runs `meanwhile` (another replica's move) just after this replica opens a settlement, before it
    records it on the key."""
    create = env.approvals.create_settlement

    async def racing(sid: str, call: CallState, key: str) -> Pending:
        pending = await create(sid, call, key)
        await meanwhile()
        return pending

    env.approvals.create_settlement = racing  # type: ignore[method-assign,assignment]


async def test_a_resend_that_took_the_key_meanwhile_is_not_overwritten(env: Env) -> None:
    sid, sha = await unknown_at(env, "u24", 1)
    await env.settle(sid, "not_ran")
    running = {"s": "run", "h": sha, "t": sid, "g": 2}

    async def resend_took_it() -> None:
        await env.put("u24", running, heartbeat=sid, ttl_ms=TTL_S * 1000)

    hook_settlements(env, resend_took_it)
    with pytest.raises(AgentmeshError) as caught:
        await env.idem()(make_call("u24", call_id="call-2"))
    # The re-send is in flight: the repeat waits for it (here: no time left), it is not told "unknown".
    assert caught.value.code == ErrorCode.UNAVAILABLE and caught.value.metadata["reason"] == "in_progress"
    assert await env.record("u24") == running


@pytest.mark.parametrize("settlement", ["gone", "expired"])
async def test_a_key_that_expired_meanwhile_names_no_settlement(env: Env, settlement: str) -> None:
    # The answer names a settlement only when the key records it: a key gone past its TTL is a new call.
    if settlement == "gone":
        await env.put("u25", {"s": "unknown", "h": make_call("u25").call_sha256, "a": "stl_gone", "g": 0})
    else:
        await unknown_at(env, "u25", 0, ApprovalBook(env.store, 0.0))

    async def key_expired() -> None:
        await env.store.redis.delete(env.record_key("u25"))

    hook_settlements(env, key_expired)
    with pytest.raises(AgentmeshError) as caught:
        await env.idem()(make_call("u25", call_id="call-2"))  # no time left to look again
    assert caught.value.code == ErrorCode.UNAVAILABLE and caught.value.retryable
    assert await env.record("u25") is None
    # Its retry finds the key free: a new call.
    call = make_call("u25", call_id="call-3")
    assert await env.idem()(call) is None
    assert call.owner.startswith("t_") and (await env.record("u25") or {})["s"] == "run"
    await finish(call, ok(call))


async def test_an_owner_whose_heartbeat_returns_keeps_its_key(env: Env) -> None:
    call = make_call("u26")
    sent = {"s": "sent", "h": call.call_sha256, "t": "t_slow", "g": 0}
    await env.put("u26", sent)

    async def owner_beats_again() -> None:
        await env.store.redis.set(env.record_key("u26") + ":hb", "t_slow", px=30_000)

    hook_settlements(env, owner_beats_again)
    with pytest.raises(AgentmeshError) as caught:
        await env.idem()(call)
    # It was slow, not dead: its outcome is its own to record, not "unknown".
    assert caught.value.code == ErrorCode.UNAVAILABLE and caught.value.metadata["reason"] == "in_progress"
    assert await env.record("u26") == sent


# -- resuming: an approved call or a NOT_RAN re-send ----------------------------------------------------


async def test_an_approved_call_keeps_the_generation_of_its_pending_record(env: Env) -> None:
    call = make_call("u27")
    pending = await env.approvals.create(call)
    await env.put("u27", {"s": "pending", "h": call.call_sha256, "a": pending.approval_id, "g": 2})
    resumed = make_call("u27", approved_id=pending.approval_id)
    assert await env.idem()(resumed) is None
    assert resumed.generation == 2
    assert await env.record("u27") == {"s": "run", "h": call.call_sha256, "t": pending.approval_id, "g": 2}
    assert TTL_S * 1000 - 5000 < await env.pttl("u27") <= TTL_S * 1000
    # A second resume of the same approval (a duplicate decision) while the first runs: never sent twice.
    key = "u27"
    with pytest.raises(FailedPreconditionError) as caught:
        await env.idem()(make_call(key, approved_id=pending.approval_id, call_id="call-3"))
    assert caught.value.message == (
        f"the key 'u27' is no longer waiting for {pending.approval_id}; the call was not sent again"
    )
    assert (await env.record("u27") or {})["s"] == "run"
    await send(resumed)
    with pytest.raises(FailedPreconditionError):
        await env.idem()(make_call(key, approved_id=pending.approval_id, call_id="call-4"))
    assert (await env.record("u27") or {})["s"] == "sent"
    await finish(resumed, ok(resumed))


async def test_a_not_ran_resend_opens_the_generation_after_the_settled_one(env: Env) -> None:
    sid, sha = await unknown_at(env, "u28", 2)
    await env.settle(sid, "not_ran")
    resend = make_call("u28", approved_id=sid)
    assert await env.idem()(resend) is None
    assert resend.generation == 3
    assert await env.record("u28") == {"s": "run", "h": sha, "t": sid, "g": 3}
    await finish(resend, ok(resend))


async def test_an_approved_call_whose_record_expired_claims_generation_zero(env: Env) -> None:
    # The same store first claims a key the ordinary way: both claims are the one durable claim script.
    first = make_call("u29-first")
    await env.idem()(first)
    resumed = make_call("u29", approved_id="apr_y")
    assert await env.idem()(resumed) is None
    assert resumed.generation == 0 and resumed.owner == "apr_y"
    assert await env.record("u29") == {"s": "run", "h": resumed.call_sha256, "t": "apr_y", "g": 0}
    assert TTL_S * 1000 - 5000 < await env.pttl("u29") <= TTL_S * 1000
    assert await env.heartbeat("u29") == "apr_y"
    await finish(resumed, ok(resumed))
    await finish(first, ok(first))


async def test_a_refused_resend_names_the_key_cut(env: Env) -> None:
    with pytest.raises(FailedPreconditionError) as caught:
        await env.idem()(make_call(LONG_KEY, approved_id="stl_x"))
    assert caught.value.message == (
        f"the key {LONG_KEY[:80]!r} is no longer waiting for stl_x; the call was not sent again"
    )


async def test_each_redis_operation_of_a_resume_is_measured_under_its_name(env: Env) -> None:
    got = recorded_metrics()
    env.store.metrics = got.metrics
    resumed = make_call("u30", approved_id="apr_z")
    assert await env.idem()(resumed) is None
    ops = {a["db.operation.name"] for a, _ in got.points("db.client.operation.duration")}
    assert {"read idempotency key", "settle idempotency key", "claim idempotency key"} <= ops
    await finish(resumed, ok(resumed))
