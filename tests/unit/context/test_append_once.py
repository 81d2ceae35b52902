"""Appends are idempotent (issue 18): the content hashes, and the domain on the test Redis without gRPC.

AppendToolResult happens once per tool_call_id and AppendMessage once per client_message_id: a
repeat with the same content returns the original position, other content is FAILED_PRECONDITION.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest
from google.protobuf import duration_pb2

from agentmesh.chat import Correction, NextStep
from agentmesh.config import ContextSettings
from agentmesh.errors import AgentmeshError, ErrorCode, FailedPreconditionError, InvalidRequestError, Violation
from agentmesh.payloads import StoredPayload
from agentmesh.store import Store
from agentmesh.v1 import common_pb2
from context_svc.codec import tool_outcome_domain
from context_svc.engine import ContextEngine
from context_svc.model import Caller, Message, PendingInfo, Role, ToolCall, ToolOutcome, message_hash, tool_outcome_hash
from tests.compat.test_rolling_upgrade import FIXTURE_FILES, read_fixture, restore

OPERATOR = Caller("oncall", is_operator=True)
REF = StoredPayload("pl_" + "a" * 64, "s1", 10, "text/plain", "a" * 64, 1_700_000_000.0)
ERROR = AgentmeshError(ErrorCode.SCHEMA_INVALID, "bad", violations=[Violation("a", "type", "integer", "string")])


# --- the content hashes ------------------------------------------------------------------------------


def _result_pb(stats: common_pb2.ExecutionStats) -> common_pb2.ToolResult:
    return common_pb2.ToolResult(
        tool_call_id="c1",
        tool_name="lookup",
        output=common_pb2.ToolOutput(inline='{"ok": true}', result_type=common_pb2.RESULT_TYPE_STRUCTURED),
        stats=stats,
    )


def test_execution_stats_do_not_change_the_tool_result_hash() -> None:
    first = common_pb2.ExecutionStats(attempts=1, duration=duration_pb2.Duration(nanos=2_000_000), output_bytes=12)
    replayed = common_pb2.ExecutionStats(
        attempts=3, duration=duration_pb2.Duration(seconds=4), replayed=True, output_bytes=12
    )
    assert tool_outcome_hash(tool_outcome_domain(_result_pb(first))) == tool_outcome_hash(
        tool_outcome_domain(_result_pb(replayed))
    )
    assert tool_outcome_hash(tool_outcome_domain(_result_pb(first))) == tool_outcome_hash(
        tool_outcome_domain(_result_pb(common_pb2.ExecutionStats()))
    )


def test_volatile_ref_facts_do_not_change_the_tool_result_hash() -> None:
    base = ToolOutcome("c1", "logs", ref=REF, digest="10 lines")
    later = replace(base, ref=replace(REF, expire_at=REF.expire_at + 3600), digest="10 lines, 2 errors")
    assert tool_outcome_hash(base) == tool_outcome_hash(later)


_BASE = ToolOutcome("c1", "lookup", inline="42", structured=False)
_FAILED = ToolOutcome("c1", "lookup", error=ERROR, correction=Correction(NextStep.FIX_ARGUMENTS, 1, 2))


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (_BASE, replace(_BASE, tool_call_id="c2")),
        (_BASE, replace(_BASE, tool_name="lookup_v2")),
        (_BASE, replace(_BASE, inline="43")),
        (_BASE, replace(_BASE, structured=True)),
        (_BASE, replace(_BASE, redacted=True)),
        (_BASE, replace(_BASE, inline=None, ref=REF)),
        (replace(_BASE, inline=None, ref=REF), replace(_BASE, inline=None, ref=replace(REF, ref_id="pl_" + "b" * 64))),
        (_FAILED, replace(_FAILED, error=ERROR.replace(message="worse"))),
        (_FAILED, replace(_FAILED, error=ERROR.replace(code=ErrorCode.UPSTREAM_TIMEOUT, violations=()))),
        (_FAILED, replace(_FAILED, error=ERROR.replace(violations=()))),
        (_FAILED, replace(_FAILED, correction=Correction(NextStep.FIX_ARGUMENTS, 2, 2))),
        (_FAILED, replace(_FAILED, correction=None)),
        (_BASE, replace(_BASE, inline=None, pending=PendingInfo("ap1", "restarts pods", 1.0))),
    ],
)
def test_what_is_appended_changes_the_tool_result_hash(a: ToolOutcome, b: ToolOutcome) -> None:
    assert tool_outcome_hash(a) != tool_outcome_hash(b)


def test_message_hash_is_the_content_not_the_time() -> None:
    call = ToolCall("c1", "lookup", '{"id": 1}')
    message = Message(Role.ASSISTANT, "checking", tool_calls=(call,), create_time=1.0)
    assert message_hash(message) == message_hash(replace(message, create_time=2.0, token_count=9))
    for other in (
        replace(message, role=Role.USER, tool_calls=()),
        replace(message, content="checking again"),
        replace(message, tool_calls=(replace(call, arguments_json='{"id": 2}'),)),
        replace(message, tool_calls=()),
    ):
        assert message_hash(other) != message_hash(message)


# --- the domain on Redis ---------------------------------------------------------------------------


async def _engine(store: Store, **settings: Any) -> ContextEngine:
    engine = ContextEngine(ContextSettings(**settings), store)
    await engine.create_session(OPERATOR, session_id="s1", goal="g")
    return engine


async def test_a_repeated_tool_result_returns_the_original_position(store: Store) -> None:
    engine = await _engine(store)
    await engine.append_message(OPERATOR, "s1", Message(Role.USER, "look up 42"))
    first = await engine.append_tool_result_once(OPERATOR, "s1", _BASE)
    again = await engine.append_tool_result_once(OPERATOR, "s1", _BASE)
    assert (first.index, first.already) == (1, False)
    assert (again.index, again.token_count, again.already) == (1, first.token_count, True)
    session, _ = await engine.get_session(OPERATOR, "s1")
    assert session.message_count == 2
    # The tuple form is idempotent too.
    assert await engine.append_tool_result(OPERATOR, "s1", _BASE) == (1, first.token_count, None)


async def test_a_repeat_with_other_content_is_failed_precondition(store: Store) -> None:
    engine = await _engine(store)
    await engine.append_tool_result_once(OPERATOR, "s1", _BASE)
    with pytest.raises(FailedPreconditionError) as info:
        await engine.append_tool_result_once(OPERATOR, "s1", replace(_BASE, inline="43"))
    assert "c1" in info.value.message and "position 0" in info.value.message
    assert info.value.metadata == {"index": "0", "tool_call_id": "c1"}
    assert (await engine.get_session(OPERATOR, "s1"))[0].message_count == 1


async def test_a_large_result_is_offloaded_once_and_its_repeat_gets_the_same_ref(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = await _engine(store)
    puts: list[int] = []
    put = engine.payloads.put

    async def counting_put(session_id: str, content: bytes, media_type: str) -> StoredPayload:
        puts.append(len(content))
        return await put(session_id, content, media_type)

    monkeypatch.setattr(engine.payloads, "put", counting_put)
    big = replace(_BASE, inline="line of log output\n" * 500)
    first = await engine.append_tool_result_once(OPERATOR, "s1", big)
    again = await engine.append_tool_result_once(OPERATOR, "s1", big)
    assert first.ref is not None and again.ref == first.ref and again.already
    assert len(puts) == 1, "a repeat must not offload again"
    with pytest.raises(FailedPreconditionError):
        await engine.append_tool_result_once(OPERATOR, "s1", replace(big, inline="other\n" * 1000))
    assert len(puts) == 1, "nor must a conflicting repeat"
    # A result tool_svc offloaded: no ref in the answer, the first time or again.
    by_ref = ToolOutcome("c2", "logs", ref=replace(REF, session_id="s1"), digest="10 lines")
    assert (await engine.append_tool_result_once(OPERATOR, "s1", by_ref)).ref is None
    repeated = await engine.append_tool_result_once(OPERATOR, "s1", by_ref)
    assert (repeated.index, repeated.ref, repeated.already) == (1, None, True)


async def test_concurrent_identical_appends_land_once(store: Store) -> None:
    engines = [await _engine(store) for _ in range(3)]  # replicas
    results = await asyncio.gather(*(engines[i % 3].append_tool_result_once(OPERATOR, "s1", _BASE) for i in range(10)))
    assert {r.index for r in results} == {0}
    assert sorted(r.already for r in results) == [False] + [True] * 9
    assert await store.redis.llen(engines[0].sessions.key("s1", "log")) == 1


async def test_client_message_id(store: Store) -> None:
    engine = await _engine(store)
    message = Message(Role.USER, "restart checkout")
    first = await engine.append_message_once(OPERATOR, "s1", message, client_message_id="u-1")
    again = await engine.append_message_once(OPERATOR, "s1", replace(message, create_time=5.0), client_message_id="u-1")
    assert (first.index, first.already, again.index, again.already) == (0, False, 0, True)
    assert again.token_count == first.token_count
    with pytest.raises(FailedPreconditionError) as info:
        await engine.append_message_once(OPERATOR, "s1", Message(Role.USER, "no, wait"), client_message_id="u-1")
    assert info.value.metadata == {"index": "0", "client_message_id": "u-1"}
    # Its own namespace: a tool call id "u-1" is another key.
    assert not (await engine.append_tool_result_once(OPERATOR, "s1", replace(_BASE, tool_call_id="u-1"))).already
    # No id: no dedupe.
    assert (await engine.append_message_once(OPERATOR, "s1", message)).index == 2
    assert (await engine.append_message_once(OPERATOR, "s1", message)).index == 3


@pytest.mark.parametrize("bad", ["x" * 129, "a b", "tab\there", "nl\n", "\x00", "zero\u200bwidth", "\u3000"])
async def test_a_bad_client_message_id_is_refused_before_anything_is_written(store: Store, bad: str) -> None:
    engine = await _engine(store)
    with pytest.raises(InvalidRequestError) as info:
        await engine.append_message_once(OPERATOR, "s1", Message(Role.USER, "hi"), client_message_id=bad)
    assert info.value.field == "client_message_id"
    assert (await engine.get_session(OPERATOR, "s1"))[0].message_count == 0


async def test_good_client_message_ids(store: Store) -> None:
    engine = await _engine(store)
    for i, good in enumerate(["x" * 128, "msg:7/步骤-1", "a"]):
        appended = await engine.append_message_once(OPERATOR, "s1", Message(Role.USER, "hi"), client_message_id=good)
        assert (appended.index, appended.already) == (i, False)


async def test_the_index_expires_and_is_deleted_with_the_session(store: Store) -> None:
    engine = await _engine(store, session_ttl_s=600)
    await engine.append_tool_result_once(OPERATOR, "s1", _BASE)
    dedupe = engine.sessions.key("s1", "dedupe")
    assert 590 < await store.redis.ttl(dedupe) <= 600
    assert await engine.delete_session(OPERATOR, "s1")
    assert await store.redis.exists(dedupe) == 0
    await engine.create_session(OPERATOR, session_id="s1", goal="g")
    again = await engine.append_tool_result_once(OPERATOR, "s1", replace(_BASE, inline="new life"))
    assert (again.index, again.already) == (0, False)


async def test_an_entry_left_by_an_older_replicas_delete_is_ignored(store: Store) -> None:
    """An older replica's DeleteSession does not know the dedupe key: the session id created again
    must not answer a new call as a repeat of the old session's (the entry names the old epoch)."""
    engine = await _engine(store)
    await engine.append_tool_result_once(OPERATOR, "s1", _BASE)
    await store.redis.delete(*(engine.sessions.key("s1", p) for p in ("meta", "log", "idx", "entities", "summary")))
    engine.sessions.forget("s1")
    await engine.create_session(OPERATOR, session_id="s1", goal="g")
    await engine.append_message(OPERATOR, "s1", Message(Role.USER, "hello"))
    fresh = await engine.append_tool_result_once(OPERATOR, "s1", replace(_BASE, inline="other"))
    assert (fresh.index, fresh.already) == (1, False)
    assert (await engine.append_tool_result_once(OPERATOR, "s1", replace(_BASE, inline="other"))).already


@pytest.mark.parametrize("fixture", FIXTURE_FILES, ids=lambda p: p.stem)
async def test_sessions_stored_before_the_index_get_one_on_their_first_append(store: Store, fixture: Any) -> None:
    data = read_fixture(fixture)
    await restore(store.redis, data["keys"])
    engine = ContextEngine(ContextSettings(), store)
    for session_id, want in data["records"]["context"]["sessions"].items():
        caller = Caller(**want["caller"])
        count = want["session"]["message_count"]
        dedupe = engine.sessions.key(session_id, "dedupe")
        assert await store.redis.exists(dedupe) == (dedupe in data["keys"])  # absent before redis_v3
        outcome = ToolOutcome("call-after-upgrade", "lookup", inline="42")
        first = await engine.append_tool_result_once(caller, session_id, outcome)
        again = await engine.append_tool_result_once(caller, session_id, outcome)
        assert (first.index, first.already, again.index, again.already) == (count, False, count, True)
        assert await store.redis.exists(dedupe) == 1
        session, _ = await engine.get_session(caller, session_id)
        assert session.message_count == count + 1
