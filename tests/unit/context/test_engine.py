"""The context domain on the test Redis, without gRPC: edge cases of assembly and compaction."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from agentmesh.config import ContextSettings
from agentmesh.store import Store
from context_svc.engine import BudgetRequest, ContextEngine
from context_svc.model import BlockKind, Caller, Message, Role, ToolCall, ToolOutcome
from context_svc.sessions import EncodingChangedError
from tests.unit.context.ops_session import ops_session

OPERATOR = Caller("oncall", is_operator=True)
TASK = Caller("ops", agent_id="ops", task_id="t-1", creator="alice")
"""A task's token (the dispatcher's): the tokens of the session's attached tasks may use it."""


async def play(engine: ContextEngine, session: str, turns: int, seed: int = 3, call_prefix: str = "") -> None:
    # `call_prefix`: a second play on one session needs other call ids (a result is appended once per call id).
    for step in ops_session(turns, seed=seed, big=False):
        if step.kind == "tool":
            call_id = call_prefix + step.call_id
            call = ToolCall(call_id, step.tool, json.dumps(step.arguments))
            await engine.append_message(OPERATOR, session, Message(Role.ASSISTANT, tool_calls=(call,)))
            outcome = ToolOutcome(call_id, step.tool, inline=step.output, structured=step.structured)
            await engine.append_tool_result(OPERATOR, session, outcome)
        else:
            await engine.append_message(OPERATOR, session, Message(Role(step.kind), step.text))


async def test_cached_state_never_leaks_into_a_recreated_session(store: Store) -> None:
    engine = ContextEngine(ContextSettings(summary_trigger_tokens=500), store)
    await engine.create_session(OPERATOR, session_id="s1", goal="first life")
    await play(engine, "s1", 12)
    first = await engine.build_context(OPERATOR, "s1", budget_tokens=1000)
    assert first.compacted
    assert await engine.delete_session(OPERATOR, "s1")
    assert await store.redis.keys("*{s1}*") == []  # the session, its summary and its payloads
    await engine.create_session(OPERATOR, session_id="s1", goal="second life")
    await engine.append_message(OPERATOR, "s1", Message(Role.USER, "only message"))
    second = await engine.build_context(OPERATOR, "s1")
    assert [m.content for m in second.messages] == ["Goal: second life", "only message"]


async def test_an_oversized_newest_turn_is_clipped_not_dropped(store: Store) -> None:
    engine = ContextEngine(ContextSettings(), store)
    await engine.create_session(OPERATOR, session_id="s1", goal="g")
    await engine.append_message(OPERATOR, "s1", Message(Role.USER, "word " * 1500))  # ~1.5k tokens, not offloaded
    view = await engine.build_context(OPERATOR, "s1", budget_tokens=400)
    assert view.total_tokens <= 400
    assert "clipped to fit the context budget; message 0 has" in view.messages[-1].content


async def test_a_system_prompt_over_its_share_is_cut_with_a_note(store: Store) -> None:
    engine = ContextEngine(ContextSettings(), store)
    await engine.create_session(OPERATOR, session_id="s1", goal="keep me", system_prompt="rule. " * 3000)
    view = await engine.build_context(OPERATOR, "s1")
    system = view.blocks[0]
    assert system.kind is BlockKind.SYSTEM and system.tokens <= 1500
    assert "[system prompt cut to fit the context budget]" in view.messages[0].content
    assert "Goal: keep me" in view.messages[0].content


async def test_summary_too_long_for_its_block_points_to_the_full_summary(store: Store) -> None:
    engine = ContextEngine(ContextSettings(summary_trigger_tokens=300, keep_recent_messages=6), store)
    await engine.create_session(OPERATOR, session_id="s1", goal="g")
    await play(engine, "s1", 60)
    view = await engine.build_context(OPERATOR, "s1", budget_tokens=3000)
    summary_block = next(b for b in view.blocks if b.kind is BlockKind.SUMMARY)
    # Its share is 450; since issue 23 it also gets what the recent window leaves (lent, never more).
    assert 0 < summary_block.tokens <= summary_block.budget_tokens and summary_block.budget_tokens >= 450
    assert view.total_tokens <= 3000 - 150
    text = view.messages[1].content
    match = re.search(r'read_payload\(ref_id="(pl_[0-9a-f]{64})"\)', text)
    assert match, text
    _, full, _ = await engine.get_payload(OPERATOR, "s1", match.group(1))
    _, compacted = await engine.compact(OPERATOR, "s1")
    assert compacted is not None
    for line in compacted.key_data[:5]:  # the oldest facts: not in the view, one read away
        assert line in full.decode() and line not in text


async def test_two_replicas_compacting_at_once_summarise_once(store: Store) -> None:
    settings = ContextSettings(summary_trigger_tokens=500)
    a, b = ContextEngine(settings, store), ContextEngine(settings, store)
    await a.create_session(OPERATOR, session_id="s1", goal="g")
    await play(a, "s1", 20)
    views = await asyncio.gather(
        a.build_context(OPERATOR, "s1", budget_tokens=1000), b.build_context(OPERATOR, "s1", budget_tokens=1000)
    )
    session, _ = await a.get_session(OPERATOR, "s1")
    assert session.summary_count == 1
    assert [m.content for m in views[0].messages[2:]] == [m.content for m in views[1].messages[2:]]
    assert views[0].summarized_messages == views[1].summarized_messages > 0


async def test_older_turns_below_the_trigger_are_summarised_in_the_view_not_dropped(store: Store) -> None:
    engine = ContextEngine(ContextSettings(keep_recent_messages=4, summary_trigger_tokens=100_000), store)
    await engine.create_session(OPERATOR, session_id="s1", goal="g")
    for i in range(120):
        await engine.append_message(OPERATOR, "s1", Message(Role.USER, f"order ORD-2025-{i:04d} is 85折"))
    view = await engine.build_context(OPERATOR, "s1", budget_tokens=1500)
    assert view.dropped_messages == 0 and view.summarized_messages > 0
    assert view.total_tokens >= 1500 * 0.9  # turns were left out: the budget is used
    text = "\n".join(m.content for m in view.messages)
    _, summary = await engine.compact(OPERATOR, "s1")
    assert summary is not None
    full = "\n".join(summary.key_data)
    # Every older turn is in the view or in the summary its footer points to, none is dropped.
    for i in range(view.summarized_messages):
        assert f"ORD-2025-{i:04d}" in text or f"ORD-2025-{i:04d}" in full


async def test_keep_recent_messages_is_a_floor_not_a_ceiling(store: Store) -> None:
    """Issue 37: ten short turns and 12k tokens allowed: all ten verbatim, nothing summarised."""
    engine = ContextEngine(ContextSettings(keep_recent_messages=4, summary_trigger_tokens=100_000), store)
    await engine.create_session(OPERATOR, session_id="s1", goal="g")
    for i in range(10):
        await engine.append_message(OPERATOR, "s1", Message(Role.USER, f"order ORD-2025-{i:04d} is 85折"))
    view = await engine.build_context(OPERATOR, "s1")
    assert (view.summarized_messages, view.dropped_messages) == (0, 0)
    assert [m.index for m in view.messages[1:]] == list(range(10))


async def test_session_budget_is_fixed_at_creation(store: Store) -> None:
    engine = ContextEngine(ContextSettings(agents={"ops": {"max_context_tokens": 5000}}), store)
    session, created = await engine.create_session(
        TASK, session_id="s1", goal="g", budget=BudgetRequest(keep_recent_messages=3)
    )
    assert created and session.agent_id == "ops"
    assert (session.budget.max_context_tokens, session.budget.keep_recent_messages) == (5000, 3)
    # Another configuration later does not change an existing session.
    later = ContextEngine(ContextSettings(), store)
    view = await later.build_context(TASK, "s1")
    assert view.budget_tokens == 5000


async def test_append_refuses_tokens_counted_in_another_encoding(store: Store) -> None:
    engine = ContextEngine(ContextSettings(), store)
    await engine.create_session(OPERATOR, session_id="s1", goal="g")
    message = Message(Role.USER, "hi", token_count=3)
    with pytest.raises(EncodingChangedError):
        await engine.sessions.append("s1", message, [], caller_agent=None, encoding="gpt2")
    assert await store.redis.llen("am:sess:{s1}:log") == 0


async def test_older_turns_that_do_not_fit_the_summary_block_are_compacted_even_below_the_trigger(
    store: Store,
) -> None:
    engine = ContextEngine(ContextSettings(keep_recent_messages=4, summary_trigger_tokens=100_000), store)
    await engine.create_session(OPERATOR, session_id="s1", goal="g")
    await play(engine, "s1", 30)
    view = await engine.build_context(OPERATOR, "s1", budget_tokens=2000)
    # Cutting lines of turns that are in no payload would lose them: they are compacted first,
    # and the view points to the persisted summary for what it cannot show.
    assert view.compacted and view.dropped_messages == 0
    assert 'read_payload(ref_id="pl_' in view.messages[1].content
    # The share is 300 plus what the window leaves (issue 23: unused budget is lent before cutting).
    assert view.blocks[1].tokens <= view.blocks[1].budget_tokens and view.blocks[1].budget_tokens >= 300
    assert view.total_tokens <= 2000 - 100


async def test_a_replica_reads_what_others_appended_and_compacted_meanwhile(store: Store) -> None:
    a, b = ContextEngine(ContextSettings(summary_trigger_tokens=400), store), ContextEngine(ContextSettings(), store)
    await a.create_session(OPERATOR, session_id="s1", goal="g")
    await play(a, "s1", 6)
    await a.build_context(OPERATOR, "s1")  # `a` now holds part of the session
    await play(b, "s1", 12, seed=9, call_prefix="b-")  # another replica appends...
    await b.build_context(OPERATOR, "s1")  # ...and compacts
    fresh = ContextEngine(ContextSettings(), store)
    for _ in range(2):
        held, cold = await a.sessions.load("s1"), await fresh.sessions.load("s1")
        assert held.session == cold.session
        assert held.entries == cold.entries
        assert {i: m for i, m in held.tail.items() if i in cold.tail} == cold.tail
        seen = await a.build_context(OPERATOR, "s1")
        assert [m.content for m in seen.messages] == [
            m.content for m in (await fresh.build_context(OPERATOR, "s1")).messages
        ]
    # The same id re-created elsewhere is another session (its epoch differs), never the held one.
    await b.delete_session(OPERATOR, "s1")
    await b.create_session(OPERATOR, session_id="s1", goal="new")
    assert (await a.sessions.load("s1")).entries == []
    assert (await a.build_context(OPERATOR, "s1")).messages[0].content == "Goal: new"
