"""What every fixture writer shares: the fixed ids, times and tools, tool_svc's pipeline steps that
write Redis, and task writes as dispatcher_svc makes them. Part of make_fixtures.py (copied with it
into an older tree: import only modules that keep their place)."""

from __future__ import annotations

import dataclasses
import importlib
import json
from typing import Any

from agentmesh.chat import ToolCall, Usage
from agentmesh.config import DispatcherSettings
from agentmesh.errors import AgentmeshError
from agentmesh.payloads import PayloadStore
from agentmesh.store import Store
from context_svc.model import Caller as ContextCaller
from dispatcher_svc.model import (
    EventKind,
    ExecStats,
    PayloadRef,
    PendingApproval,
    TaskEvent,
    TaskStatus,
    ToolOutcome,
    ToolOutput,
)
from dispatcher_svc.queue import TaskQueue
from dispatcher_svc.tasks import TaskRecord, TaskStore, fields_of
from tests.compat.fixture_dump import describe
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

AGENT = "agent-compat"
CREATOR = "user-jane"
"""Who starts the tasks (a person's token: no agent id); recorded from issue 20 on."""
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


# --- who acts (issue 20 on: tasks record their creator, sessions their owner and tasks) --------------


def creator_fields(subject: str, agent_id: str = "") -> dict[str, str]:
    """The task hash fields recording who started a task (dispatcher_svc.access.Creator); none in a
    tree that predates it."""
    try:
        access = importlib.import_module("dispatcher_svc.access")
    except ImportError:
        return {}
    if not hasattr(access, "Creator"):
        return {}
    fields: dict[str, str] = access.Creator(subject=subject, agent_id=agent_id).fields()
    return fields


def context_caller(task_id: str, creator: str = CREATOR) -> ContextCaller:
    """A task's token at context_svc (the dispatcher's session of a task has the task's id): from
    issue 20 on it names its task and the task's creator (the session's attached task and owner)."""
    if "task_id" in {f.name for f in dataclasses.fields(ContextCaller)}:
        return ContextCaller(subject=AGENT, agent_id=AGENT, task_id=task_id, creator=creator)
    return ContextCaller(subject=AGENT, agent_id=AGENT)


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
    """The key the dispatcher sends (a copy of dispatcher_svc.run.names.idempotency_key, which imports
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
        self.note(state, result, step=step, index=index, state="pending" if isinstance(outcome, Pending) else "done")
        return result

    def note(
        self, call: CallState, result: ToolResult | None, *, step: int, index: int, state: str, **extra: Any
    ) -> None:
        """Adds the call to the manifest: how it was dispatched, its tool and request, the state its
        key was left in and the outcome a repeat gets (`extra`: more facts of that state)."""
        spec = call.spec
        self.records.append(
            {
                "idempotency_key": call.request.idempotency_key,
                "dispatched_as": {"task_id": call.request.session_id, "step": step, "index": index},
                "tool": {
                    "name": spec.name,
                    "description": spec.description,
                    "input_schema": spec.input_schema,
                    "group": spec.permission.group,
                    "access": spec.permission.access,
                    "impact": spec.impact,
                    "requires_approval": spec.requires_approval,
                },
                "request": describe(call.request),
                "caller": describe(call.caller),
                "arguments": call.arguments,
                "call_sha256": call.call_sha256,
                "state": state,
                "outcome": None if result is None else describe(result.outcome),
                "attempts": None if result is None else result.stats.attempts,
                "output_bytes": None if result is None else result.stats.output_bytes,
                **extra,
            }
        )


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

    async def create(
        self, task_id: str, goal: str, at: int, *, take: bool, creator: tuple[str, str] = (CREATOR, "")
    ) -> str | None:
        """StartTask: the task hash (with its `creator`: subject, agent id), its first event, the queue
        entry; the entry id when taken."""
        fields = creator_fields(*creator) | fields_of(
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
