"""Sessions are for the tokens of their tasks (issue 20; context_svc/access.py), through gRPC: a token of
another task of the same agent is refused on every session RPC; the session's own task and operators
are not; a session an earlier release created keeps that release's rule (its agent's tokens)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from agentmesh.v1 import common_pb2, context_pb2
from tests.contract.context.conftest import AGENT, TASK, Ctx, expect_error

K = context_pb2
USER = common_pb2.ROLE_USER


def every_rpc(ctx: Ctx, md: Any, ref_id: str) -> list[Callable[[], Any]]:
    """Each session RPC on session s1, to call (a gRPC call starts when made); DeleteSession last."""
    result = common_pb2.ToolResult(
        tool_call_id="c9",
        tool_name="calc",
        output=common_pb2.ToolOutput(inline="2", result_type=common_pb2.RESULT_TYPE_TEXT),
    )
    message = common_pb2.Message(role=USER, content="hi")
    return [
        lambda: ctx.stub.BuildContext(K.BuildContextRequest(session_id="s1"), metadata=md),
        lambda: ctx.stub.GetSession(K.GetSessionRequest(session_id="s1"), metadata=md),
        lambda: ctx.stub.AppendMessage(K.AppendMessageRequest(session_id="s1", message=message), metadata=md),
        lambda: ctx.stub.AppendToolResult(K.AppendToolResultRequest(session_id="s1", result=result), metadata=md),
        lambda: ctx.stub.GetToolResult(K.GetToolResultRequest(session_id="s1", tool_call_id="c1"), metadata=md),
        lambda: ctx.stub.GetPayload(K.GetPayloadRequest(session_id="s1", ref_id=ref_id), metadata=md),
        lambda: ctx.stub.Compact(K.CompactRequest(session_id="s1"), metadata=md),
        lambda: ctx.stub.DeleteSession(K.DeleteSessionRequest(session_id="s1"), metadata=md),
    ]


async def open_session(ctx: Ctx) -> str:
    """Session s1, created by task TASK's token, with one offloaded payload; its ref id."""
    await ctx.create("s1")
    await ctx.call("s1", "c1", "query_logs", {"service": "payment-svc"})
    appended = await ctx.tool("s1", "c1", "query_logs", "ERROR pool exhausted\n" * 400)
    assert appended.ref.ref_id
    return str(appended.ref.ref_id)


async def test_a_token_of_another_task_cannot_use_this_tasks_session(ctx: Ctx) -> None:
    ref_id = await open_session(ctx)
    other_task = ctx.svc.metadata(("agent",), agent_id=AGENT, subject=AGENT, task_id="t-other", creator="alice")
    no_task = ctx.svc.metadata(("agent",), agent_id=AGENT, subject=AGENT)
    for md in (other_task, no_task):
        for call in every_rpc(ctx, md, ref_id):
            err = await expect_error(call(), grpc.StatusCode.PERMISSION_DENIED)
            assert err.missing_permission == "session:s1"
    # Nothing was appended or deleted by the refused calls.
    got = await ctx.stub.GetSession(K.GetSessionRequest(session_id="s1"), metadata=ctx.agent_md)
    assert got.session.message_count == 2
    # A repeated CreateSession from the other task does not attach it either.
    await expect_error(
        ctx.stub.CreateSession(
            K.CreateSessionRequest(session_id="s1", goal="fix the checkout incident"), metadata=other_task
        ),
        grpc.StatusCode.PERMISSION_DENIED,
    )
    # The session's own task may, and so may an operator (who deletes it last).
    for call in every_rpc(ctx, ctx.agent_md, ref_id)[:-1]:
        await call()
    assert (await every_rpc(ctx, ctx.operator_md, ref_id)[-1]()).deleted


async def test_a_session_of_an_earlier_release_keeps_its_agents_rule(ctx: Ctx) -> None:
    ref_id = await open_session(ctx)
    redis = ctx.svc.host.store.redis  # type: ignore[union-attr]
    meta = ctx.svc.host.store.keys.session("s1", "meta")  # type: ignore[union-attr]
    assert await redis.hget(meta, "tasks") == f'["{TASK}"]'.encode()
    assert await redis.hget(meta, "owner") == b"alice"  # the creator claim of the task's token
    await redis.hdel(meta, "tasks", "owner")  # as the previous release stored it
    # Tasks in flight across the upgrade keep their sessions: any token of the session's agent.
    same_agent = ctx.svc.metadata(("agent",), agent_id=AGENT, subject=AGENT, task_id="t-other")
    for call in every_rpc(ctx, same_agent, ref_id)[:-1]:
        await call()
    other_agent = ctx.svc.metadata(("agent",), agent_id="billing-agent", subject="billing-agent", task_id=TASK)
    for call in every_rpc(ctx, other_agent, ref_id):
        await expect_error(call(), grpc.StatusCode.PERMISSION_DENIED)
