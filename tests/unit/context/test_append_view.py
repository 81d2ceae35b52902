"""An append that answers with its view is one script call (issue 45): the append and the load right
after it run in one round trip, the load reads neither the meta the append read and wrote nor the
message this process sent, and the view is the one BuildContext builds after the append, whatever
this process held of the session (nothing, all of it, or a snapshot behind another replica's writes)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from agentmesh.config import ContextSettings
from agentmesh.errors import FailedPreconditionError
from agentmesh.store import Store
from context_svc.engine import ContextEngine
from context_svc.model import Caller, ContextView, Message, Role, ToolCall, ToolOutcome
from tests.unit.context.ops_session import ops_session
from tests.unit.context.test_session_commands import commands, spent

OPERATOR = Caller("oncall", is_operator=True)


def _plain(view: ContextView) -> Any:
    """The view less the time stamps of the messages assembled at build time (the system block's)."""
    return replace(
        view, messages=tuple(replace(m, create_time=0.0) if m.role is Role.SYSTEM else m for m in view.messages)
    )


async def _built(store: Store, session_id: str, budget: int | None = None, **settings: Any) -> ContextView:
    """BuildContext's view from a process that holds nothing of the session."""
    return await ContextEngine(ContextSettings(**settings), store).build_context(
        OPERATOR, session_id, budget_tokens=budget
    )


def _result(call_id: str, text: str) -> ToolOutcome:
    return ToolOutcome(tool_call_id=call_id, tool_name="lookup", inline=text)


async def test_an_append_with_its_view_is_one_script_call_that_rereads_nothing_it_holds(store: Store) -> None:
    engine = ContextEngine(ContextSettings(), store)
    await engine.create_session(OPERATOR, session_id="s0", goal="g")
    await engine.append_message_viewed(OPERATOR, "s0", Message(Role.USER, "hi"))  # loads the script
    await engine.create_session(OPERATOR, session_id="s1", goal="find order 42")
    before = await commands(store)
    _, view = await engine.append_message_viewed(
        OPERATOR, "s1", Message(Role.USER, "where is order 42?"), client_message_id="g"
    )
    used = await spent(store, before)
    # The created session is held: no meta hash, no message and no index entry is read back.
    assert used["evalsha"] == 1 and used["lrange"] == 0 and used["llen"] == 0, used
    assert used["hmget"] == 1 and used["hgetall"] == 1, used  # the owner's memories; the entities are held
    assert "where is order 42?" in [m.content for m in view.messages]
    # A plain append of this process extends what it holds: the next view reads no message either.
    call = ToolCall("c1", "lookup", '{"id": 42}')
    await engine.append_message_once(OPERATOR, "s1", Message(Role.ASSISTANT, "", tool_calls=(call,)))
    before = await commands(store)
    _, view = await engine.append_tool_result_viewed(OPERATOR, "s1", _result("c1", "order 42: paid"))
    used = await spent(store, before)
    assert used["evalsha"] == 1 and used["lrange"] == 0 and used["hmget"] == 1 and used["hgetall"] == 1, used
    assert _plain(view) == _plain(await _built(store, "s1"))
    # A session created here has its owner known: even its first build reads the memories beside the load.
    await engine.create_session(OPERATOR, session_id="s2", goal="g")
    prefetch = engine.memory.prefetch("s2")
    assert prefetch is not None and prefetch.owner == "oncall" and await prefetch.task == []


async def test_the_view_is_build_contexts_after_the_append_whatever_this_process_held(store: Store) -> None:
    settings = {"summary_trigger_tokens": 300, "keep_recent_messages": 4}
    ours, other = ContextEngine(ContextSettings(**settings), store), ContextEngine(ContextSettings(**settings), store)
    await other.create_session(OPERATOR, session_id="s1", goal="plan the trip")  # we hold nothing of it
    compacted = 0
    for i in range(18):
        text = f"turn {i}: the budget is {100 + i} EUR and the city is Lyon number {i} " + "words " * 60
        if i % 3 == 0:
            # Another replica appends: what we hold ends before its message.
            await other.append_message(OPERATOR, "s1", Message(Role.USER, text))
            continue
        before = await commands(store)
        if i % 3 == 1:
            call = ToolCall(f"c{i}", "lookup", "{}")
            await ours.append_message_once(OPERATOR, "s1", Message(Role.ASSISTANT, text, tool_calls=(call,)))
            appended, view = await ours.append_tool_result_viewed(OPERATOR, "s1", _result(f"c{i}", f"result {i}"))
        else:
            appended, view = await ours.append_message_viewed(
                OPERATOR, "s1", Message(Role.USER, text), client_message_id=f"m{i}", budget_tokens=2000
            )
        if i > 2 and not view.compacted:  # the scripts are loaded; a compaction reads and writes more
            # Behind the other replica or not, one script call per append (and none for a second load).
            assert (await spent(store, before))["evalsha"] == 1 + (i % 3 == 1), i
        budget = None if i % 3 == 1 else 2000
        assert not appended.already
        compacted += view.compacted
        # `compacted`: this build folded older turns into the summary, the one after it had none to fold.
        built = await _built(store, "s1", budget, **settings)
        assert _plain(replace(view, compacted=False)) == _plain(built), i
    assert compacted and view.summarized_messages > 0  # the session was compacted on the way


async def test_a_repeated_append_answers_the_same_view_and_other_content_is_refused(store: Store) -> None:
    engine = ContextEngine(ContextSettings(), store)
    await engine.create_session(OPERATOR, session_id="s1", goal="g")
    first, view = await engine.append_message_viewed(
        OPERATOR, "s1", Message(Role.USER, "hello"), client_message_id="m1"
    )
    again, repeat = await engine.append_message_viewed(
        OPERATOR, "s1", Message(Role.USER, "hello"), client_message_id="m1"
    )
    assert again.already and again.index == first.index and _plain(repeat) == _plain(view)
    assert (await engine.sessions.load("s1")).session.message_count == 1
    with pytest.raises(FailedPreconditionError):
        await engine.append_message_viewed(OPERATOR, "s1", Message(Role.USER, "other"), client_message_id="m1")
    # A tool result's repeat too, from a process that held nothing of the session.
    call = ToolCall("c1", "lookup", "{}")
    await engine.append_message_once(OPERATOR, "s1", Message(Role.ASSISTANT, "", tool_calls=(call,)))
    _, view = await engine.append_tool_result_viewed(OPERATOR, "s1", _result("c1", "ok"))
    fresh = ContextEngine(ContextSettings(), store)
    again, repeat = await fresh.append_tool_result_viewed(OPERATOR, "s1", _result("c1", "ok"))
    assert again.already and _plain(repeat) == _plain(view)


async def test_the_goal_on_create_session_brings_build_contexts_view(store: Store) -> None:
    engine = ContextEngine(ContextSettings(), store)
    _, appended, view = await engine.open_session(
        OPERATOR, session_id="s1", goal="where is order 42?", goal_message_id="t1:goal", view=True
    )
    assert appended is not None and appended.index == 0 and view is not None
    assert _plain(view) == _plain(await _built(store, "s1"))
    # The same create again (a resumed task): the goal is not appended twice, the view is the same.
    _, again, repeat = await engine.open_session(
        OPERATOR, session_id="s1", goal="where is order 42?", goal_message_id="t1:goal", view=True
    )
    assert again is not None and again.already and repeat is not None and _plain(repeat) == _plain(view)


async def test_the_first_append_expires_only_the_keys_that_exist_and_every_key_gets_its_ttl(store: Store) -> None:
    engine = ContextEngine(ContextSettings(session_ttl_s=600), store)
    await engine.create_session(OPERATOR, session_id="s0", goal="g")
    for session, message, client_id in (
        ("s1", Message(Role.USER, "hello there"), "m1"),  # a dedupe entry, no known fact
        ("s2", Message(Role.USER, "my order id is 12345"), ""),  # a known fact, no dedupe entry
    ):
        await engine.create_session(OPERATOR, session_id=session, goal="g")
        await engine.append_message_viewed(OPERATOR, "s0", Message(Role.USER, "hi"))  # the scripts are loaded
        before = await commands(store)
        await engine.append_message_viewed(OPERATOR, session, message, client_message_id=client_id)
        assert (await spent(store, before))["expire"] == 4, session  # meta, log, idx and the one written
        parts = ("meta", "log", "idx", "entities", "summary", "dedupe")
        ttls = {part: await store.redis.ttl(f"am:sess:{{{session}}}:{part}") for part in parts}
        existing = {part: ttl for part, ttl in ttls.items() if ttl != -2}
        assert set(existing) == {"meta", "log", "idx", "dedupe" if client_id else "entities"}, ttls
        assert all(ttl > 0 for ttl in existing.values()), ttls
        # A later first label (or first dedupe entry) still refreshes every key together.
        before = await commands(store)
        await engine.append_message_once(
            OPERATOR, session, Message(Role.USER, "my order id is 777"), client_message_id="m2" if not client_id else ""
        )
        assert (await spent(store, before))["expire"] == 6, session


async def test_a_process_holding_many_facts_builds_the_view_a_fresh_one_builds(store: Store) -> None:
    # Long values make Redis keep the entities in a hash table: HGETALL's order is not the order the
    # facts were written in, so the facts of one message must not be listed in the order read.
    settings = {"summary_trigger_tokens": 800, "max_context_tokens": 2000}
    ours = ContextEngine(ContextSettings(**settings), store)
    await ours.create_session(OPERATOR, session_id="s1", goal="fix the checkout incident")
    for step in ops_session(30, big=False):
        if step.kind in ("user", "assistant"):
            await ours.append_message(OPERATOR, "s1", Message(Role(step.kind), step.text))
            continue
        call = ToolCall(step.call_id, step.tool, json.dumps(step.arguments))
        await ours.append_message_once(OPERATOR, "s1", Message(Role.ASSISTANT, "", tool_calls=(call,)))
        output = step.output if isinstance(step.output, str) else json.dumps(step.output)
        await ours.append_tool_result_once(OPERATOR, "s1", _result(step.call_id, output))
    assert await store.redis.object("encoding", "am:sess:{s1}:entities") == b"hashtable"
    view = await ours.build_context(OPERATOR, "s1")
    assert _plain(replace(view, compacted=False)) == _plain(await _built(store, "s1", **settings))
