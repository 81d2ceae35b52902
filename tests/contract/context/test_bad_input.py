"""Bad input and failures through gRPC: each gets a clear typed error, nothing is half-written."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest

from agentmesh.dev.localredis import LocalRedis
from agentmesh.errors import ErrorCode
from agentmesh.payloads import PayloadStore
from agentmesh.v1 import common_pb2, context_pb2
from tests.contract.context.conftest import Ctx, expect_error

K = context_pb2
USER, ASSISTANT, TOOL = common_pb2.ROLE_USER, common_pb2.ROLE_ASSISTANT, common_pb2.ROLE_TOOL
INVALID, NOT_FOUND = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND
REF = "pl_" + "ab" * 32


async def test_unknown_session_is_not_found_everywhere(ctx: Ctx) -> None:
    md = ctx.agent_md
    message = common_pb2.Message(role=USER, content="hello")
    result = common_pb2.ToolResult(tool_call_id="c1", tool_name="t", output=common_pb2.ToolOutput(inline="ok"))
    calls = [
        ctx.stub.GetSession(K.GetSessionRequest(session_id="nope"), metadata=md),
        ctx.stub.AppendMessage(K.AppendMessageRequest(session_id="nope", message=message), metadata=md),
        ctx.stub.AppendToolResult(K.AppendToolResultRequest(session_id="nope", result=result), metadata=md),
        ctx.stub.BuildContext(K.BuildContextRequest(session_id="nope"), metadata=md),
        ctx.stub.GetPayload(K.GetPayloadRequest(session_id="nope", ref_id=REF), metadata=md),
        ctx.stub.Compact(K.CompactRequest(session_id="nope"), metadata=md),
    ]
    for call in calls:
        err = await expect_error(call, NOT_FOUND)
        assert err.code == ErrorCode.NOT_FOUND and err.metadata["session_id"] == "nope"
    deleted = await ctx.stub.DeleteSession(K.DeleteSessionRequest(session_id="nope"), metadata=md)
    assert not deleted.deleted
    # An append to a missing session creates nothing.
    assert ctx.svc.host.store is not None
    assert [k async for k in ctx.svc.host.store.redis.scan_iter("*sess:{nope}*")] == []


async def test_budgets_negative_too_small_or_unknown_encoding_name_the_field(ctx: Ctx) -> None:
    await ctx.create()
    for tokens in (0, -1, -12000, 10):
        err = await expect_error(ctx.build(budget=tokens), INVALID)
        assert err.violations[0].path == "budget_tokens"
    # Unset is "the session's max_context_tokens" (the contract of BuildContextRequest).
    assert (await ctx.build()).budget_tokens == 12000
    bad_settings = [
        (K.BudgetSettings(max_context_tokens=-5), "budget.max_context_tokens"),
        (K.BudgetSettings(max_context_tokens=100), "budget.max_context_tokens"),
        (K.BudgetSettings(keep_recent_messages=-1), "budget.keep_recent_messages"),
        (K.BudgetSettings(summary_trigger_tokens=-1), "budget.summary_trigger_tokens"),
        (
            K.BudgetSettings(max_context_tokens=1000, reserve_system_prompt_tokens=2000),
            "budget.reserve_system_prompt_tokens",
        ),
        # The plain name would make tiktoken download its ranks: refused, never fetched.
        (K.BudgetSettings(encoding="cl100k_base"), "budget.encoding"),
        (K.BudgetSettings(encoding="no_such_encoding"), "budget.encoding"),
    ]
    for i, (budget, field) in enumerate(bad_settings):
        err = await expect_error(ctx.create(f"b{i}", budget=budget), INVALID)
        assert err.violations[0].path == field, field
    err = await expect_error(ctx.create("g", goal="  "), INVALID)
    assert err.violations[0].path == "goal"
    err = await expect_error(ctx.create("bad id{x}"), INVALID)
    assert err.violations[0].path == "session_id"


async def test_malformed_messages_and_results(ctx: Ctx) -> None:
    await ctx.create()
    md = ctx.agent_md
    cases = [
        (common_pb2.Message(content="no role"), "message.role"),
        (common_pb2.Message(role=TOOL, content="no call id"), "message.tool_call_id"),
        (common_pb2.Message(role=USER, content="   "), "message.content"),
        (common_pb2.Message(role=USER, content="x", tool_calls=[common_pb2.ToolCall(id="c", name="t")]),
         "message.tool_calls"),
        (common_pb2.Message(role=ASSISTANT, tool_calls=[common_pb2.ToolCall(id="", name="t")]),
         "message.tool_calls[0]"),
    ]  # fmt: skip
    for message, field in cases:
        err = await expect_error(
            ctx.stub.AppendMessage(K.AppendMessageRequest(session_id="s1", message=message), metadata=md), INVALID
        )
        assert err.violations[0].path == field
    results = [
        (common_pb2.ToolResult(tool_call_id="c1", tool_name="t"), "result.outcome"),
        (common_pb2.ToolResult(tool_name="t", output=common_pb2.ToolOutput(inline="x")), "result.tool_call_id"),
    ]
    for result, field in results:
        err = await expect_error(
            ctx.stub.AppendToolResult(K.AppendToolResultRequest(session_id="s1", result=result), metadata=md), INVALID
        )
        assert err.violations[0].path == field
    got = await ctx.stub.GetSession(K.GetSessionRequest(session_id="s1"), metadata=md)
    assert got.session.message_count == 0


async def test_payload_refs_unknown_other_session_expired_malformed(ctx: Ctx) -> None:
    await ctx.create("s1")
    await ctx.create("s2")
    await ctx.call("s1", "c1", "logs", {})
    ref = (await ctx.tool("s1", "c1", "logs", "line\n" * 2000)).ref.ref_id
    md = ctx.agent_md

    async def read(session: str, ref_id: str, **selector: Any) -> Any:
        return await ctx.stub.GetPayload(
            K.GetPayloadRequest(session_id=session, ref_id=ref_id, **selector), metadata=md
        )

    assert (await read("s1", ref)).content == b"line\n" * 2000
    for session, ref_id in (("s2", ref), ("s1", REF)):  # another session's ref; an unknown ref
        err = await expect_error(read(session, ref_id), NOT_FOUND)
        assert err.metadata["ref_id"] == ref_id
    err = await expect_error(read("s1", "pl_../../etc"), INVALID)
    assert err.violations[0].path == "ref_id" and err.metadata["ref_id"] == "pl_../../etc"
    for selector, field in (
        ({"line_range": K.LineRange(start=0, end=3)}, "line_range.start"),
        ({"line_range": K.LineRange(start=5, end=3)}, "line_range.end"),
        ({"line_range": K.LineRange(start=9999, end=10000)}, "line_range.start"),
        ({"byte_range": K.ByteRange(start=5, end=5)}, "byte_range.end"),
        ({"json_path": "$.a"}, "json_path"),  # text content is not JSON
    ):
        err = await expect_error(read("s1", ref, **selector), INVALID)
        assert err.violations[0].path == field
    # Expiry is Redis's TTL: make it due now, then the ref is NOT_FOUND like an unknown one.
    store = ctx.svc.host.store
    assert store is not None
    key = store.keys.payload("s1", ref[3:])
    assert 0 < await store.redis.ttl(key) <= 86400
    await store.redis.pexpire(key, 1)
    deadline = time.monotonic() + 5
    while await store.redis.exists(key) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    err = await expect_error(read("s1", ref), NOT_FOUND)
    assert err.metadata["ref_id"] == ref


async def test_payload_over_the_maximum_is_refused_and_nothing_is_written(
    start_context: Callable[..., Awaitable[Ctx]],
) -> None:
    ctx = await start_context({"context": {"max_payload_bytes": 100_000}})
    await ctx.create()
    store = ctx.svc.host.store
    assert store is not None
    for append in (
        ctx.tool("s1", "c1", "logs", "x" * 150_000),
        ctx.say("s1", USER, "y" * 150_000),
    ):
        err = await expect_error(append, grpc.StatusCode.RESOURCE_EXHAUSTED)
        assert err.code == ErrorCode.PAYLOAD_TOO_LARGE
        assert err.metadata["max_bytes"] == "100000"
    assert [k async for k in store.redis.scan_iter("*payload*")] == []  # SCAN: every node of a cluster
    assert (
        await ctx.stub.GetSession(K.GetSessionRequest(session_id="s1"), metadata=ctx.agent_md)
    ).session.message_count == 0
    # Just under the limit is fine.
    assert (await ctx.tool("s1", "c1", "logs", "x" * 99_000)).ref.size_bytes == 99_000


async def test_non_utf8_is_flagged_never_a_crash(ctx: Ctx) -> None:
    await ctx.create()
    # A string field with bad UTF-8 on the wire: INVALID_ARGUMENT, and the service carries on.
    raw = K.AppendMessageRequest(session_id="s1", message=common_pb2.Message(role=USER, content="AAAA"))
    data = raw.SerializeToString().replace(b"AAAA", b"\xff\xfe\xfd\xfc")
    call = ctx.svc.channel.unary_unary(
        "/agentmesh.v1.ContextService/AppendMessage",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    err = await expect_error(call(data, metadata=ctx.agent_md), INVALID)
    assert err.violations[0].path == "request" and "UTF-8" in err.message

    # Bytes that are not UTF-8, stored by tool_svc at the source: the digest says so, reads are exact.
    assert ctx.svc.host.store is not None
    content = b"INFO ok\n" * 300 + b"ERROR bad byte \xff\xfe here\n" + b"INFO ok\n" * 300
    stored = await PayloadStore(ctx.svc.host.store).put("s1", content, "text/plain; charset=utf-8")
    await ctx.call("s1", "c1", "logs", {})
    ref = common_pb2.PayloadRef(ref_id=stored.ref_id, session_id="s1", size_bytes=stored.size_bytes)
    result = common_pb2.ToolResult(tool_call_id="c1", tool_name="logs", output=common_pb2.ToolOutput(ref=ref))
    await ctx.stub.AppendToolResult(K.AppendToolResultRequest(session_id="s1", result=result), metadata=ctx.agent_md)
    view = await ctx.build()
    observation = next(m.content for m in view.messages if m.role == TOOL)
    assert "not valid UTF-8" in observation and "L301" in observation
    line = await ctx.stub.GetPayload(
        K.GetPayloadRequest(session_id="s1", ref_id=stored.ref_id, line_range=K.LineRange(start=301, end=301)),
        metadata=ctx.agent_md,
    )
    assert line.content == b"ERROR bad byte \xff\xfe here\n"


async def test_redis_down_is_unavailable_and_nothing_is_half_written(
    start_context: Callable[..., Awaitable[Ctx]], fresh_redis: LocalRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The environment wins over configuration overrides: point it at the Redis this test may freeze.
    monkeypatch.setenv("AGENTMESH_REDIS_URL", fresh_redis.url)
    ctx = await start_context({"redis": {"socket_timeout_s": 0.5, "connect_timeout_s": 0.5}})
    await ctx.create("s1")
    for i in range(3):
        await ctx.say("s1", USER, f"message {i}")
    os.kill(fresh_redis.pid, signal.SIGSTOP)  # frozen: every command times out
    try:
        started = time.monotonic()
        err = await expect_error(ctx.say("s1", USER, "lost?"), grpc.StatusCode.UNAVAILABLE)
        assert err.code == ErrorCode.UNAVAILABLE and err.retryable
        await expect_error(ctx.create("s2", system_prompt="p" * 5000), grpc.StatusCode.UNAVAILABLE)
        await expect_error(ctx.build("s1"), grpc.StatusCode.UNAVAILABLE)
        assert time.monotonic() - started < 15  # bounded: never a hang
    finally:
        os.kill(fresh_redis.pid, signal.SIGCONT)
    # Commands may have reached Redis before it froze: each write is one script, so every session
    # is either absent or whole, and the log, its index and the counters agree.
    store = ctx.svc.host.store
    assert store is not None
    r = store.redis
    meta = await r.hgetall("am:sess:{s2}:meta")
    assert meta == {} or {b"goal", b"budget", b"epoch", b"encoding", b"agent_id"} <= set(meta)
    count = int((await r.hget("am:sess:{s1}:meta", "message_count")) or 0)
    assert count in (3, 4)
    assert await r.llen("am:sess:{s1}:log") == await r.llen("am:sess:{s1}:idx") == count
    # And the service serves again once Redis is back.
    view = await ctx.build("s1")
    assert len(view.messages) == 1 + count


@pytest.mark.parametrize("role", [USER, ASSISTANT])
async def test_large_user_or_assistant_content_is_offloaded_too(ctx: Ctx, role: int) -> None:
    await ctx.create()
    text = "\n".join(f"row {i}: value {i * 3}" for i in range(2000))
    appended = await ctx.say("s1", role, text)
    assert appended.token_count < 1000
    view = await ctx.build()
    assert "stored as pl_" in view.messages[-1].content


async def test_unknown_encoding_in_configuration_refuses_to_start(
    start_context: Callable[..., Awaitable[Ctx]],
) -> None:
    from agentmesh.config import ConfigError

    with pytest.raises(ConfigError, match=r"context\.encoding: unknown tiktoken encoding 'cl100k_base'"):
        await start_context({"context": {"encoding": "cl100k_base"}})
