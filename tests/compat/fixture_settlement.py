"""The records of issue 18's formats (redis_v3.json on): unknown outcomes and their settlements, a call
in flight, and a session whose appends are named (its dedupe hash). Part of make_fixtures.py, which
imports it only when the tree has these features (an ImportError here: the tree predates them).

One task, as dispatcher_svc writes it since then (tool call ids qualified by task, step and index;
every append named by a client_message_id or the result's tool_call_id): its model asks for two
writes; the first times out after it was sent (OUTCOME_UNKNOWN: the task parks on its settlement), an
operator settles it RAN (tool_svc records the call as ran, the task resumes and appends that result);
the second times out too, and the task stays parked on its settlement. Apart from the task, a write
another replica is sending right now: its key `sent`, its heartbeat alive.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentmesh.chat import ToolCall, Usage
from agentmesh.errors import AgentmeshError, ErrorCode
from agentmesh.store import Store
from context_svc.engine import BudgetRequest, ContextEngine
from context_svc.model import Message, Role
from context_svc.model import ToolOutcome as ContextOutcome
from dispatcher_svc.model import CallStage, EventKind, ModelReply, PendingApproval, Phase, TaskStatus
from dispatcher_svc.policy import settlement_request
from dispatcher_svc.run.names import message_id, qualified_call_id
from dispatcher_svc.run.texts import outcome_summary
from dispatcher_svc.tasks import CallState as CursorCall
from dispatcher_svc.tasks import Cursor, fields_of
from tests.compat.fixture_common import (
    AGENT,
    APPROVAL_TTL_S,
    IDEMPOTENCY_TTL_S,
    T0,
    Dispatcher,
    Tools,
    context_caller,
    dispatcher_outcome,
    event,
    idempotency_key,
    tool_call_state,
)
from tests.compat.fixture_dump import describe
from tool_svc.call import CallState
from tool_svc.idempotency import Idempotency, ran_output, settlement_id
from tool_svc.model import Caller, Permission, Stats, ToolDef, ToolResult, outcome_to_json

TASK_SETTLE = "task-compat-settlement"
TASK_IN_FLIGHT = "task-compat-in-flight"
"""Only the key of its call in flight is in the fixture (the task's own records are not)."""
IN_FLIGHT_LEASE_S = 30.0

OPERATOR = Caller(subject="ops-jane", environment="dev", roles=frozenset({"operator"}))

NOTIFY_CUSTOMER = ToolDef(
    name="notify_customer",
    description="Email the customer from a template (a write: an email cannot be unsent).",
    input_schema={
        "type": "object",
        "properties": {"order_id": {"type": "string"}, "template": {"type": "string"}},
        "required": ["order_id", "template"],
        "additionalProperties": False,
    },
    permission=Permission(group="customers", access="write"),
    impact="Sends an email to the customer.",
    executor="builtin",
    builtin="notify_customer",
)
COURIER_PICKUP = ToolDef(
    name="courier_pickup_book",
    description="Book a courier pickup of a returned item (a write: the courier bills it).",
    input_schema={
        "type": "object",
        "properties": {"order_id": {"type": "string"}, "date": {"type": "string"}},
        "required": ["order_id", "date"],
        "additionalProperties": False,
    },
    permission=Permission(group="shipping", access="write"),
    impact="Books and pays a courier pickup.",
    executor="builtin",
    builtin="courier_pickup_book",
)


@dataclass
class Written:
    """What this module wrote, for the manifest (make_fixtures.read_back)."""

    tasks: list[str] = field(default_factory=list)
    sessions: list[str] = field(default_factory=list)
    approvals: list[str] = field(default_factory=list)
    waiting: list[tuple[str, str]] = field(default_factory=list)
    """Tasks parked on a settlement: (task id, settlement id)."""
    appends: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Per session: every named append (what was sent, and the index it got)."""


def upstream_timeout(spec: ToolDef) -> AgentmeshError:
    """What tool_svc.retry answers when the upstream took longer than the tool's timeout."""
    return AgentmeshError(ErrorCode.UPSTREAM_TIMEOUT, f"{spec.name} did not answer within {spec.timeout_s:.3g}s")


async def send_and_lose(tools: Tools, state: CallState) -> ToolResult:
    """ExecuteTool of a write that left the gateway and timed out: tool_svc marks the key sent before its
    executor runs, and answers OUTCOME_UNKNOWN under a settlement (Gateway.execute: Idempotency.after)."""
    assert await tools.idempotency(state) is None, "the key must be new"
    for before_send in state.before_send:
        await before_send()
    assert state.sent, "a write is marked sent before it leaves"
    state.stats.attempts = 1
    outcome = await tools.idempotency.after(state, upstream_timeout(state.spec))
    assert isinstance(outcome, AgentmeshError) and outcome.code == ErrorCode.OUTCOME_UNKNOWN
    result = ToolResult(state.request.call_id, state.spec.name, outcome, state.stats)
    for finalize in reversed(state.finalizers):
        await finalize(result)
    return result


async def settle_ran(tools: Tools, state: CallState, pending: PendingApproval) -> ToolResult:
    """ResolveApproval with RAN: the operator's decision, then the call recorded as ran under its key
    (tool_svc.gateway.Gateway._settle)."""
    record, expired = await tools.approvals.decide(
        pending.approval_id,
        approve=True,
        approver=OPERATOR,
        reason="the customer confirmed the email arrived",
        arguments_sha256=pending.arguments_sha256,
        settlement="ran",
    )
    assert not expired and record.settlement == "ran"
    result = ToolResult(state.request.call_id, state.spec.name, ran_output(OPERATOR.subject), Stats())
    done = {"s": "done", "h": state.call_sha256, "o": outcome_to_json(result)}
    moved = await tools.idempotency.cas(
        state.request.idempotency_key, pending.approval_id, done, IDEMPOTENCY_TTL_S * 1000, states="unknown"
    )
    assert moved, "the key must have been waiting for this settlement"
    return result


async def write_task_settlement(d: Dispatcher, tools: Tools, engine: ContextEngine, written: Written) -> None:
    """Two unknown outcomes in one step: the first settled RAN, the task parked on the second."""
    task_id, running, waiting = TASK_SETTLE, TaskStatus.RUNNING, TaskStatus.WAITING_APPROVAL
    goal = "Tell the customer of order ORD-2077 their replacement shipped, and book the pickup of the broken jar."
    msg_id = await d.create(task_id, goal, T0 + 4000, take=True)
    assert msg_id is not None
    fence = (await d.acquire(task_id, T0 + 4100)).fence
    caller = context_caller(task_id)
    await engine.create_session(
        caller,
        session_id=task_id,
        agent_id=AGENT,
        goal=goal,
        system_prompt="You are a customer-support agent. Never repeat a write whose outcome is unknown.",
        budget=BudgetRequest(max_context_tokens=4000),
    )
    appends: list[dict[str, Any]] = []

    async def append_message(message: Message, part: str) -> int:
        client_message_id = message_id(task_id, part)
        appended = await engine.append_message_once(caller, task_id, message, client_message_id=client_message_id)
        appends.append(
            {
                "client_message_id": client_message_id,
                "role": message.role.value,
                "content": message.content,
                "tool_calls": [c.to_json() for c in message.tool_calls],
                "index": appended.index,
            }
        )
        return appended.index

    ctx = await append_message(Message(role=Role.USER, content=goal), "goal") + 1
    cursor = Cursor(phase=Phase.THINKING, step=1, ctx_count=ctx)
    await d.tasks.commit(
        task_id,
        fence=fence,
        fields=fields_of(step=1, usage=Usage(), cursor=cursor, update_ms=T0 + 4200),
        events=[event(task_id, EventKind.STEP_STARTED, T0 + 4200, running, 1, "step 1")],
    )

    # The model's ids are replaced by session-unique ones before the reply is checkpointed.
    notify = ToolCall(
        qualified_call_id(task_id, 1, 0), NOTIFY_CUSTOMER.name, '{"order_id": "ORD-2077", "template": "shipped"}'
    )
    pickup = ToolCall(
        qualified_call_id(task_id, 1, 1), COURIER_PICKUP.name, '{"order_id": "ORD-2077", "date": "2026-01-05"}'
    )
    reply = ModelReply(
        text="I'll email the customer and book the pickup.",
        tool_calls=(notify, pickup),
        usage=Usage(733, 61),
        model="compat-model-1",
        finish_reason="tool_calls",
    )
    cursor.reply, cursor.reply_appended, cursor.phase = reply, False, Phase.ACTING
    cursor.calls = [CursorCall(notify, state=CallStage.RUNNING), CursorCall(pickup)]
    cursor.signatures = {notify.signature(): 1}
    await d.tasks.commit(
        task_id,
        fence=fence,
        fields=fields_of(step=1, usage=reply.usage, cursor=cursor, update_ms=T0 + 4300),
        events=[
            event(
                task_id,
                EventKind.MODEL_REPLY,
                T0 + 4300,
                running,
                1,
                "model asked for 2 tool call(s): notify_customer, courier_pickup_book",
                usage=reply.usage,
                attributes={"model": reply.model, "finish_reason": reply.finish_reason},
            ),
            event(
                task_id,
                EventKind.TOOL_CALL,
                T0 + 4300,
                running,
                1,
                f"{notify.name} {notify.arguments_json}",
                tool_call=notify,
            ),
        ],
    )
    ctx = await append_message(Message(role=Role.ASSISTANT, content=reply.text, tool_calls=reply.tool_calls), "1:reply")
    cursor.reply_appended, cursor.ctx_count = True, ctx + 1

    async def lose(index: int, spec: ToolDef, call: ToolCall, at: int) -> tuple[CallState, ToolResult, PendingApproval]:
        """The call's outcome is unknown: the task parks on its settlement (DispatcherLoop.apply)."""
        key = idempotency_key(task_id, 1, index, call)
        state = tool_call_state(spec, call, task_id=task_id, key=key, goal=goal)
        result = await send_and_lose(tools, state)
        pending = settlement_request(dispatcher_outcome(call, result), call)
        assert pending is not None and pending.is_settlement
        cursor.calls[index].state = CallStage.WAITING
        await d.tasks.index_approval(task_id, pending.approval_id, pending.expire_time_ms)
        await d.tasks.commit(
            task_id,
            fence=fence,
            fields=fields_of(
                status=waiting, step=1, usage=reply.usage, pending=pending, cursor=cursor, update_ms=at, lease_until=0
            ),
            events=[
                event(
                    task_id,
                    EventKind.APPROVAL_REQUIRED,
                    at,
                    waiting,
                    1,
                    f"{call.name} needs settlement {pending.approval_id} (RAN or NOT_RAN): its outcome is unknown",
                    tool_call=call,
                    pending_approval=pending,
                ),
                event(task_id, EventKind.STATUS, at, waiting, 1, "status WAITING_APPROVAL"),
            ],
        )
        written.approvals.append(pending.approval_id)
        return state, result, pending

    notified, _, first = await lose(0, NOTIFY_CUSTOMER, notify, T0 + 4400)
    await d.queue.done(msg_id)

    # The operator settles RAN; the task resumes with the call recorded as ran (DispatcherService._settle).
    ran = await settle_ran(tools, notified, first)
    tools.note(
        notified,
        ran,
        step=1,
        index=0,
        state="done",
        settlement_id=first.approval_id,
        settlement="ran",
        replays_ran=True,
    )
    cursor.calls[0].state, cursor.calls[0].resolved = CallStage.RUNNING, dispatcher_outcome(notify, ran)
    queued = TaskStatus.PENDING
    await d.tasks.commit(
        task_id,
        fence=fence,
        expect_status=waiting,
        fields=fields_of(status=queued, pending=None, cursor=cursor, update_ms=T0 + 4500),
        events=[
            event(
                task_id,
                EventKind.APPROVAL_RESOLVED,
                T0 + 4500,
                queued,
                1,
                f"settlement {first.approval_id} of {notify.name}: RAN (recorded as ran; not re-sent) by "
                f"{OPERATOR.subject}: the customer confirmed the email arrived",
                tool_call=notify,
                pending_approval=first,
                attributes={"state": "APPROVED", "resolved_by": OPERATOR.subject, "settlement": "ran"},
            ),
            event(task_id, EventKind.STATUS, T0 + 4500, queued, 1, "status PENDING: resuming after the approval"),
        ],
    )
    await d.queue.enqueue(task_id)
    await d.tasks.unindex_approval(task_id, first.approval_id)

    # A worker takes it again: the resolved outcome is appended (once: its call id names it), then the
    # second call goes out, and is lost too.
    [(msg_id, taken)] = await d.queue.read(count=1, block_ms=10)
    assert taken == task_id
    fence = (await d.acquire(task_id, T0 + 4600)).fence
    outcome = cursor.calls[0].resolved
    assert outcome is not None and outcome.output is not None and outcome.output.inline is not None
    ran_note = outcome.output.inline
    cursor.calls[0].state, cursor.calls[0].outcome, cursor.calls[0].resolved = CallStage.DONE, outcome, None
    result = ContextOutcome(tool_call_id=notify.id, tool_name=notify.name, inline=ran_note, structured=True)
    appended = await engine.append_tool_result_once(caller, task_id, result)
    appends.append(
        {
            "tool_call_id": notify.id,
            "tool_name": notify.name,
            "inline": result.inline,
            "structured": True,
            "index": appended.index,
        }
    )
    cursor.calls[0].state, cursor.ctx_count = CallStage.APPENDED, appended.index + 1
    cursor.raw_tokens += appended.token_count
    cursor.calls[1].state = CallStage.RUNNING
    cursor.signatures[pickup.signature()] = 1
    await d.tasks.commit(
        task_id,
        fence=fence,
        fields=fields_of(step=1, usage=reply.usage, cursor=cursor, update_ms=T0 + 4700),
        events=[
            event(
                task_id,
                EventKind.TOOL_RESULT,
                T0 + 4700,
                running,
                1,
                outcome_summary(outcome),
                tool_call=notify,
                tool_result=outcome,
            ),
            event(
                task_id,
                EventKind.TOOL_CALL,
                T0 + 4700,
                running,
                1,
                f"{pickup.name} {pickup.arguments_json}",
                tool_call=pickup,
            ),
        ],
    )
    picked, lost, second = await lose(1, COURIER_PICKUP, pickup, T0 + 4800)
    await d.queue.done(msg_id)
    # The manifest's outcome is what the caller got; a repeat gets the same OUTCOME_UNKNOWN.
    tools.note(picked, lost, step=1, index=1, state="unknown", settlement_id=second.approval_id, generation=0)
    written.tasks.append(task_id)
    written.sessions.append(task_id)
    written.waiting.append((task_id, second.approval_id))
    written.appends[task_id] = appends


async def write_in_flight(store: Store, tools: Tools) -> None:
    """A write another replica is sending now: its key `sent`, its heartbeat alive (not refreshed while
    the fixture is written: the heartbeat period is a third of the lease)."""
    idempotency = Idempotency(
        store,
        tools.approvals,
        ttl_s=IDEMPOTENCY_TTL_S,
        lease_s=IN_FLIGHT_LEASE_S,
        approval_ttl_s=APPROVAL_TTL_S,
        heartbeat_s=IN_FLIGHT_LEASE_S,
        remaining=lambda: 5.0,
    )
    call = ToolCall(
        qualified_call_id(TASK_IN_FLIGHT, 1, 0), COURIER_PICKUP.name, '{"order_id": "ORD-3105", "date": "2026-01-06"}'
    )
    key = idempotency_key(TASK_IN_FLIGHT, 1, 0, call)
    state = tool_call_state(COURIER_PICKUP, call, task_id=TASK_IN_FLIGHT, key=key, goal="Book the ORD-3105 pickup.")
    assert await idempotency(state) is None, "the key must be new"
    for before_send in state.before_send:
        await before_send()
    assert state.sent
    # Its tool and request, as the other records have them; a repeat waits while the heartbeat lives.
    tools.note(
        state,
        None,
        step=1,
        index=0,
        state="sent",
        heartbeat_key=idempotency.hb_key(key),
        owner=state.owner,
        generation=state.generation,
        settlement_id_when_dead=settlement_id(key, state.generation),
    )


async def write_all(d: Dispatcher, tools: Tools, engine: ContextEngine, store: Store) -> Written:
    written = Written()
    await write_task_settlement(d, tools, engine, written)
    await write_in_flight(store, tools)
    return written


async def read_back(d: Dispatcher, tools: Tools, engine: ContextEngine, written: Written) -> dict[str, Any]:
    """What these records read back as through this release's APIs (beside make_fixtures.read_back)."""
    dedupe: dict[str, dict[str, Any]] = {}
    for session_id, appends in written.appends.items():
        dedupe[session_id] = {}
        for named in appends:
            key = f"m:{named['client_message_id']}" if "client_message_id" in named else f"c:{named['tool_call_id']}"
            existing = await engine.sessions.seen(session_id, key)
            assert existing is not None and existing.index == named["index"], key
            dedupe[session_id][key] = {"index": existing.index, "content_hash": existing.content_hash}
    settlements = []
    for task_id, approval_id in written.waiting:
        record = await d.tasks.load(task_id)
        assert record.pending is not None and record.pending.approval_id == approval_id
        settlements.append({"task_id": task_id, "approval_id": approval_id, "pending": describe(record.pending)})
    return {"appends": written.appends, "dedupe": dedupe, "settlements": settlements}
