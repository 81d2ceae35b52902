"""The records every fixture has (redis_v1.json on): four tasks (SUCCEEDED after an offloaded tool
output, parked on an approval, FAILED, still queued), their idempotency records and approvals, and
the session of the finished task with its payloads. Part of make_fixtures.py."""

from __future__ import annotations

from agentmesh.chat import ToolCall, Usage
from agentmesh.errors import AgentmeshError, ErrorCode, Violation
from agentmesh.payloads import StoredPayload
from context_svc.engine import BudgetRequest, ContextEngine
from context_svc.model import Message, Role
from context_svc.model import ToolOutcome as ContextOutcome
from dispatcher_svc.model import CallStage, EventKind, ModelReply, Phase, TaskStatus
from dispatcher_svc.tasks import CallState as CursorCall
from dispatcher_svc.tasks import Cursor, fields_of
from tests.compat.fixture_common import (
    AGENT,
    BINARY_PAYLOAD,
    ORDERS_LOOKUP,
    REFUNDS_ISSUE,
    SESSION,
    T0,
    TASK_DONE,
    TASK_FAILED,
    TASK_PARKED,
    Dispatcher,
    Tools,
    context_caller,
    dispatcher_outcome,
    event,
    idempotency_key,
    order_document,
    pending_of,
    tool_call_state,
)
from tool_svc.approvals import RequireApproval
from tool_svc.model import Caller, Output, Pending, Produced


async def write_task_done(d: Dispatcher, tools: Tools, engine: ContextEngine) -> None:
    """SUCCEEDED after one tool call whose output tool_svc offloaded; its session records the turns."""
    task_id, running = TASK_DONE, TaskStatus.RUNNING
    goal = "Find out the refund status of order ORD-1042 and tell the customer."
    msg_id = await d.create(task_id, goal, T0, take=True)
    assert msg_id is not None
    fence = (await d.acquire(task_id, T0 + 100)).fence
    caller = context_caller(task_id)
    await engine.create_session(
        caller,
        session_id=SESSION,
        agent_id=AGENT,
        goal=goal,
        sub_goals=("look up the order", "explain the refund status"),
        system_prompt="You are a customer-support agent. Be brief and precise.",
        budget=BudgetRequest(max_context_tokens=2000, keep_recent_messages=3, summary_trigger_tokens=200),
    )
    turns = [
        (Role.USER, "Hi, I'm Jane Doe (jane.doe@example.com). My order ORD-1042 arrived damaged 😞."),
        (Role.ASSISTANT, "I'm sorry to hear that. What exactly was damaged?"),
        (Role.USER, "The blender jar is cracked. I paid EUR 45.99 on 2025-12-20. Où en est le remboursement ?"),
    ]
    for role, text in turns:
        await engine.append_message(caller, SESSION, Message(role=role, content=text))
    cursor = Cursor(phase=Phase.THINKING, step=1, ctx_count=len(turns))
    await d.tasks.commit(
        task_id,
        fence=fence,
        fields=fields_of(step=1, usage=Usage(), cursor=cursor, update_ms=T0 + 200),
        events=[event(task_id, EventKind.STEP_STARTED, T0 + 200, running, 1, "step 1")],
    )

    call = ToolCall(id="call_lookup_1", name="orders_lookup", arguments_json='{"order_id": "ORD-1042"}')
    reply = ModelReply(
        text="Let me look up the order.",
        tool_calls=(call,),
        usage=Usage(812, 41),
        model="compat-model-1",
        finish_reason="tool_calls",
    )
    cursor.reply, cursor.reply_appended, cursor.phase = reply, False, Phase.ACTING
    cursor.calls = [CursorCall(call, state=CallStage.RUNNING)]
    cursor.signatures = {call.signature(): 1}
    usage = reply.usage
    await d.tasks.commit(
        task_id,
        fence=fence,
        fields=fields_of(step=1, usage=usage, cursor=cursor, update_ms=T0 + 300),
        events=[
            event(
                task_id,
                EventKind.CONTEXT,
                T0 + 300,
                running,
                1,
                "context 412 tokens (budget 2000; raw would be ~412); 2 tools offered",
                usage=Usage(412, 0),
                attributes={"context_tokens": "412", "tools_offered": "orders_lookup,refunds_issue"},
            ),
            event(
                task_id,
                EventKind.MODEL_REPLY,
                T0 + 300,
                running,
                1,
                "model asked for 1 tool call(s): orders_lookup",
                usage=reply.usage,
                attributes={"model": reply.model, "finish_reason": reply.finish_reason},
            ),
            event(
                task_id, EventKind.TOOL_CALL, T0 + 300, running, 1, f"{call.name} {call.arguments_json}", tool_call=call
            ),
        ],
    )
    index, _ = await engine.append_message(
        caller,
        SESSION,
        Message(
            role=Role.ASSISTANT,
            content=reply.text,
            # The model's call as the dispatcher holds it: the message stores its id, name and
            # arguments_json (a ToolCallRecord in 5f7b90b, agentmesh.chat.ToolCall since).
            tool_calls=(call,),
        ),
    )
    cursor.reply_appended, cursor.ctx_count = True, index + 1

    state = tool_call_state(ORDERS_LOOKUP, call, task_id=task_id, key=idempotency_key(task_id, 1, 0, call), goal=goal)
    result = await tools.execute(state, Produced("structured", value=order_document()), step=1, index=0)
    out = result.outcome
    assert isinstance(out, Output) and out.ref is not None, "the output must be offloaded"
    outcome = dispatcher_outcome(call, result)
    index, _, _ = await engine.append_tool_result(
        caller,
        SESSION,
        ContextOutcome(
            tool_call_id=call.id,
            tool_name=call.name,
            ref=StoredPayload(
                ref_id=out.ref.ref_id,
                session_id=out.ref.session_id,
                size_bytes=out.ref.size_bytes,
                media_type=out.ref.media_type,
                sha256=out.ref.sha256,
                expire_at=out.ref.expire_at,
            ),
            digest=out.digest,
            structured=True,
        ),
    )
    cursor.calls[0].state, cursor.calls[0].outcome, cursor.ctx_count = CallStage.APPENDED, outcome, index + 1
    result_event = event(
        task_id,
        EventKind.TOOL_RESULT,
        T0 + 400,
        running,
        1,
        f"{call.name} -> ok, output {out.ref.size_bytes} bytes stored as {out.ref.ref_id}",
        tool_call=call,
        tool_result=outcome,
    )
    cursor.pinned = ["read_payload"]
    cursor.raw_tokens = 1730
    cursor.step, cursor.phase, cursor.reply, cursor.calls = 2, Phase.THINKING, None, []
    await d.tasks.commit(
        task_id,
        fence=fence,
        fields=fields_of(step=2, usage=usage, cursor=cursor, update_ms=T0 + 400),
        events=[result_event, event(task_id, EventKind.STEP_STARTED, T0 + 400, running, 2, "step 2")],
    )

    answer = "Order ORD-1042: refund REF-778 of EUR 45.99 was approved on 2025-12-22; expect it in 3-5 business days."
    final = ModelReply(text=answer, usage=Usage(1020, 58), model="compat-model-1", finish_reason="stop")
    usage = usage + final.usage
    done = TaskStatus.SUCCEEDED
    await d.tasks.commit(
        task_id,
        fence=fence,
        fields=fields_of(
            status=done,
            step=2,
            usage=usage,
            answer=answer,
            error=None,
            cursor=cursor,
            update_ms=T0 + 500,
            lease_until=0,
        ),
        events=[
            event(
                task_id,
                EventKind.MODEL_REPLY,
                T0 + 500,
                running,
                2,
                f"model answered: {answer}",
                usage=final.usage,
                attributes={"model": final.model, "finish_reason": final.finish_reason},
            ),
            event(task_id, EventKind.ANSWER, T0 + 500, done, 2, answer),
            event(task_id, EventKind.STATUS, T0 + 500, done, 2, "status SUCCEEDED"),
        ],
        ttl_s=d.settings.task_ttl_s,
    )
    await engine.append_message(caller, SESSION, Message(role=Role.ASSISTANT, content=answer))
    await d.queue.done(msg_id)

    # The older turns compacted into the rolling summary, then a BuildContext (which stores the
    # summary's full text as a payload when it has to cut it), and a binary payload of the session.
    summarized, summary = await engine.compact(caller, SESSION)
    assert summarized > 0 and summary is not None, "the session must have a persisted summary"
    await engine.build_context(caller, SESSION)
    await engine.payloads.put(SESSION, BINARY_PAYLOAD, "image/png")


async def write_task_parked(d: Dispatcher, tools: Tools) -> None:
    """WAITING_APPROVAL: the write tool_svc answered with a PendingApproval; indexed for the sweeper."""
    task_id, running, waiting = TASK_PARKED, TaskStatus.RUNNING, TaskStatus.WAITING_APPROVAL
    goal = "Refund EUR 45.99 for order ORD-1042 (damaged blender jar)."
    msg_id = await d.create(task_id, goal, T0 + 1000, take=True)
    assert msg_id is not None
    fence = (await d.acquire(task_id, T0 + 1100)).fence
    cursor = Cursor(phase=Phase.THINKING, step=1)
    await d.tasks.commit(
        task_id,
        fence=fence,
        fields=fields_of(step=1, usage=Usage(), cursor=cursor, update_ms=T0 + 1200),
        events=[event(task_id, EventKind.STEP_STARTED, T0 + 1200, running, 1, "step 1")],
    )
    call = ToolCall(
        id="call_refund_1", name="refunds_issue", arguments_json='{"order_id": "ORD-1042", "amount_cents": 4599}'
    )
    reply = ModelReply(tool_calls=(call,), usage=Usage(640, 37), model="compat-model-1", finish_reason="tool_calls")
    cursor.reply, cursor.reply_appended, cursor.phase = reply, True, Phase.ACTING
    cursor.calls = [CursorCall(call, state=CallStage.RUNNING)]
    cursor.signatures = {call.signature(): 1}
    cursor.ctx_count = 2
    await d.tasks.commit(
        task_id,
        fence=fence,
        fields=fields_of(step=1, usage=reply.usage, cursor=cursor, update_ms=T0 + 1300),
        events=[
            event(
                task_id,
                EventKind.MODEL_REPLY,
                T0 + 1300,
                running,
                1,
                "model asked for 1 tool call(s): refunds_issue",
                usage=reply.usage,
                attributes={"model": reply.model, "finish_reason": reply.finish_reason},
            ),
            event(
                task_id,
                EventKind.TOOL_CALL,
                T0 + 1300,
                running,
                1,
                f"{call.name} {call.arguments_json}",
                tool_call=call,
            ),
        ],
    )
    state = tool_call_state(REFUNDS_ISSUE, call, task_id=task_id, key=idempotency_key(task_id, 1, 0, call), goal=goal)
    result = await tools.execute(state, None, step=1, index=0)
    assert isinstance(result.outcome, Pending)
    pending = pending_of(call, result.outcome)
    cursor.calls[0].state = CallStage.WAITING
    # Indexed before it is parked, as the loop does.
    await d.tasks.index_approval(task_id, pending.approval_id, pending.expire_time_ms)
    await d.tasks.commit(
        task_id,
        fence=fence,
        fields=fields_of(
            status=waiting,
            step=1,
            usage=reply.usage,
            pending=pending,
            cursor=cursor,
            update_ms=T0 + 1400,
            lease_until=0,
        ),
        events=[
            event(
                task_id,
                EventKind.APPROVAL_REQUIRED,
                T0 + 1400,
                waiting,
                1,
                f"{call.name} needs approval {pending.approval_id}: {pending.impact}",
                tool_call=call,
                pending_approval=pending,
            ),
            event(task_id, EventKind.STATUS, T0 + 1400, waiting, 1, "status WAITING_APPROVAL"),
        ],
    )
    await d.queue.done(msg_id)


async def write_task_failed(d: Dispatcher, tools: Tools) -> None:
    """FAILED: a tool error (settled in the idempotency record), then the task's own error."""
    task_id, running, failed = TASK_FAILED, TaskStatus.RUNNING, TaskStatus.FAILED
    goal = "Check whether order ORD-9999 has shipped."
    msg_id = await d.create(task_id, goal, T0 + 2000, take=True)
    assert msg_id is not None
    fence = (await d.acquire(task_id, T0 + 2100)).fence
    cursor = Cursor(phase=Phase.THINKING, step=1)
    call = ToolCall(id="call_lookup_9", name="orders_lookup", arguments_json='{"order_id": "ORD-9999"}')
    reply = ModelReply(tool_calls=(call,), usage=Usage(598, 22), model="compat-model-1", finish_reason="tool_calls")
    cursor.reply, cursor.reply_appended, cursor.phase = reply, True, Phase.ACTING
    cursor.calls = [CursorCall(call, state=CallStage.RUNNING)]
    cursor.signatures = {call.signature(): 1}
    await d.tasks.commit(
        task_id,
        fence=fence,
        fields=fields_of(step=1, usage=reply.usage, cursor=cursor, update_ms=T0 + 2200),
        events=[
            event(task_id, EventKind.STEP_STARTED, T0 + 2200, running, 1, "step 1"),
            event(
                task_id,
                EventKind.MODEL_REPLY,
                T0 + 2200,
                running,
                1,
                "model asked for 1 tool call(s): orders_lookup",
                usage=reply.usage,
                attributes={"model": reply.model, "finish_reason": reply.finish_reason},
            ),
            event(
                task_id,
                EventKind.TOOL_CALL,
                T0 + 2200,
                running,
                1,
                f"{call.name} {call.arguments_json}",
                tool_call=call,
            ),
        ],
    )
    tool_error = AgentmeshError(
        ErrorCode.UPSTREAM_NOT_FOUND,
        "orders backend: no order 'ORD-9999'",
        violations=[
            Violation(
                path="$.order_id",
                rule="exists",
                expected="a known order id",
                actual="'ORD-9999'",
                hint="search by the customer's email with orders_search",
            )
        ],
        fallback_tool="orders_search",
        metadata={"upstream_status": "404"},
    )
    state = tool_call_state(ORDERS_LOOKUP, call, task_id=task_id, key=idempotency_key(task_id, 1, 0, call), goal=goal)
    result = await tools.execute(state, tool_error, step=1, index=0)
    outcome = dispatcher_outcome(call, result)
    cursor.calls[0].state, cursor.calls[0].outcome = CallStage.DONE, outcome
    cursor.calls[0].note = "the order does not exist; try orders_search"
    cursor.failed = {call.signature(): ErrorCode.UPSTREAM_NOT_FOUND.name}
    error = AgentmeshError(
        ErrorCode.DEADLINE_EXCEEDED,
        "task ran past its deadline of 3600 s",
        retry_after=1.5,
        metadata={"task_timeout_s": "3600"},
    )
    await d.tasks.commit(
        task_id,
        fence=fence,
        fields=fields_of(
            status=failed, step=1, usage=reply.usage, error=error, cursor=cursor, update_ms=T0 + 2300, lease_until=0
        ),
        events=[
            event(
                task_id,
                EventKind.TOOL_RESULT,
                T0 + 2300,
                running,
                1,
                f"{call.name} -> UPSTREAM_NOT_FOUND (ENGINEERING): {tool_error.message}",
                tool_call=call,
                tool_result=outcome,
            ),
            event(task_id, EventKind.STATUS, T0 + 2300, failed, 1, f"status FAILED: {error}", error=error),
        ],
        ttl_s=d.settings.task_ttl_s,
    )
    await d.queue.done(msg_id)


async def write_decided_approval(tools: Tools) -> str:
    """An approval an operator approved (no idempotency key: nothing else refers to it)."""
    call = ToolCall(
        id="call_refund_0", name="refunds_issue", arguments_json='{"order_id": "ORD-1001", "amount_cents": 1250}'
    )
    state = tool_call_state(REFUNDS_ISSUE, call, task_id=TASK_PARKED, key="", goal="Refund order ORD-1001.")
    pending = await RequireApproval(tools.approvals)(state)
    assert isinstance(pending, Pending)
    approver = Caller(subject="ops-jane", environment="dev", roles=frozenset({"operator"}))
    _, expired = await tools.approvals.decide(
        pending.approval_id,
        approve=True,
        approver=approver,
        reason="verified the damage photos",
        arguments_sha256=pending.arguments_sha256,
    )
    assert not expired
    return pending.approval_id
