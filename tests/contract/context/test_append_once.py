"""Appends are idempotent, through gRPC (issue 18): AppendToolResult once per tool_call_id,
AppendMessage once per client_message_id; a repeat with other content is FAILED_PRECONDITION."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2

from agentmesh.errors import ErrorCode
from agentmesh.rpc.status import rich_details
from agentmesh.v1 import common_pb2, context_pb2
from tests.contract.context.conftest import Ctx, expect_error

USER = common_pb2.ROLE_USER
K = context_pb2


def _result(call_id: str, output: str, *, attempts: int = 1, replayed: bool = False) -> common_pb2.ToolResult:
    return common_pb2.ToolResult(
        tool_call_id=call_id,
        tool_name="lookup",
        output=common_pb2.ToolOutput(inline=output, result_type=common_pb2.RESULT_TYPE_TEXT),
        stats=common_pb2.ExecutionStats(
            attempts=attempts, duration=duration_pb2.Duration(nanos=attempts * 1_000_000), replayed=replayed
        ),
    )


async def _append_result(ctx: Ctx, result: common_pb2.ToolResult) -> Any:
    request = K.AppendToolResultRequest(session_id="s1", result=result)
    return await ctx.stub.AppendToolResult(request, metadata=ctx.agent_md)


async def _say(ctx: Ctx, content: str, client_message_id: str = "") -> Any:
    request = K.AppendMessageRequest(
        session_id="s1", message=common_pb2.Message(role=USER, content=content), client_message_id=client_message_id
    )
    return await ctx.stub.AppendMessage(request, metadata=ctx.agent_md)


async def _count(ctx: Ctx) -> int:
    got = await ctx.stub.GetSession(K.GetSessionRequest(session_id="s1"), metadata=ctx.agent_md)
    return int(got.session.message_count)


async def test_a_repeated_tool_result_returns_the_original_position(ctx: Ctx) -> None:
    await ctx.create()
    await ctx.call("s1", "c1", "lookup", {"id": 42})
    first = await _append_result(ctx, _result("c1", "order 42: paid"))
    # The dispatcher's retry after a lost reply: replayed by tool_svc, other stats, same result.
    again = await _append_result(ctx, _result("c1", "order 42: paid", attempts=3, replayed=True))
    assert (first.index, first.already_appended) == (1, False)
    assert (again.index, again.token_count, again.already_appended) == (1, first.token_count, True)
    assert await _count(ctx) == 2


async def test_a_repeated_large_tool_result_returns_the_same_ref(ctx: Ctx) -> None:
    await ctx.create()
    log = "GET /checkout 502 upstream reset\n" * 400
    first = await ctx.tool("s1", "c1", "kubectl_logs", log)
    again = await ctx.tool("s1", "c1", "kubectl_logs", log)
    assert first.ref.ref_id and again.ref == first.ref
    assert (again.index, again.token_count, again.already_appended) == (first.index, first.token_count, True)
    assert await _count(ctx) == 1


async def test_a_tool_result_with_other_content_is_failed_precondition(ctx: Ctx) -> None:
    await ctx.create()
    await _say(ctx, "what is order 42?")
    await _append_result(ctx, _result("c1", "order 42: paid"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _append_result(ctx, _result("c1", "order 42: refunded"))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    detail = rich_details(caught.value).detail
    assert detail is not None, "the status must carry an ErrorDetail"
    assert detail.code == common_pb2.ERROR_CODE_FAILED_PRECONDITION
    assert "c1" in detail.message and "position 1" in detail.message
    assert detail.metadata["index"] == "1" and detail.metadata["tool_call_id"] == "c1"
    assert await _count(ctx) == 2


async def test_ten_concurrent_identical_appends_land_once(ctx: Ctx) -> None:
    await ctx.create()
    results = await asyncio.gather(*(_append_result(ctx, _result("c1", "order 42: paid")) for _ in range(10)))
    assert {r.index for r in results} == {0}
    assert sorted(r.already_appended for r in results) == [False] + [True] * 9
    messages = await asyncio.gather(*(_say(ctx, "go ahead", client_message_id="u-7") for _ in range(10)))
    assert {m.index for m in messages} == {1}
    assert sorted(m.already_appended for m in messages) == [False] + [True] * 9
    assert await _count(ctx) == 2
    view = await ctx.build()
    assert [m.content for m in view.messages if m.role == USER] == ["go ahead"]


async def test_append_message_with_a_client_message_id(ctx: Ctx) -> None:
    await ctx.create()
    first = await _say(ctx, "restart checkout", client_message_id="u-1")
    again = await _say(ctx, "restart checkout", client_message_id="u-1")
    assert (first.index, first.already_appended) == (0, False)
    assert (again.index, again.token_count, again.already_appended) == (0, first.token_count, True)
    err = await expect_error(
        _say(ctx, "restart payments", client_message_id="u-1"), grpc.StatusCode.FAILED_PRECONDITION
    )
    assert err.code == ErrorCode.FAILED_PRECONDITION
    assert err.metadata["index"] == "0" and err.metadata["client_message_id"] == "u-1"
    other = await _say(ctx, "restart checkout", client_message_id="u-2")
    assert (other.index, other.already_appended) == (1, False)
    # Without an id: no dedupe, the same message twice is two messages (as before).
    plain = [await _say(ctx, "status?") for _ in range(2)]
    assert [(p.index, p.already_appended) for p in plain] == [(2, False), (3, False)]
    assert await _count(ctx) == 4


@pytest.mark.parametrize("bad", ["x" * 129, "has space", "tab\t", "line\nbreak", "\x07bell", "zero\u200bwidth"])
async def test_a_bad_client_message_id_is_invalid_argument(ctx: Ctx, bad: str) -> None:
    await ctx.create()
    err = await expect_error(_say(ctx, "hello", client_message_id=bad), grpc.StatusCode.INVALID_ARGUMENT)
    assert [v.path for v in err.violations] == ["client_message_id"]
    assert await _count(ctx) == 0


async def test_the_index_goes_with_the_session(ctx: Ctx) -> None:
    store = ctx.svc.host.store
    assert store is not None
    await ctx.create()
    await _append_result(ctx, _result("c1", "order 42: paid"))
    assert await store.redis.exists("am:sess:{s1}:dedupe") == 1
    meta_ttl, dedupe_ttl = await store.redis.ttl("am:sess:{s1}:meta"), await store.redis.ttl("am:sess:{s1}:dedupe")
    assert dedupe_ttl > 0 and abs(dedupe_ttl - meta_ttl) <= 1
    deleted = await ctx.stub.DeleteSession(K.DeleteSessionRequest(session_id="s1"), metadata=ctx.agent_md)
    assert deleted.deleted
    assert [k async for k in store.redis.scan_iter("*{s1}*")] == []  # SCAN: every node of a cluster
    await ctx.create()
    fresh = await _append_result(ctx, _result("c1", "another life"))
    assert (fresh.index, fresh.already_appended) == (0, False)


async def test_appends_refresh_every_key_of_the_session_together_at_most_once_a_minute(ctx: Ctx) -> None:
    """Issue 45: the TTLs are refreshed once per TTL_REFRESH_S, not by every append; an append that
    creates a key (the log, the first label, the first dedupe entry) refreshes them all, so no key is
    ever left without a TTL, and all expire together."""
    store = ctx.svc.host.store
    assert store is not None
    redis = store.redis
    await ctx.create()
    await _say(ctx, "hello")  # creates the log: a refresh
    meta = "am:sess:{s1}:meta"
    first = _text(await redis.hget(meta, "ttl_at"))
    assert first.endswith(":111000"), first  # meta, log, idx had a TTL set; entities, summary, dedupe absent
    await redis.expire(meta, 500)  # so a refresh shows
    await _say(ctx, "again")  # nothing new, refreshed a moment ago: no EXPIRE
    assert await redis.ttl(meta) <= 500
    await _say(ctx, "with an id", client_message_id="u-1")  # creates the dedupe hash: everything refreshed
    assert await redis.ttl(meta) > 500
    assert _text(await redis.hget(meta, "ttl_at")).endswith(":111001")
    for part in ("meta", "log", "idx", "dedupe"):
        assert await redis.ttl(f"am:sess:{{s1}}:{part}") > 500, part
    # A refresh older than TTL_REFRESH_S (or from another replica's future clock) is renewed.
    await redis.hset(meta, "ttl_at", "1:111001")  # 1970
    await redis.expire(meta, 500)
    await _say(ctx, "later")
    assert await redis.ttl(meta) > 500


def _text(value: bytes | str | None) -> str:
    return value.decode() if isinstance(value, bytes) else value or ""
