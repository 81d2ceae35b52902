"""An append may bring the context built right after it (issue 45): `build_budget_tokens` on
AppendMessage / AppendToolResult answers with BuildContext's view, so the dispatcher's next step
needs no BuildContext call of its own."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from agentmesh.v1 import common_pb2, context_pb2
from tests.contract.context.conftest import Ctx

K = context_pb2


def _texts(view: context_pb2.ContextView) -> list[str]:
    return [m.content for m in view.messages]


def _plain(view: context_pb2.ContextView) -> dict[str, Any]:
    """The view as a dict, less the time stamps of the messages assembled at build time (the system block's)."""
    plain = json_format.MessageToDict(view)
    for message in plain["messages"]:
        if message["role"] == "ROLE_SYSTEM":
            message.pop("createTime", None)
    return plain


async def _build(ctx: Ctx, budget: int | None = None) -> context_pb2.ContextView:
    request = K.BuildContextRequest(session_id="s1", budget_tokens=budget)
    view: context_pb2.ContextView = (await ctx.stub.BuildContext(request, metadata=ctx.agent_md)).view
    return view


async def test_an_appends_view_is_the_one_build_context_returns_after_it(ctx: Ctx) -> None:
    await ctx.create()
    request = K.AppendMessageRequest(
        session_id="s1",
        message=common_pb2.Message(role=common_pb2.ROLE_USER, content="where is order 42?"),
        client_message_id="goal-1",
        build_budget_tokens=4000,
    )
    appended = await ctx.stub.AppendMessage(request, metadata=ctx.agent_md)
    assert appended.HasField("view")
    assert "where is order 42?" in _texts(appended.view)
    assert _plain(appended.view) == _plain(await _build(ctx, 4000))
    # A repeat (same id, same content) appends nothing and still brings the view.
    again = await ctx.stub.AppendMessage(request, metadata=ctx.agent_md)
    assert again.already_appended and _plain(again.view) == _plain(appended.view)


async def test_a_tool_results_view_holds_the_result_and_zero_takes_the_sessions_budget(ctx: Ctx) -> None:
    await ctx.create()
    await ctx.call("s1", "c1", "lookup", {"id": 42})
    request = K.AppendToolResultRequest(
        session_id="s1",
        result=common_pb2.ToolResult(
            tool_call_id="c1",
            tool_name="lookup",
            output=common_pb2.ToolOutput(inline="order 42: paid", result_type=common_pb2.RESULT_TYPE_TEXT),
        ),
        build_budget_tokens=0,
    )
    appended = await ctx.stub.AppendToolResult(request, metadata=ctx.agent_md)
    assert any("order 42: paid" in text for text in _texts(appended.view))
    built = await _build(ctx)
    assert appended.view.budget_tokens == built.budget_tokens
    assert _texts(appended.view) == _texts(built)


async def test_without_build_budget_tokens_no_view_is_built(ctx: Ctx) -> None:
    await ctx.create()
    appended = await ctx.say("s1", common_pb2.ROLE_USER, "hello")
    assert not appended.HasField("view")


async def test_a_negative_budget_is_refused_before_anything_is_appended(ctx: Ctx) -> None:
    await ctx.create()
    request = K.AppendMessageRequest(
        session_id="s1",
        message=common_pb2.Message(role=common_pb2.ROLE_USER, content="hello"),
        build_budget_tokens=-1,
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await ctx.stub.AppendMessage(request, metadata=ctx.agent_md)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "build_budget_tokens" in (caught.value.details() or "")
    got = await ctx.stub.GetSession(K.GetSessionRequest(session_id="s1"), metadata=ctx.agent_md)
    assert got.session.message_count == 0


async def test_create_session_appends_the_goal_once_and_brings_the_view(ctx: Ctx) -> None:
    request = K.CreateSessionRequest(
        session_id="s1", goal="where is order 42?", goal_message_id="t1:goal", build_budget_tokens=0
    )
    created = await ctx.stub.CreateSession(request, metadata=ctx.agent_md)
    goal = created.goal_message
    assert (goal.index, goal.already_appended) == (0, False) and goal.token_count > 0
    assert _texts(goal.view)[-1] == "where is order 42?"
    assert _plain(goal.view) == _plain(await _build(ctx))
    # A retry (the answer was lost) finds the session and the goal: nothing appended twice.
    again = await ctx.stub.CreateSession(request, metadata=ctx.agent_md)
    assert (again.goal_message.index, again.goal_message.already_appended) == (0, True)
    # So does the AppendMessage a dispatcher sends when CreateSession did not append it.
    said = await ctx.stub.AppendMessage(
        K.AppendMessageRequest(
            session_id="s1",
            message=common_pb2.Message(role=common_pb2.ROLE_USER, content="where is order 42?"),
            client_message_id="t1:goal",
        ),
        metadata=ctx.agent_md,
    )
    assert (said.index, said.already_appended) == (0, True)
    got = await ctx.stub.GetSession(K.GetSessionRequest(session_id="s1"), metadata=ctx.agent_md)
    assert got.session.message_count == 1


async def test_create_session_without_goal_message_id_appends_nothing(ctx: Ctx) -> None:
    created = await ctx.stub.CreateSession(K.CreateSessionRequest(session_id="s1", goal="g"), metadata=ctx.agent_md)
    assert not created.HasField("goal_message")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await ctx.stub.CreateSession(
            K.CreateSessionRequest(session_id="s2", goal="g", build_budget_tokens=0), metadata=ctx.agent_md
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await ctx.stub.CreateSession(
            K.CreateSessionRequest(session_id="s3", goal="g", goal_message_id="has space"), metadata=ctx.agent_md
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "goal_message_id" in (caught.value.details() or "")
    for refused in ("s2", "s3"):  # refused before the session was created
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await ctx.stub.GetSession(K.GetSessionRequest(session_id=refused), metadata=ctx.agent_md)
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND
