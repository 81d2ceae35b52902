"""AppendMessage's `following_results` (issue 45): an assistant message and the results of its tool
calls in one call, each appended exactly as AppendToolResult appends it, the view after the last."""

from __future__ import annotations

import json

import grpc

from agentmesh.v1 import common_pb2, context_pb2
from tests.contract.context.conftest import Ctx, expect_error

K = context_pb2


def _call(call_id: str, name: str = "lookup") -> common_pb2.ToolCall:
    return common_pb2.ToolCall(id=call_id, name=name, arguments_json=json.dumps({"id": 42}))


def _result(call_id: str, output: str, name: str = "lookup") -> common_pb2.ToolResult:
    return common_pb2.ToolResult(
        tool_call_id=call_id,
        tool_name=name,
        output=common_pb2.ToolOutput(inline=output, result_type=common_pb2.RESULT_TYPE_TEXT),
    )


def _reply(
    calls: list[common_pb2.ToolCall], results: list[common_pb2.ToolResult], build_budget_tokens: int | None = None
) -> context_pb2.AppendMessageRequest:
    message = common_pb2.Message(role=common_pb2.ROLE_ASSISTANT, content="", tool_calls=calls)
    return K.AppendMessageRequest(
        session_id="s1",
        message=message,
        client_message_id="t1:1:reply",
        following_results=results,
        build_budget_tokens=build_budget_tokens,
    )


async def _messages(ctx: Ctx) -> list[common_pb2.Message]:
    """The session's log as the view shows it (all of it fits the budget), less the system block."""
    return [m for m in (await ctx.build()).messages if m.role != common_pb2.ROLE_SYSTEM]


async def _count(ctx: Ctx) -> int:
    got = await ctx.stub.GetSession(K.GetSessionRequest(session_id="s1"), metadata=ctx.agent_md)
    return int(got.session.message_count)


async def test_the_message_and_its_results_land_in_order_with_the_view_after_the_last(ctx: Ctx) -> None:
    await ctx.create()
    await ctx.say("s1", common_pb2.ROLE_USER, "where is order 42?")
    request = _reply(
        [_call("c1"), _call("c2", "track")],
        [_result("c1", "order 42: paid"), _result("c2", "in transit", "track")],
        build_budget_tokens=0,
    )
    appended = await ctx.stub.AppendMessage(request, metadata=ctx.agent_md)
    assert (appended.index, appended.already_appended) == (1, False)
    assert [(r.index, r.already_appended) for r in appended.results] == [(2, False), (3, False)]
    assert all(r.token_count > 0 for r in appended.results)
    assert not any(r.HasField("view") for r in appended.results)
    texts = [m.content for m in appended.view.messages]
    assert any("in transit" in t for t in texts) and any("order 42: paid" in t for t in texts)
    assert texts == [m.content for m in (await ctx.build()).messages]  # BuildContext's view right after
    log = await _messages(ctx)
    assert [m.role for m in log] == [
        common_pb2.ROLE_USER,
        common_pb2.ROLE_ASSISTANT,
        common_pb2.ROLE_TOOL,
        common_pb2.ROLE_TOOL,
    ]
    assert [m.tool_call_id for m in log[2:]] == ["c1", "c2"]
    # A repeat (the answer was lost) appends nothing: every position is the original's.
    again = await ctx.stub.AppendMessage(request, metadata=ctx.agent_md)
    assert again.already_appended and [(r.index, r.already_appended) for r in again.results] == [(2, True), (3, True)]
    # So does the dispatcher's fallback: AppendToolResult of a result that came with its message.
    alone = await ctx.stub.AppendToolResult(
        K.AppendToolResultRequest(session_id="s1", result=_result("c1", "order 42: paid")), metadata=ctx.agent_md
    )
    assert (alone.index, alone.already_appended) == (2, True)
    assert await _count(ctx) == 4


async def test_a_result_answering_no_call_of_the_message_is_refused_before_anything_lands(ctx: Ctx) -> None:
    await ctx.create()
    for results in (
        [_result("c9", "stray")],  # no such call in the message
        [_result("c1", "a"), _result("c1", "b")],  # two results for one call
    ):
        error = await expect_error(
            ctx.stub.AppendMessage(_reply([_call("c1")], results), metadata=ctx.agent_md),
            grpc.StatusCode.INVALID_ARGUMENT,
        )
        assert "following_results" in error.message
    # A user message carries no calls: any result is refused.
    user = K.AppendMessageRequest(
        session_id="s1",
        message=common_pb2.Message(role=common_pb2.ROLE_USER, content="hi"),
        following_results=[_result("c1", "x")],
    )
    await expect_error(ctx.stub.AppendMessage(user, metadata=ctx.agent_md), grpc.StatusCode.INVALID_ARGUMENT)
    assert await _count(ctx) == 0


async def test_a_conflicting_result_fails_after_the_message_landed_and_a_repeat_finds_it(ctx: Ctx) -> None:
    await ctx.create()
    await ctx.call("s1", "c0", "lookup", {"id": 1})
    await ctx.tool("s1", "c1", "lookup", "RATE_LIMITED earlier")  # another owner's result for c1
    request = _reply([_call("c1")], [_result("c1", "order 42: paid")])
    error = await expect_error(
        ctx.stub.AppendMessage(request, metadata=ctx.agent_md), grpc.StatusCode.FAILED_PRECONDITION
    )
    assert "c1" in error.message
    count = await _count(ctx)
    assert count == 3  # the call, the other result, and the message (not its result)
    # The dispatcher then appends the reply alone (found: nothing twice) and reads the stored result.
    plain = _reply([_call("c1")], [])
    again = await ctx.stub.AppendMessage(plain, metadata=ctx.agent_md)
    assert again.already_appended and again.index == count - 1 and not again.results
    assert await _count(ctx) == count


async def test_a_large_result_is_offloaded_and_its_ref_answered(ctx: Ctx) -> None:
    await ctx.create()
    big = "x" * 200_000
    request = _reply([_call("c1")], [_result("c1", big)])
    appended = await ctx.stub.AppendMessage(request, metadata=ctx.agent_md)
    (result,) = appended.results
    assert result.ref.ref_id.startswith("pl_") and result.ref.size_bytes == len(big)
    assert result.token_count < 1000
