"""CreateSession with its goal and view is one script (issue 45): the create, the goal's append and the
load right after it run in one EVALSHA, with one existence check, one HSET and one EXPIRE of the meta
hash. What it writes is what a create then an append wrote: another process reads the same session,
the same view, and the same TTL on every key; a repeat appends nothing."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from agentmesh.config import ContextSettings
from agentmesh.errors import PermissionDeniedError
from agentmesh.store import Store
from context_svc.engine import ContextEngine
from context_svc.model import Caller, ContextView, Message, Role
from context_svc.sessions import SessionStore
from tests.unit.context.test_session_commands import commands, spent

OPERATOR = Caller("oncall", is_operator=True)
TASK = Caller("svc:dispatcher", agent_id="support", task_id="t1", creator="user:ann")
_PARTS = ("meta", "log", "idx", "entities", "summary", "dedupe")


def _plain(view: ContextView | None) -> Any:
    assert view is not None
    return replace(
        view, messages=tuple(replace(m, create_time=0.0) if m.role is Role.SYSTEM else m for m in view.messages)
    )


async def _ttls(store: Store, session_id: str) -> dict[str, int]:
    ttls = {part: await store.redis.ttl(f"am:sess:{{{session_id}}}:{part}") for part in _PARTS}
    return {part: ttl for part, ttl in ttls.items() if ttl != -2}  # -2: no such key


async def test_create_session_with_its_goal_and_view_is_one_script_call(store: Store) -> None:
    engine = ContextEngine(ContextSettings(session_ttl_s=600), store)
    await engine.open_session(TASK, session_id="s0", goal="g", goal_message_id="t0:goal", view=True)  # loads it
    before = await commands(store)
    session, appended, view = await engine.open_session(
        TASK, session_id="s1", agent_id="support", goal="where is order 42?", goal_message_id="t1:goal", view=True
    )
    used = await spent(store, before)
    assert appended is not None and appended.index == 0 and not appended.already
    # One script: the create's existence check, the goal's dedupe claim and two RPUSHes, the EXPIREs
    # of the keys it wrote (the meta hash once), one HSET; no read of what it wrote. The HGETALL is
    # the owner's memories (another key, another slot), read beside it.
    assert used["evalsha"] == 1 and used["exists"] == 1 and used["hset"] == 1 and used["hmget"] == 0, used
    assert used["expire"] == 4 and used["hsetnx"] == 1 and used["rpush"] == 2 and used["hgetall"] == 1, used
    assert sum(used.values()) == 11, used
    # Every key written has the session's TTL, together; none was written that a create and an append
    # would not write.
    ttls = await _ttls(store, "s1")
    assert set(ttls) == {"meta", "log", "idx", "dedupe"} and all(590 < t <= 600 for t in ttls.values()), ttls
    # Another process reads the same session and builds the same view.
    other = ContextEngine(ContextSettings(session_ttl_s=600), store)
    stored, _ = await other.sessions.get("s1")
    assert replace(stored, newest_task_id="") == replace(session, message_count=1, total_tokens=appended.token_count,
                                                         newest_task_id="")  # fmt: skip
    assert _plain(await other.build_context(OPERATOR, "s1")) == _plain(view)
    # The task resumed on another replica: the goal is not appended again, the view is the same.
    _, again, repeat = await other.open_session(
        TASK, session_id="s1", agent_id="support", goal="where is order 42?", goal_message_id="t1:goal", view=True
    )
    assert again is not None and again.already and again.index == 0 and _plain(repeat) == _plain(view)
    # Another replica appends: this process's next view is still the one a fresh process builds.
    await other.append_message_once(TASK, "s1", Message(Role.USER, "and order 43?"), client_message_id="m1")
    _, mine = await engine.append_message_viewed(TASK, "s1", Message(Role.ASSISTANT, "looking"))
    fresh = ContextEngine(ContextSettings(session_ttl_s=600), store)
    assert _plain(mine) == _plain(await fresh.build_context(OPERATOR, "s1"))
    assert [m.content for m in (await SessionStore(store).messages("s1", 0, 9))] == [
        "where is order 42?", "and order 43?", "looking"
    ]  # fmt: skip


async def test_a_goal_the_script_cannot_append_takes_the_usual_path(store: Store) -> None:
    # Over the offload size: created first, then the goal offloaded and appended, as before.
    engine = ContextEngine(ContextSettings(session_ttl_s=600, offload_message_bytes=64), store)
    goal = "summarise this: " + "lorem ipsum " * 20
    _, appended, view = await engine.open_session(OPERATOR, session_id="s1", goal=goal, goal_message_id="g", view=True)
    assert appended is not None and appended.index == 0 and view is not None
    fresh = ContextEngine(ContextSettings(session_ttl_s=600, offload_message_bytes=64), store)
    assert _plain(await fresh.build_context(OPERATOR, "s1")) == _plain(view)
    assert all(t > 0 for t in (await _ttls(store, "s1")).values())


async def test_a_caller_the_append_refuses_still_creates_the_session_with_its_ttl(store: Store) -> None:
    # A task-less agent token creates a session no task is attached to: its append is refused, as a
    # create then an append refused it; the session stays, with its TTL.
    agent = Caller("svc:agent", agent_id="support")
    engine = ContextEngine(ContextSettings(session_ttl_s=600), store)
    with pytest.raises(PermissionDeniedError):
        await engine.open_session(agent, session_id="s1", goal="g", goal_message_id="g1", view=True)
    session, _ = await SessionStore(store).get("s1")
    assert session.agent_id == "support" and session.message_count == 0
    assert set(ttls := await _ttls(store, "s1")) == {"meta"} and ttls["meta"] > 590, ttls


async def test_the_ttls_slide_as_after_a_create_and_an_append(store: Store) -> None:
    engine = ContextEngine(ContextSettings(session_ttl_s=600), store)
    await engine.open_session(TASK, session_id="s0", goal="g", goal_message_id="t0:goal", view=True)  # loads it
    # A goal stating a known fact writes the entities hash too: it gets the TTL with the rest.
    await engine.open_session(TASK, session_id="s1", goal="my order id is 12345", goal_message_id="g", view=True)
    ttls = await _ttls(store, "s1")
    assert set(ttls) == {"meta", "log", "idx", "entities", "dedupe"} and min(ttls.values()) > 590, ttls
    # The refresh is recorded: the next appends (a dedupe entry, a label) within TTL_REFRESH_S expire nothing.
    before = await commands(store)
    await engine.append_message_once(TASK, "s1", Message(Role.USER, "my order id is 777"), client_message_id="m1")
    await engine.append_message_viewed(TASK, "s1", Message(Role.ASSISTANT, "noted"))
    assert (await spent(store, before))["expire"] == 0
    # A session whose goal has no label: its first label (a new key) refreshes every key, together.
    await engine.open_session(TASK, session_id="s2", goal="hello", goal_message_id="g", view=True)
    before = await commands(store)
    await engine.append_message_once(TASK, "s2", Message(Role.USER, "my order id is 777"))
    assert (await spent(store, before))["expire"] == 6  # every key (as after a create and an append)
    ttls = await _ttls(store, "s2")
    assert set(ttls) == {"meta", "log", "idx", "entities", "dedupe"} and max(ttls.values()) - min(ttls.values()) <= 1
