"""The records of issues 20-23's formats (redis_v4.json on): who started a task, who owns a session
and which tasks are attached to it, entity records with provenance, and the audit stream. Part of
make_fixtures.py, which imports it only when the tree has these features (an ImportError here: the
tree predates them).

Every task of such a tree records its creator (fixture_common.Dispatcher.create) and every session
its owner and attached task (fixture_common.context_caller). This module adds a task started by an
agent's token (so `creator_agent` is set), finished after a conversation whose known facts are
labelled, rejected ("not 150 USD"), corrected ("corrected from 80 USD") and uncertain (a date), and
the audit entries the services append for the fixture's acts (starts, a decision, a refusal).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentmesh.audit import AuditLog
from agentmesh.chat import Usage
from agentmesh.store import Store
from context_svc.engine import BudgetRequest, ContextEngine
from context_svc.facts.known import known_facts
from context_svc.model import Message, Role
from dispatcher_svc.model import EventKind, ModelReply, Phase, TaskStatus
from dispatcher_svc.tasks import Cursor, fields_of
from tests.compat.fixture_common import (
    AGENT,
    CREATOR,
    T0,
    TASK_DONE,
    TASK_PARKED,
    Dispatcher,
    Tools,
    context_caller,
    event,
)
from tests.compat.fixture_dump import describe

TASK_DELEGATED = "task-compat-delegated"
DELEGATOR = "agent-triage"
"""The agent whose token started TASK_DELEGATED (its creator and creator_agent)."""
OPERATOR = "ops-jane"
STRANGER = "agent-other"


@dataclass
class Written:
    tasks: list[str] = field(default_factory=list)
    sessions: list[str] = field(default_factory=list)
    approvals: list[str] = field(default_factory=list)
    waiting: list[tuple[str, str]] = field(default_factory=list)


async def write_task_delegated(d: Dispatcher, engine: ContextEngine, written: Written) -> None:
    """A task an agent started for a customer; its session's known facts come with their provenance."""
    task_id, running, done = TASK_DELEGATED, TaskStatus.RUNNING, TaskStatus.SUCCEEDED
    goal = "Refund order ORD-3310 within the customer's refund cap."
    msg_id = await d.create(task_id, goal, T0 + 6000, take=True, creator=(DELEGATOR, DELEGATOR))
    assert msg_id is not None
    fence = (await d.acquire(task_id, T0 + 6100)).fence
    caller = context_caller(task_id, creator=DELEGATOR)
    await engine.create_session(
        caller,
        session_id=task_id,
        agent_id=AGENT,
        goal=goal,
        system_prompt="You are a refunds agent. Respect the refund cap the customer states.",
        budget=BudgetRequest(max_context_tokens=4000),
    )
    turns = [
        (Role.USER, "Order ORD-3310: the order amount is 120 USD, not 150 USD. The refund cap is 80 USD."),
        (Role.ASSISTANT, "Noted: I will refund at most 80 USD for ORD-3310."),
        (Role.USER, "Correction: the refund cap is 60 USD. Please call me on 2026-01-05 at 10:00."),
    ]
    for role, text in turns:
        await engine.append_message(caller, task_id, Message(role=role, content=text))
    answer = "Refunded 60 USD for order ORD-3310 (your refund cap); we will call you on 2026-01-05 at 10:00."
    reply = ModelReply(text=answer, usage=Usage(702, 31), model="compat-model-1", finish_reason="stop")
    await engine.append_message(caller, task_id, Message(role=Role.ASSISTANT, content=answer))
    cursor = Cursor(phase=Phase.THINKING, step=1, ctx_count=len(turns) + 1)
    await d.tasks.commit(
        task_id,
        fence=fence,
        fields=fields_of(
            status=done,
            step=1,
            usage=reply.usage,
            answer=answer,
            error=None,
            cursor=cursor,
            update_ms=T0 + 6200,
            lease_until=0,
        ),
        events=[
            event(task_id, EventKind.STEP_STARTED, T0 + 6200, running, 1, "step 1"),
            event(
                task_id,
                EventKind.MODEL_REPLY,
                T0 + 6200,
                running,
                1,
                f"model answered: {answer}",
                usage=reply.usage,
                attributes={"model": reply.model, "finish_reason": reply.finish_reason},
            ),
            event(task_id, EventKind.ANSWER, T0 + 6200, done, 1, answer),
            event(task_id, EventKind.STATUS, T0 + 6200, done, 1, "status SUCCEEDED"),
        ],
        ttl_s=d.settings.task_ttl_s,
    )
    await d.queue.done(msg_id)
    written.tasks.append(task_id)
    written.sessions.append(task_id)


async def write_audit(store: Store, d: Dispatcher) -> None:
    """The entries the services append for the fixture's acts (dispatcher_svc.access.Auditor's words)."""
    audit = AuditLog(store)
    for task_id, subject in [(TASK_DONE, CREATOR), (TASK_PARKED, CREATOR), (TASK_DELEGATED, DELEGATOR)]:
        await audit.record(subject=subject, action="task.start", target=task_id, detail=f"agent {AGENT}")
    parked = await d.tasks.load(TASK_PARKED)
    assert parked.pending is not None
    await audit.record(
        subject=STRANGER,
        action="approval.resolve",
        target=parked.pending.approval_id,
        outcome="PERMISSION_DENIED",
        detail="dev:approvals:resolve",
    )
    await audit.record(subject=OPERATOR, action="task.cancel", target=TASK_PARKED, detail="customer withdrew")


async def write_all(d: Dispatcher, tools: Tools, engine: ContextEngine, store: Store) -> Written:
    written = Written()
    await write_task_delegated(d, engine, written)
    await write_audit(store, d)
    return written


async def read_back(d: Dispatcher, tools: Tools, engine: ContextEngine, written: Written) -> dict[str, Any]:
    """What these records read back as through this release's APIs (beside make_fixtures.read_back,
    whose task records hold their creators, and sessions their owners and tasks): the audit stream."""
    return {"audit": describe(await AuditLog(engine.store).read())}


async def read_session(engine: ContextEngine, session_id: str) -> dict[str, Any]:
    """Beside a session's read: its known facts (the entity records decoded, with provenance), by key
    (the order of facts of one rank follows the hash's, which Redis does not keep)."""
    _, entities = await engine.sessions.get(session_id)
    return {"known": describe(sorted(known_facts(entities), key=lambda fact: fact.key))}
