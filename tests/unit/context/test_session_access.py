"""Who may use a session (issue 20; context_svc/access.py), on the test Redis without gRPC: the owner and
the attached tasks are recorded at creation, the append script applies the rule itself, sessions of an
earlier release keep its rule, and the attached set is read fresh even from this process's cache."""

from __future__ import annotations

import pytest

from agentmesh.config import ContextSettings
from agentmesh.errors import PermissionDeniedError
from agentmesh.store import Store
from context_svc.access import check_access
from context_svc.engine import ContextEngine
from context_svc.model import Caller, Message, Role, SessionAccess

OPERATOR = Caller("oncall", is_operator=True)
TASK = Caller("ops", agent_id="ops", task_id="t-1", creator="alice")
OTHER_TASK = Caller("ops", agent_id="ops", task_id="t-2", creator="alice")
"""Another task of the same agent, started by the same operator: still not this session's."""


def test_the_rule() -> None:
    attached = SessionAccess(agent_id="ops", tasks=("t-1",))
    check_access(TASK, "s1", attached)
    check_access(OPERATOR, "s1", attached)
    for caller in (OTHER_TASK, Caller("ops", agent_id="ops"), Caller("alice")):
        with pytest.raises(PermissionDeniedError) as caught:
            check_access(caller, "s1", attached)
        assert caught.value.missing_permission == "session:s1"
    # No task attached (created by a token of no task): operators only.
    with pytest.raises(PermissionDeniedError):
        check_access(TASK, "s1", SessionAccess(agent_id="ops", tasks=()))
    # Created before sessions recorded their tasks: the agent's tokens, whatever their task.
    legacy = SessionAccess(agent_id="ops", tasks=None)
    check_access(OTHER_TASK, "s1", legacy)
    with pytest.raises(PermissionDeniedError):
        check_access(Caller("billing", agent_id="billing", task_id="t-1"), "s1", legacy)


async def test_create_records_the_owner_and_the_task(store: Store) -> None:
    engine = ContextEngine(ContextSettings(), store)
    session, _ = await engine.create_session(TASK, session_id="s1", goal="g")
    assert (session.owner, session.tasks, session.agent_id) == ("alice", ("t-1",), "ops")
    stored, _ = await engine.get_session(TASK, "s1")
    assert (stored.owner, stored.tasks) == ("alice", ("t-1",))
    # A token that is no task's: the session is its subject's, and no task's token may use it.
    direct, _ = await engine.create_session(Caller("ops", agent_id="ops"), session_id="s2", goal="g")
    assert (direct.owner, direct.tasks) == ("ops", ())
    with pytest.raises(PermissionDeniedError):
        await engine.build_context(TASK, "s2")
    await engine.build_context(OPERATOR, "s2")


async def test_the_append_script_refuses_another_task(store: Store) -> None:
    engine = ContextEngine(ContextSettings(), store)
    await engine.create_session(TASK, session_id="s1", goal="g")
    message = Message(Role.USER, "hi", token_count=2)
    encoding = ContextSettings().encoding
    for caller_task in ("t-2", ""):
        with pytest.raises(PermissionDeniedError):  # in Redis, in the step that appends
            await engine.sessions.append(
                "s1", message, [], caller_agent="ops", caller_task=caller_task, encoding=encoding
            )
    assert (
        await engine.sessions.append("s1", message, [], caller_agent="ops", caller_task="t-1", encoding=encoding) == 0
    )
    assert await engine.sessions.append("s1", message, [], caller_agent=None, encoding=encoding) == 1
    with pytest.raises(PermissionDeniedError):
        await engine.append_message(OTHER_TASK, "s1", Message(Role.USER, "hi"))
    session, _ = await engine.get_session(OPERATOR, "s1")
    assert session.message_count == 2


async def test_a_session_of_an_earlier_release_keeps_its_agents_rule(store: Store) -> None:
    engine = ContextEngine(ContextSettings(), store)
    await engine.create_session(TASK, session_id="s1", goal="g")
    await store.redis.hdel(engine.sessions.key("s1", "meta"), "tasks", "owner")
    fresh = ContextEngine(ContextSettings(), store)
    session, _ = await fresh.get_session(OTHER_TASK, "s1")
    assert (session.tasks, session.owner) == (None, "")
    await fresh.append_message(OTHER_TASK, "s1", Message(Role.USER, "still mine"))
    await fresh.build_context(OTHER_TASK, "s1")
    with pytest.raises(PermissionDeniedError):
        await fresh.build_context(Caller("billing", agent_id="billing", task_id="t-1"), "s1")


async def test_the_attached_set_is_read_fresh_by_a_process_that_cached_the_session(store: Store) -> None:
    engine = ContextEngine(ContextSettings(), store)
    await engine.create_session(TASK, session_id="s1", goal="g")
    await engine.build_context(TASK, "s1")  # this process now holds the session's immutable state
    with pytest.raises(PermissionDeniedError):
        await engine.build_context(OTHER_TASK, "s1")
    # A later feature (a continued conversation) attaches another task: the rule follows at once.
    await store.redis.hset(engine.sessions.key("s1", "meta"), "tasks", '["t-1", "t-2"]')
    view = await engine.build_context(OTHER_TASK, "s1")
    assert view.messages
