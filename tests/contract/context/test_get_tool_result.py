"""GetToolResult (issue 39): a tool result reads back as it was appended, typed, so a resumed run
continues with it instead of running the call again; NOT_FOUND when none was appended."""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import timestamp_pb2

from agentmesh.errors import ErrorCode
from agentmesh.v1 import common_pb2, context_pb2
from tests.contract.context.conftest import Ctx, expect_error

K = context_pb2


async def _append(ctx: Ctx, result: common_pb2.ToolResult) -> Any:
    return await ctx.stub.AppendToolResult(
        K.AppendToolResultRequest(session_id="s1", result=result), metadata=ctx.agent_md
    )


async def _read(ctx: Ctx, call_id: str) -> Any:
    request = K.GetToolResultRequest(session_id="s1", tool_call_id=call_id)
    return await ctx.stub.GetToolResult(request, metadata=ctx.agent_md)


async def test_every_kind_of_result_reads_back_as_appended(ctx: Ctx) -> None:
    await ctx.create()
    limited = common_pb2.ToolResult(
        tool_call_id="c1",
        tool_name="calc",
        error=common_pb2.ErrorDetail(
            code=common_pb2.ERROR_CODE_RATE_LIMITED, message="slow down", fallback_tool="calc2"
        ),
        correction=common_pb2.Correction(next_step=common_pb2.NEXT_STEP_USE_FALLBACK, fallback_tool="calc2"),
    )
    ok = common_pb2.ToolResult(
        tool_call_id="c2",
        tool_name="calc",
        output=common_pb2.ToolOutput(inline='{"sum": 3}', result_type=common_pb2.RESULT_TYPE_STRUCTURED, redacted=True),
    )
    pending = common_pb2.ToolResult(
        tool_call_id="c3",
        tool_name="deploy",
        pending_approval=common_pb2.PendingApproval(
            approval_id="ap1", impact="restarts checkout", expire_time=timestamp_pb2.Timestamp(seconds=2_000_000_000)
        ),
    )
    big = "ERROR pool exhausted\n" * 400
    offloaded = common_pb2.ToolResult(
        tool_call_id="c4",
        tool_name="logs",
        output=common_pb2.ToolOutput(inline=big, result_type=common_pb2.RESULT_TYPE_TEXT),
    )
    for result in (limited, ok, pending, offloaded):
        appended = await _append(ctx, result)
        got = await _read(ctx, result.tool_call_id)
        assert (got.index, got.token_count) == (appended.index, appended.token_count)
        if result is offloaded:
            # Offloaded here: it reads back as its ref and digest, and appending the original again
            # is still a repeat (already_appended), not a conflict.
            assert got.result.output.ref.ref_id == appended.ref.ref_id
            assert got.result.output.digest and "pool exhausted" in got.result.output.digest
            assert got.result.output.result_type == common_pb2.RESULT_TYPE_TEXT
            assert (await _append(ctx, result)).already_appended
            continue
        assert got.result.tool_call_id == result.tool_call_id and got.result.tool_name == result.tool_name
        assert got.result.WhichOneof("outcome") == result.WhichOneof("outcome")
        if result is limited:
            assert got.result.error.code == common_pb2.ERROR_CODE_RATE_LIMITED
            assert got.result.error.fallback_tool == "calc2"
            assert got.result.correction == limited.correction
        if result is ok:
            assert got.result.output == result.output
        if result is pending:
            assert got.result.pending_approval == result.pending_approval
        # What reads back appends as a repeat of the original (same content): the truth round-trips.
        again = await _append(ctx, got.result)
        assert (again.index, again.already_appended) == (appended.index, True)


async def test_a_call_with_no_appended_result_is_not_found(ctx: Ctx) -> None:
    await ctx.create()
    err = await expect_error(_read(ctx, "never"), grpc.StatusCode.NOT_FOUND)
    assert err.code == ErrorCode.NOT_FOUND and err.metadata["tool_call_id"] == "never"
    err = await expect_error(_read(ctx, ""), grpc.StatusCode.INVALID_ARGUMENT)
    assert err.code == ErrorCode.INVALID_REQUEST
    request = K.GetToolResultRequest(session_id="nope", tool_call_id="c1")
    await expect_error(ctx.stub.GetToolResult(request, metadata=ctx.agent_md), grpc.StatusCode.NOT_FOUND)
