"""Writes a rolling-upgrade fixture: every Redis key one release writes, as readable JSON.

The records are written through the code's own domain APIs (never by hand), against a throwaway
redis-server, so the fixture holds exactly what that release stores:

- dispatcher_svc: four tasks (task hash with fence, cursor/checkpoint, usage, pending approval,
  error; event stream `0-<seq>`): one SUCCEEDED, one parked in WAITING_APPROVAL (plus its member of
  the `am:tasks:waiting` index), one FAILED, one PENDING whose entry is still in the `am:tasks` queue
  (with the consumer group);
- tool_svc: idempotency records settled `done` (an offloaded output, an error) and `pending` (bound
  to an approval); approval records pending and decided;
- context_svc: a session (meta, message log, index, entities, rolling summary) with its payloads
  (tool_svc's offloaded JSON output, referenced from the log, and a binary one), after a
  compaction and a BuildContext.

Output (deterministic JSON, keys sorted): `keys` maps every Redis key to its type, value and TTL
(`ttl_s`, null when none); byte strings are UTF-8 text, or {"base64": ...} when not UTF-8. `records`
is the manifest: what was written and how this release reads it back (its domain objects, as
JSON); tests/compat/test_rolling_upgrade.py loads `keys` and checks the current code reads the same.
Ids and times are fixed where the APIs take them; the rest (Redis time, random ids) is a snapshot.

Run it against the release to freeze, never against a newer one (a fixture is never regenerated:
a format change gets a NEW file, redis_v2.json, ...). Import only modules that keep their place:

    git worktree add /tmp/compat-old <commit>
    cp tests/compat/make_fixtures.py /tmp/compat-old/tests/compat/
    cd /tmp/compat-old && PYTHONPATH=/tmp/compat-old /path/to/.venv/bin/python \\
        tests/compat/make_fixtures.py --commit <commit> --out /tmp/redis_vN.json
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import dataclasses
import enum
import json
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentmesh.chat import ToolCall, Usage
from agentmesh.config import ContextSettings, DispatcherSettings, RedisSettings
from agentmesh.errors import AgentmeshError, ErrorCode, Violation
from agentmesh.localredis import LocalRedis
from agentmesh.payloads import PayloadStore, StoredPayload
from agentmesh.store import Store
from context_svc.engine import BudgetRequest, ContextEngine
from context_svc.model import Caller as ContextCaller
from context_svc.model import Message, Role
from context_svc.model import ToolOutcome as ContextOutcome
from dispatcher_svc.events import EventLog
from dispatcher_svc.model import (
    CallStage,
    EventKind,
    ExecStats,
    ModelReply,
    PayloadRef,
    PendingApproval,
    Phase,
    TaskEvent,
    TaskStatus,
    ToolOutcome,
    ToolOutput,
)
from dispatcher_svc.queue import TaskQueue
from dispatcher_svc.tasks import CallState as CursorCall
from dispatcher_svc.tasks import Cursor, TaskRecord, TaskStore, fields_of
from tool_svc.approvals import ApprovalBook, RequireApproval
from tool_svc.call import CallState
from tool_svc.idempotency import Idempotency
from tool_svc.model import (
    Caller,
    CallRequest,
    Output,
    Pending,
    Permission,
    Produced,
    ToolDef,
    ToolResult,
    arguments_sha256,
    call_sha256,
)
from tool_svc.offload import Offload
from tool_svc.registry import RegisteredTool
from tool_svc.validation import SchemaCheck

SYSTEM_REDIS_PORT = 6379

AGENT = "agent-compat"
CONSUMER = "compat-replica-1"
T0 = 1_767_225_600_000
"""2026-01-01T00:00:00Z: event and task times are T0 + offsets."""

TASK_DONE = "task-compat-refund"
TASK_PARKED = "task-compat-approval"
TASK_FAILED = "task-compat-failed"
TASK_QUEUED = "task-compat-queued"
SESSION = TASK_DONE
"""The dispatcher's session of a task has the task's id."""

APPROVAL_TTL_S = 10 * 365 * 24 * 3600
"""Long, so the pending approval is still pending whenever the fixture is read (same format)."""
IDEMPOTENCY_TTL_S = 86400
PAYLOAD_TTL_S = 86400

ORDERS_LOOKUP = ToolDef(
    name="orders_lookup",
    description="Look up an order by id: items, shipping, refunds.",
    input_schema={
        "type": "object",
        "properties": {"order_id": {"type": "string"}},
        "required": ["order_id"],
        "additionalProperties": False,
    },
    permission=Permission(group="orders", access="read"),
    executor="builtin",
    builtin="orders_lookup",
    fallback_tool="orders_search",
)
REFUNDS_ISSUE = ToolDef(
    name="refunds_issue",
    description="Issue a refund for an order (a write: needs a human approval).",
    input_schema={
        "type": "object",
        "properties": {"order_id": {"type": "string"}, "amount_cents": {"type": "integer"}},
        "required": ["order_id", "amount_cents"],
        "additionalProperties": False,
    },
    permission=Permission(group="refunds", access="write"),
    impact="Moves money back to the customer's card; cannot be undone.",
    requires_approval=True,
    executor="builtin",
    builtin="refunds_issue",
)


def order_document() -> dict[str, Any]:
    """A tool output over the offload threshold (2048 bytes): stored as a payload by tool_svc."""
    return {
        "order": {
            "id": "ORD-1042",
            "customer": {"name": "Jane Doe", "email": "jane.doe@example.com"},
            "placed": "2025-12-20",
            "total_cents": 4599,
            "currency": "EUR",
            "items": [
                {"sku": f"SKU-{i:04d}", "name": f"Blender part {i} — café edition", "qty": 1 + i % 3} for i in range(40)
            ],
            "refunds": [{"id": "REF-778", "amount_cents": 4599, "status": "approved", "date": "2025-12-22"}],
        },
        "history": [
            {"at": f"2025-12-{20 + i:02d}", "event": e} for i, e in enumerate(["placed", "shipped", "damaged"])
        ],
    }


BINARY_PAYLOAD = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256))
"""Not UTF-8: dumped as base64."""


# --- the JSON encoding of values ------------------------------------------------------------------


def enc(value: bytes | str) -> Any:
    """A byte string as UTF-8 text, or {"base64": ...} when it is not UTF-8."""
    if isinstance(value, str):
        return value
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(value).decode("ascii")}


def text_key(value: bytes | str) -> str:
    """A key, field or id as text (these are always UTF-8 here)."""
    decoded = enc(value)
    if not isinstance(decoded, str):
        raise ValueError(f"a key or field name is not UTF-8: {value!r}")
    return decoded


def describe(value: Any) -> Any:
    """A domain object as JSON: dataclasses by field, enums by name, errors by their attributes."""
    if value is None or (isinstance(value, (bool, int, float, str)) and not isinstance(value, enum.Enum)):
        return value
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, bytes):
        return enc(value)
    if isinstance(value, AgentmeshError):
        return {
            "code": value.code.name,
            "message": value.message,
            "violations": [describe(v) for v in value.violations],
            "retryable": value.retryable,
            "retry_after": value.retry_after,
            "fallback_tool": value.fallback_tool,
            "missing_permission": value.missing_permission,
            "metadata": dict(value.metadata),
        }
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: describe(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): describe(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted((describe(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, (list, tuple)):
        return [describe(v) for v in value]
    raise TypeError(f"cannot describe {type(value).__name__}")


# --- the key dump -----------------------------------------------------------------------------------


async def dump_keys(store: Store) -> dict[str, Any]:
    """Every key of the database: type, value, TTL (whole seconds, rounded up; null when none)."""
    r = store.redis
    out: dict[str, Any] = {}
    names: list[bytes] = sorted([k async for k in r.scan_iter(match="*", count=1000)])
    for raw_key in names:
        key = text_key(raw_key)
        kind_reply: Any = await r.type(raw_key)
        kind = text_key(kind_reply)
        reply: Any
        value: Any
        if kind == "string":
            reply = await r.get(raw_key)
            value = enc(reply)
        elif kind == "hash":
            reply = await r.hgetall(raw_key)
            value = {text_key(f): enc(v) for f, v in reply.items()}
        elif kind == "list":
            reply = await r.lrange(raw_key, 0, -1)
            value = [enc(v) for v in reply]
        elif kind == "set":
            reply = await r.smembers(raw_key)
            value = sorted((enc(v) for v in reply), key=lambda v: json.dumps(v, sort_keys=True))
        elif kind == "zset":
            reply = await r.zrange(raw_key, 0, -1, withscores=True)
            value = [{"member": enc(m), "score": s} for m, s in reply]
        elif kind == "stream":
            value = await dump_stream(store, raw_key)
        else:
            raise ValueError(f"{key}: type {kind} is not dumped")
        pttl: int = await r.pttl(raw_key)
        out[key] = {"type": kind, "ttl_s": math.ceil(pttl / 1000) if pttl > 0 else None, "value": value}
    return out


async def dump_stream(store: Store, raw_key: bytes) -> dict[str, Any]:
    """Entries with their ids, the last generated id and the consumer groups (no pending entries)."""
    r = store.redis
    raw_entries: Any = await r.xrange(raw_key)
    entries = [
        {"id": text_key(entry_id), "fields": {text_key(f): enc(v) for f, v in fields.items()}}
        for entry_id, fields in raw_entries
    ]
    info: Any = await r.xinfo_stream(raw_key)
    raw_groups: Any = await r.xinfo_groups(raw_key)
    groups = []
    for group in raw_groups:
        name = group["name"]
        consumers: Any = await r.xinfo_consumers(raw_key, name)
        if group["pending"]:
            # The loader cannot rebuild a pending entries list: settle everything before dumping.
            raise ValueError(f"{raw_key!r}: group {name!r} has pending entries")
        groups.append(
            {
                "name": text_key(name),
                "last_delivered_id": text_key(group["last-delivered-id"]),
                "consumers": sorted(text_key(c["name"]) for c in consumers),
            }
        )
    return {
        "entries": entries,
        "last_generated_id": text_key(info["last-generated-id"]),
        "groups": groups,
    }


# --- tool_svc ---------------------------------------------------------------------------------------


def tool_caller(task_id: str) -> Caller:
    """The identity a task's ExecuteTool carries (dispatcher_svc.service.mint_task_token)."""
    return Caller(
        subject=AGENT,
        agent_id=AGENT,
        instance=f"{AGENT}/{task_id}",
        environment="dev",
        permissions=("dev:orders:read", "dev:refunds:write"),
        roles=frozenset({"agent"}),
    )


def tool_call_state(spec: ToolDef, call: ToolCall, *, task_id: str, key: str, goal: str) -> CallState:
    arguments = json.loads(call.arguments_json)
    return CallState(
        request=CallRequest(
            call_id=call.id,
            name=spec.name,
            arguments_json=call.arguments_json,
            session_id=task_id,
            idempotency_key=key,
            goal=goal,
        ),
        caller=tool_caller(task_id),
        service_environment="dev",
        tool=RegisteredTool(spec, SchemaCheck.compile(spec.input_schema), None, "config"),
        arguments=arguments,
        arguments_sha256=arguments_sha256(arguments),
        call_sha256=call_sha256(spec.name, arguments),
    )


def idempotency_key(task_id: str, step: int, index: int, call: ToolCall) -> str:
    """The key the dispatcher sends (a copy of dispatcher_svc.loop.idempotency_key, which imports
    modules this script must not)."""
    call_id = "".join(ch for ch in call.id if ch.isprintable() and not ch.isspace() and ch not in "{}")[:96]
    return f"{task_id}:{step}.{index}:{call_id}:{call.arguments_sha256()[:32]}"


class Tools:
    """tool_svc's pipeline steps that write Redis: idempotency, approvals, offload."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.approvals = ApprovalBook(store, APPROVAL_TTL_S)
        self.idempotency = Idempotency(
            store,
            self.approvals,
            ttl_s=IDEMPOTENCY_TTL_S,
            lease_s=30.0,
            approval_ttl_s=APPROVAL_TTL_S,
            remaining=lambda: 5.0,
        )
        self.offload = Offload(PayloadStore(store, ttl_s=PAYLOAD_TTL_S), threshold_bytes=2048)
        self.records: list[dict[str, Any]] = []

    async def execute(
        self, state: CallState, produce: Produced | AgentmeshError | None, *, step: int, index: int
    ) -> ToolResult:
        """Claims the key, runs the step that decides the outcome, settles the key (finalizers).

        `step`, `index`: of the call in its task (what the dispatcher built the key from)."""
        assert await self.idempotency(state) is None, "the key must be new"
        outcome: Output | AgentmeshError | Pending | None
        if produce is None:
            outcome = await RequireApproval(self.approvals)(state)
        elif isinstance(produce, AgentmeshError):
            state.stats.attempts = 1
            outcome = produce
        else:
            state.stats.attempts = 1
            state.produced = produce
            outcome = await self.offload(state)
        assert outcome is not None
        result = ToolResult(state.request.call_id, state.spec.name, outcome, state.stats)
        for finalize in reversed(state.finalizers):
            await finalize(result)
        self.records.append(
            {
                "idempotency_key": state.request.idempotency_key,
                "dispatched_as": {"task_id": state.request.session_id, "step": step, "index": index},
                "tool": {
                    "name": state.spec.name,
                    "description": state.spec.description,
                    "input_schema": state.spec.input_schema,
                    "group": state.spec.permission.group,
                    "access": state.spec.permission.access,
                    "impact": state.spec.impact,
                    "requires_approval": state.spec.requires_approval,
                },
                "request": describe(state.request),
                "caller": describe(state.caller),
                "arguments": state.arguments,
                "call_sha256": state.call_sha256,
                "state": "pending" if isinstance(outcome, Pending) else "done",
                "outcome": describe(outcome),
                "attempts": result.stats.attempts,
                "output_bytes": result.stats.output_bytes,
            }
        )
        return result


def dispatcher_outcome(call: ToolCall, result: ToolResult) -> ToolOutcome:
    """tool_svc's result as the dispatcher holds it (what dispatcher_svc.adapters maps)."""
    stats = ExecStats(attempts=result.stats.attempts, duration_ms=12.5, output_bytes=result.stats.output_bytes)
    outcome = result.outcome
    if isinstance(outcome, AgentmeshError):
        return ToolOutcome(call.id, call.name, error=outcome, stats=stats)
    if isinstance(outcome, Pending):
        return ToolOutcome(call.id, call.name, pending=pending_of(call, outcome), stats=stats)
    ref = None
    if outcome.ref is not None:
        ref = PayloadRef(
            ref_id=outcome.ref.ref_id,
            session_id=outcome.ref.session_id,
            size_bytes=outcome.ref.size_bytes,
            media_type=outcome.ref.media_type,
            sha256=outcome.ref.sha256,
            expire_time_ms=int(outcome.ref.expire_at * 1000),
        )
    output = ToolOutput(
        inline=outcome.inline if ref is None else None,
        ref=ref,
        digest=outcome.digest,
        result_type=outcome.result_type,
        redacted=outcome.redacted,
    )
    return ToolOutcome(call.id, call.name, output=output, stats=stats)


def pending_of(call: ToolCall, pending: Pending) -> PendingApproval:
    return PendingApproval(
        approval_id=pending.approval_id,
        plan=call,
        impact=pending.impact,
        arguments_sha256=pending.arguments_sha256,
        expire_time_ms=int(pending.expire_at * 1000),
        requested_by=pending.requested_by,
    )


# --- dispatcher_svc ----------------------------------------------------------------------------------


class Dispatcher:
    """Task writes as dispatcher_svc's service, worker and loop make them (same fields, events)."""

    def __init__(self, store: Store) -> None:
        self.settings = DispatcherSettings()
        self.tasks = TaskStore(store, self.settings)
        self.queue = TaskQueue(store, self.settings.consumer_group, CONSUMER)

    async def start(self) -> None:
        await self.queue.ensure_group()
        await self.tasks.load_scripts()

    async def create(self, task_id: str, goal: str, at: int, *, take: bool) -> str | None:
        """StartTask: the task hash, its first event, the queue entry; the entry id when taken."""
        fields = fields_of(
            status=TaskStatus.PENDING,
            step=0,
            usage=Usage(),
            update_ms=at,
            task_id=task_id,
            agent_id=AGENT,
            goal=goal,
            session_id=task_id,
            request_id=f"req-{task_id}",
            traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            token_budget=20000,
            max_steps=8,
            create_ms=at,
            runs=0,
        )
        event = TaskEvent(
            task_id=task_id,
            sequence=0,
            kind=EventKind.STATUS,
            time_ms=at,
            status=TaskStatus.PENDING,
            message=f"status PENDING: task created for agent {AGENT}",
            attributes={"agent_id": AGENT, "request_id": f"req-{task_id}"},
        )
        created = await self.tasks.create(task_id, fields, event, self.queue, take=take)
        assert created.created
        if not take:
            return None
        [(msg_id, taken)] = created.taken
        assert taken == task_id
        return msg_id

    async def acquire(self, task_id: str, at: int) -> TaskRecord:
        def status_event(message: str) -> TaskEvent:
            return TaskEvent(
                task_id=task_id,
                sequence=0,
                kind=EventKind.STATUS,
                time_ms=at,
                status=TaskStatus.RUNNING,
                message=message,
                attributes={"owner": CONSUMER},
            )

        record = await self.tasks.acquire(
            task_id,
            CONSUMER,
            lease_ms=15_000,
            if_pending=status_event(f"status RUNNING on {CONSUMER}"),
            if_taken_over=status_event(f"status RUNNING: resumed on {CONSUMER} after its owner stopped"),
        )
        assert isinstance(record, TaskRecord)
        return record


def event(
    task_id: str, kind: EventKind, at: int, status: TaskStatus, step: int, message: str, **extra: Any
) -> TaskEvent:
    return TaskEvent(
        task_id=task_id, sequence=0, kind=kind, time_ms=at, status=status, step=step, message=message, **extra
    )


async def write_task_done(d: Dispatcher, tools: Tools, engine: ContextEngine) -> None:
    """SUCCEEDED after one tool call whose output tool_svc offloaded; its session records the turns."""
    task_id, running = TASK_DONE, TaskStatus.RUNNING
    goal = "Find out the refund status of order ORD-1042 and tell the customer."
    msg_id = await d.create(task_id, goal, T0, take=True)
    assert msg_id is not None
    fence = (await d.acquire(task_id, T0 + 100)).fence
    caller = ContextCaller(subject=AGENT, agent_id=AGENT)
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


async def write_all(store: Store) -> dict[str, Any]:
    """Writes every record, then dumps the keys and reads the records back (the manifest)."""
    d = Dispatcher(store)
    await d.start()
    tools = Tools(store)
    engine = ContextEngine(ContextSettings(payload_ttl_s=PAYLOAD_TTL_S), store)
    await write_task_done(d, tools, engine)
    await write_task_parked(d, tools)
    await write_task_failed(d, tools)
    await d.create(TASK_QUEUED, "Summarise last week's refunds.", T0 + 3000, take=False)
    decided = await write_decided_approval(tools)

    keys = await dump_keys(store)  # before any read: reads write nothing, but be sure
    records = await read_back(store, d, tools, engine, decided)
    if await dump_keys(store) != keys:
        raise AssertionError("reading the records back changed Redis")
    return {"fixture_format": 1, "generator": "tests/compat/make_fixtures.py", "keys": keys, "records": records}


async def read_back(store: Store, d: Dispatcher, tools: Tools, engine: ContextEngine, decided: str) -> dict[str, Any]:
    """The manifest: what this release reads back through its own APIs."""
    events = EventLog(store, d.tasks, heartbeat_interval_s=1.0)
    tasks: dict[str, Any] = {}
    for task_id in (TASK_DONE, TASK_PARKED, TASK_FAILED, TASK_QUEUED):
        record = await d.tasks.load(task_id)
        tasks[task_id] = {
            "record": describe(record),
            "view": describe(record.view()),
            "events": describe(await events.read(task_id)),
        }
    parked = await d.tasks.load(TASK_PARKED)
    assert parked.pending is not None
    approvals = {}
    for approval_id in (parked.pending.approval_id, decided):
        approvals[approval_id] = describe(await tools.approvals.get(approval_id))

    caller = ContextCaller(subject=AGENT, agent_id=AGENT)
    session, entities = await engine.get_session(caller, SESSION)
    messages = await engine.sessions.messages(SESSION, 0, session.message_count - 1)
    summary, version = await engine.sessions.summary(SESSION)
    payloads = []
    for sha in await engine.payloads.list_shas(SESSION):
        meta, content, partial = await engine.get_payload(caller, SESSION, f"pl_{sha}")
        assert not partial
        payloads.append({"ref": describe(meta), "content": enc(content)})
    return {
        "dispatcher": {
            "consumer_group": d.settings.consumer_group,
            "tasks": tasks,
            "queued": [TASK_QUEUED],
            "waiting": [{"task_id": TASK_PARKED, "approval_id": parked.pending.approval_id}],
        },
        "tool": {
            "approval_ttl_s": APPROVAL_TTL_S,
            "idempotency": tools.records,
            "approvals": approvals,
        },
        "context": {
            "sessions": {
                SESSION: {
                    "caller": describe(caller),
                    "session": describe(session),
                    "entities": entities,
                    "messages": describe(messages),
                    "summary": describe(summary),
                    "summary_version": version,
                    "payloads": payloads,
                }
            }
        },
    }


async def generate(url: str) -> dict[str, Any]:
    store = await Store.connect(RedisSettings(url=url), "dev")
    try:
        return await write_all(store)
    finally:
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commit", required=True, help="the commit whose code writes the records")
    parser.add_argument("--out", type=Path, required=True, help="e.g. tests/compat/fixtures/redis_v1.json")
    args = parser.parse_args()
    server = LocalRedis().start()
    try:
        if server.port == SYSTEM_REDIS_PORT:
            raise RuntimeError("refusing to write fixtures into the system Redis")
        fixture = asyncio.run(generate(server.url))
    finally:
        server.stop()
    fixture["source_commit"] = args.commit
    out: Path = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(fixture, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {out}: {len(fixture['keys'])} keys", file=sys.stderr)


if __name__ == "__main__":
    main()
