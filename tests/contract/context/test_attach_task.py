"""AttachTask (issue 24; context_svc/attach.py) through gRPC: who may continue a session, the
compare-and-set on its newest task (of concurrent attaches from one expectation exactly one wins), what
an attached task's token may then do, the TTL it refreshes, the bounded attached set, and sessions an
earlier release stored."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import grpc

from agentmesh.v1 import common_pb2, context_pb2
from context_svc.attach import MAX_ATTACHED
from tests.contract.context.conftest import AGENT, TASK, Ctx, expect_error

K = context_pb2


def attach(ctx: Ctx, task_id: str, md: Any, *, session_id: str = "s1", agent_id: str = AGENT, **expect: Any) -> Any:
    request = K.AttachTaskRequest(session_id=session_id, task_id=task_id, agent_id=agent_id, **expect)
    return ctx.stub.AttachTask(request, metadata=md)


def owner(ctx: Ctx, subject: str = "alice") -> Any:
    """The token of a person, as the dispatcher forwards a StartTask caller's (no role beyond agent)."""
    return ctx.svc.metadata(("agent",), subject=subject)


async def test_the_owner_continues_the_session_and_the_new_tasks_token_may_use_it(ctx: Ctx) -> None:
    await ctx.create("s1")  # by task TASK, started by alice: alice owns s1
    await ctx.say("s1", common_pb2.ROLE_USER, "first turn")
    t2 = ctx.svc.metadata(("agent",), agent_id=AGENT, subject=AGENT, task_id="t2", creator="alice")
    await expect_error(
        ctx.stub.BuildContext(K.BuildContextRequest(session_id="s1"), metadata=t2), grpc.StatusCode.PERMISSION_DENIED
    )

    # Without an expectation: not attached, and told the newest task (the session's own id) and its age.
    first = await attach(ctx, "t2", owner(ctx))
    assert (first.attached, first.newest_task_id, first.generation) == (False, "s1", 0)
    assert first.newest_age.ToTimedelta().total_seconds() >= 0
    done = await attach(ctx, "t2", owner(ctx), expected_task_id="s1", expected_generation=0)
    assert (done.attached, done.newest_task_id, done.generation) == (True, "t2", 1)
    assert done.newest_age.ToTimedelta().total_seconds() == 0

    # t2's token now uses the session; the first task's token still does (it is attached).
    await ctx.stub.AppendMessage(
        K.AppendMessageRequest(
            session_id="s1", message=common_pb2.Message(role=common_pb2.ROLE_USER, content="second")
        ),
        metadata=t2,
    )
    view = (await ctx.stub.BuildContext(K.BuildContextRequest(session_id="s1"), metadata=t2)).view
    assert [m.content for m in view.messages][-2:] == ["first turn", "second"]
    got = await ctx.stub.GetSession(K.GetSessionRequest(session_id="s1"), metadata=ctx.agent_md)
    assert got.session.newest_task_id == "t2"

    # A repeat (the same task) is a confirmation: attached, the generation moves on.
    again = await attach(ctx, "t2", owner(ctx))
    assert (again.attached, again.generation) == (True, 2)
    # A stale expectation changes nothing and names the newest.
    stale = await attach(ctx, "t3", owner(ctx), expected_task_id="s1", expected_generation=0)
    assert (stale.attached, stale.newest_task_id, stale.generation) == (False, "t2", 2)
    # An operator may continue anyone's session.
    by_operator = await attach(ctx, "t3", ctx.operator_md, expected_task_id="t2", expected_generation=2)
    assert by_operator.attached and by_operator.generation == 3


async def test_who_may_not(ctx: Ctx) -> None:
    await ctx.create("s1")
    others = {
        "another person": owner(ctx, "mallory"),
        "the session's own task": ctx.agent_md,  # a task's token is not its creator
        "another agent": ctx.svc.metadata(("agent",), agent_id="billing", subject="billing", task_id="tb"),
    }
    for name, md in others.items():
        err = await expect_error(attach(ctx, "t2", md, expected_task_id="s1"), grpc.StatusCode.PERMISSION_DENIED)
        assert err.missing_permission == "session:s1", name
        assert "only its owner" in err.message
    # The owner may not attach a task of another agent: the session is its agent's.
    err = await expect_error(attach(ctx, "t2", owner(ctx), agent_id="billing"), grpc.StatusCode.PERMISSION_DENIED)
    assert err.message == f"session s1 belongs to agent {AGENT}, not billing"
    await expect_error(attach(ctx, "t2", owner(ctx), session_id="nope"), grpc.StatusCode.NOT_FOUND)
    for bad in ({"session_id": "bad id"}, {"task_id": "t 2"}, {"agent_id": ""}):
        fields: dict[str, Any] = {"session_id": "s1", "task_id": "t2", "agent_id": AGENT, **bad}
        await expect_error(
            ctx.stub.AttachTask(K.AttachTaskRequest(**fields), metadata=owner(ctx)), grpc.StatusCode.INVALID_ARGUMENT
        )
    await expect_error(
        attach(ctx, "t2", owner(ctx), expected_task_id="s1", expected_generation=-1), grpc.StatusCode.INVALID_ARGUMENT
    )
    # Nothing changed.
    got = await ctx.stub.GetSession(K.GetSessionRequest(session_id="s1"), metadata=ctx.operator_md)
    assert got.session.newest_task_id == "s1"


async def test_of_concurrent_attaches_from_one_expectation_exactly_one_wins(ctx: Ctx) -> None:
    await ctx.create("s1")
    newest, expected = "s1", 0
    for round_ in range(5):
        replies = await asyncio.gather(
            *(
                attach(ctx, f"t{round_}-{i}", owner(ctx), expected_task_id=newest, expected_generation=expected)
                for i in range(12)
            )
        )
        won = [r for r in replies if r.attached]
        assert len(won) == 1, replies
        newest, expected = won[0].newest_task_id, won[0].generation
        assert all(r.newest_task_id == newest and r.generation == expected for r in replies if not r.attached)
    redis: Any = ctx.svc.host.store.redis  # type: ignore[union-attr]
    tasks = await redis.hget(ctx.svc.host.store.keys.session("s1", "meta"), "tasks")  # type: ignore[union-attr]
    assert len(json.loads(tasks)) == 1 + 5  # the opening task and the five winners, no loser


async def test_an_attach_refreshes_the_session_ttl_and_keeps_the_newest_tasks(start_context: Any) -> None:
    ctx: Ctx = await start_context({"context": {"session_ttl_s": 1000}, "dispatcher": {"task_ttl_s": 1000}})
    await ctx.create("s1")
    await ctx.say("s1", common_pb2.ROLE_USER, "hello")
    redis: Any = ctx.svc.host.store.redis  # type: ignore[union-attr]
    keys = ctx.svc.host.store.keys  # type: ignore[union-attr]
    for part in ("meta", "log", "idx"):
        await redis.expire(keys.session("s1", part), 5)
    newest, generation = "s1", 0
    for i in range(MAX_ATTACHED + 10):
        reply = await attach(ctx, f"t{i}", owner(ctx), expected_task_id=newest, expected_generation=generation)
        assert reply.attached
        newest, generation = reply.newest_task_id, reply.generation
    for part in ("meta", "log", "idx"):
        assert 990 <= await redis.ttl(keys.session("s1", part)) <= 1000
    attached = json.loads(await redis.hget(keys.session("s1", "meta"), "tasks"))
    assert attached == [f"t{i}" for i in range(10, MAX_ATTACHED + 10)]
    # The newest task's token uses the session; the first one, dropped, no longer does.
    newest_md = ctx.svc.metadata(("agent",), agent_id=AGENT, subject=AGENT, task_id=newest)
    await ctx.stub.BuildContext(K.BuildContextRequest(session_id="s1"), metadata=newest_md)
    await expect_error(
        ctx.stub.BuildContext(K.BuildContextRequest(session_id="s1"), metadata=ctx.agent_md),
        grpc.StatusCode.PERMISSION_DENIED,
    )


async def test_sessions_of_earlier_releases(ctx: Ctx) -> None:
    await ctx.create("s1")
    redis = ctx.svc.host.store.redis  # type: ignore[union-attr]
    meta = ctx.svc.host.store.keys.session("s1", "meta")  # type: ignore[union-attr]
    # Before issue 20: no owner, no attached set. Only operators may continue it, and it keeps its rule.
    await redis.hdel(meta, "tasks", "owner")
    await expect_error(attach(ctx, "t2", owner(ctx), expected_task_id="s1"), grpc.StatusCode.PERMISSION_DENIED)
    reply = await attach(ctx, "t2", ctx.operator_md, expected_task_id="s1", expected_generation=0)
    assert reply.attached
    assert await redis.hget(meta, "tasks") is None
    same_agent = ctx.svc.metadata(("agent",), agent_id=AGENT, subject=AGENT, task_id="t-any")
    await ctx.stub.BuildContext(K.BuildContextRequest(session_id="s1"), metadata=same_agent)
    # Before this issue (issue 20's format): an owner and an attached set, no newest: the opening task's.
    await ctx.create("s2")
    meta2 = ctx.svc.host.store.keys.session("s2", "meta")  # type: ignore[union-attr]
    assert await redis.hget(meta2, "newest") is None
    got = await ctx.stub.GetSession(K.GetSessionRequest(session_id="s2"), metadata=ctx.agent_md)
    assert got.session.newest_task_id == "s2"
    first = await attach(ctx, "t2", owner(ctx), session_id="s2")
    assert (first.attached, first.newest_task_id, first.generation) == (False, "s2", 0)
    assert (await attach(ctx, TASK, owner(ctx), session_id="s2")).attached is False  # TASK is not "s2"
