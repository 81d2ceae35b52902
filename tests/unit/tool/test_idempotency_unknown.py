"""Unknown outcomes of the idempotency step (tool_svc/idempotency.py) on the test Redis: a sent write whose
effect is unknown opens a settlement and is never re-sent until an operator settles it; RAN is recorded,
NOT_RAN re-sends once under the next generation. Checked through what Redis holds afterwards."""

from __future__ import annotations

import pytest

from agentmesh.errors import AgentmeshError, ErrorCode, FailedPreconditionError
from agentmesh.store import Store
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
from tool_svc.idempotency import settlement_id
from tool_svc.model import Output, ToolResult, outcome_from_json

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
