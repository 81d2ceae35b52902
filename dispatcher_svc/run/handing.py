"""A handoff call of a step (issue 44): the brief checked, the guards across hops, the hop summary built
by context_svc (BuildHandoff), the child task created on the work queue, then the exit that ends the
parent (transfer: HandOff) or parks it (ask: WaitChild). The pure parts are dispatcher_svc/handoffs.py.

Exactly one child per (parent, step, call): its id is derived from them (handoffs.child_task_id) and its
creation is the store's idempotent create, so a run that resumes the step (the parent's owner died
anywhere in between) builds the same hop (BuildHandoff answers a repeat with the same record) and finds
the child it created instead of making another. What the model gets wrong (a target not offered, a
brief that breaks its schema, a hop too deep, a cycle) comes back as the call's typed outcome, judged by
the error-class policy like any tool's.
"""

from __future__ import annotations

import logging
from typing import Any

from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from agentmesh.answers import canonical
from agentmesh.chat import ToolCall, Usage
from agentmesh.errors import AgentmeshError, ErrorCode
from dispatcher_svc import handoffs
from dispatcher_svc.events import now_ms
from dispatcher_svc.model import EventKind, TaskEvent, TaskStatus, ToolOutcome
from dispatcher_svc.ports import HopSummary
from dispatcher_svc.run import decisions
from dispatcher_svc.run.context import Run
from dispatcher_svc.run.downstream import PortFailure
from dispatcher_svc.run.next_step import Fail, HandOff, WaitChild
from dispatcher_svc.tasks import CallState, TaskRecord, fields_of

log = logging.getLogger("dispatcher_svc.loop")

_BRIEF_CODES = frozenset({ErrorCode.INVALID_REQUEST, ErrorCode.SCHEMA_INVALID, ErrorCode.PAYLOAD_TOO_LARGE})
"""BuildHandoff's answers to a brief it cannot use: the model's to fix (a CONTRACT error)."""


def is_handoff(run: Run, call: ToolCall) -> bool:
    """Whether the call is a handoff (offered, or meant as one): answered here, never sent to tool_svc.
    A name merely shaped like one counts only once this run has seen the registry's tools (a run resumed
    mid-step has not: tool_svc answers such a call, UNKNOWN_TOOL or the registry tool of that name)."""
    state = run.state
    if call.name in state.agent.handoff_tools:
        return True
    return state.discovered is not None and handoffs.looks_like_handoff(call.name, state.tools_seen)


async def root_cancelled(run: Run) -> Fail | None:
    """A task a handoff created whose root was cancelled before it first ran (the cancel raced its
    creation): it fails CANCELLED instead of starting."""
    record = run.state.record
    if not record.parent_task_id or run.state.cursor.ctx_count:
        return None
    status, _ = await run.tasks.status(record.root)
    if status is not TaskStatus.CANCELLED:
        return None
    return Fail(AgentmeshError(ErrorCode.CANCELLED, f"the root task {record.root} of this handoff was cancelled"))


def _error(call: ToolCall, error: AgentmeshError) -> ToolOutcome:
    return ToolOutcome(call.id, call.name, error=error)


def hops_of(record: TaskRecord) -> list[str]:
    """The agents from the root to this task."""
    return record.hops.split(",") if record.hops else [record.agent_id]


async def hand_off(run: Run, cs: CallState, *, verified: bool = False) -> ToolOutcome | HandOff | WaitChild:
    """Carries out one handoff call: the exit it takes, or the typed outcome the model is told. A transfer
    of an agent with `verify_with:` goes to its verifier first (an ask), unless `verified`."""
    state, call = run.state, cs.call
    record, agent = state.record, state.agent
    tool = agent.handoff_tools.get(call.name)
    if tool is None:
        return _error(call, handoffs.not_offered(call.name, list(agent.handoff_tools.values())))
    brief = handoffs.check_brief(call.arguments_json)
    if isinstance(brief, AgentmeshError):
        return _error(call, brief)
    child_id = handoffs.child_task_id(record.task_id, state.cursor.step, call.id)
    target = await _target(run, tool, child_id)
    if isinstance(target, AgentmeshError):
        return _error(call, target)
    if target is None or run.queue is None or run.agents is None:
        unknown = AgentmeshError(ErrorCode.UNKNOWN_TOOL, f"{call.name}: no agent {tool.target} here to hand off to")
        return _error(call, unknown)
    hops = hops_of(record)
    refused = handoffs.guard(hops=hops, to_agent=target, depth=record.depth, limit=run.settings.max_handoff_depth)
    if refused is not None:
        return _error(call, refused)
    if agent.verify_with and tool.mode == "transfer" and not verified:
        return await _ask_verifier(run, cs, brief, target, hops)
    hop = await _build_hop(run, call, child_id, brief)
    if isinstance(hop, ToolOutcome):
        return hop
    attributes = _hop_attributes(record.task_id, child_id, tool.mode, agent.id, target, hop, record.depth)
    await run.downstream.reached("before_handoff_child")
    await _create_child(run, child_id, target, tool.mode, hop, hops, attributes)
    await run.downstream.reached("after_handoff_child")
    verb = "handed off to" if tool.mode == "transfer" else "asked"
    event = run.checkpoints.event(
        EventKind.HANDOFF,
        f"{verb} agent {target} (task {child_id}); hop summary {hop.token_count} tokens, "
        f"{hop.confirmed} confirmed / {hop.inferred} inferred facts ({hop.demoted} demoted)",
        tool_call=call,
        usage=Usage(hop.token_count, 0),
        attributes=attributes,
    )
    if tool.mode == "transfer":
        return HandOff(child_id, target, (event,))
    return WaitChild(child_id, call, (event,))


def _hop_attributes(
    parent_id: str, child_id: str, mode: str, from_agent: str, to_agent: str, hop: HopSummary, depth: int
) -> dict[str, str]:
    """The HANDOFF event's attributes: who handed what to whom, and what the hop summary carried."""
    return {
        "parent_task_id": parent_id,
        "child_task_id": child_id,
        "mode": mode,
        "from_agent": from_agent,
        "to_agent": to_agent,
        "hop_tokens": str(hop.token_count),
        "confirmed": str(hop.confirmed),
        "inferred": str(hop.inferred),
        "demoted": str(hop.demoted),
        "depth": str(depth + 1),
    }


async def _build_hop(run: Run, call: ToolCall, child_id: str, brief: dict[str, Any]) -> HopSummary | ToolOutcome:
    """context_svc's hop summary for the child `child_id`; a brief it cannot use is the model's to fix."""
    session_id = run.state.record.session_id
    try:
        hop: HopSummary = await run.downstream.call(
            "BuildHandoff",
            lambda o: run.downstream.ports.context.build_handoff(session_id, child_id, brief, o),
            retry_on=decisions.UNCERTAIN_CODES,  # the same request again gives the same record
        )
    except PortFailure as failure:
        if failure.error.code not in _BRIEF_CODES:
            raise
        err = failure.error
        return _error(
            call,
            AgentmeshError(ErrorCode.SCHEMA_INVALID, f"the handoff brief: {err.message}", violations=err.violations),
        )
    return hop


async def _ask_verifier(
    run: Run, cs: CallState, brief: dict[str, Any], target: str, hops: list[str]
) -> ToolOutcome | WaitChild:
    """The transfer's brief goes to the agent's verifier first, as an ask: its hop summary (citations checked,
    the cited payloads and the full record granted to the verifier's session) is the verifier's goal;
    the parent waits, and the verdict comes back as this call's outcome (after_verdict)."""
    state, call = run.state, cs.call
    record, verifier = state.record, state.agent.verify_with
    refused = handoffs.guard(hops=hops, to_agent=verifier, depth=record.depth, limit=run.settings.max_handoff_depth)
    if refused is not None:
        return _error(call, refused)
    child_id = handoffs.verify_child_id(record.task_id, state.cursor.step, call.id, state.cursor.verify_rejections)
    hop = await _build_hop(run, call, child_id, brief)
    if isinstance(hop, ToolOutcome):
        return hop
    attributes = _hop_attributes(record.task_id, child_id, "verify", state.agent.id, verifier, hop, record.depth)
    attributes["verifies"] = target
    await run.downstream.reached("before_handoff_child")
    await _create_child(run, child_id, verifier, "verify", hop, hops, attributes)
    await run.downstream.reached("after_handoff_child")
    event = run.checkpoints.event(
        EventKind.HANDOFF,
        f"asked verifier {verifier} (task {child_id}) to check the handoff to {target}; hop summary "
        f"{hop.token_count} tokens, {hop.confirmed} confirmed / {hop.inferred} inferred facts ({hop.demoted} demoted)",
        tool_call=call,
        usage=Usage(hop.token_count, 0),
        attributes=attributes,
    )
    return WaitChild(child_id, call, (event,))


def awaits_verdict(run: Run, cs: CallState) -> bool:
    """Whether the call's delivered outcome is a verifier's verdict: a transfer never gets one otherwise."""
    tool = run.state.agent.handoff_tools.get(cs.call.name)
    return (
        cs.resolved is not None and bool(run.state.agent.verify_with) and tool is not None and tool.mode == "transfer"
    )


async def after_verdict(run: Run, cs: CallState) -> ToolOutcome | HandOff | WaitChild | Fail:
    """The verifier's verdict on a transfer: accepted, the transfer goes on (its child created once, as any);
    rejected, the model is told why (VERIFICATION_REJECTED, CONTRACT) once, then the task fails with it.
    A verifier that ended without a verdict is the call's ENGINEERING outcome."""
    resolved, c = cs.resolved, run.state.cursor
    assert resolved is not None
    verifier = run.state.agent.verify_with
    if resolved.error is not None:
        return resolved
    verdict = handoffs.verdict_of((resolved.output.inline if resolved.output is not None else "") or "")
    if verdict is None:
        error = AgentmeshError(ErrorCode.HANDOFF_FAILED, f"verifier {verifier} answered without a verdict")
        return _error(cs.call, error)
    trace.get_current_span().set_attributes(
        {"agentmesh.verify.verdict": "accepted" if verdict.accepted else "rejected", "agentmesh.verify.by": verifier}
    )
    if verdict.accepted:
        cs.resolved = None
        return await hand_off(run, cs, verified=True)
    if c.verify_rejections >= handoffs.MAX_VERIFY_REJECTIONS:
        return Fail(handoffs.rejected(verifier, verdict.reasons, final=True))
    c.verify_rejections += 1
    return _error(cs.call, handoffs.rejected(verifier, verdict.reasons, final=False))


async def _target(run: Run, tool: handoffs.HandoffTool, child_id: str) -> str | AgentmeshError | None:
    """The agent the handoff goes to. A capability is routed (healthy carrier, fewest unfinished tasks),
    except when the step is resumed after its child was created: that child's agent, so the one child
    and the events agree."""
    if not tool.capability:
        return handoffs.resolve_target(tool.target, run.agents if run.agents is not None else ())
    if await run.tasks.exists(child_id):
        return (await run.tasks.load(child_id)).agent_id
    if run.router is None:
        return None
    try:
        return await run.router.route_to(tool.target)
    except AgentmeshError as err:  # nobody carries it (NOT_FOUND) or no carrier is healthy (UNAVAILABLE)
        return err


async def _create_child(
    run: Run, child_id: str, target: str, mode: str, hop: HopSummary, hops: list[str], attributes: dict[str, str]
) -> None:
    """The child task, queued, once (an idempotent create: a repeat finds it and queues a harmless
    extra entry). It runs for the root's creator, within the root's deadline and what is left of its
    parent's token budget, in a session of its own whose first message is the hop summary."""
    state = run.state
    record = state.record
    assert run.agents is not None and run.queue is not None
    child_agent = run.agents.get(target)
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)  # the child's spans join this trace
    now = now_ms()
    fields: dict[str, Any] = fields_of(
        status=TaskStatus.PENDING,
        step=0,
        usage=Usage(),
        update_ms=now,
        task_id=child_id,
        agent_id=target,
        goal=hop.text or f"(handoff from {record.agent_id})",
        session_id=child_id,
        request_id=record.request_id,
        traceparent=carrier.get("traceparent", ""),
        # The tree spends the root's budget: a child gets at most what its parent has left.
        token_budget=max(1, min(child_agent.token_budget, record.token_budget - state.usage.total_tokens)),
        max_steps=child_agent.max_steps,
        create_ms=now,
        runs=0,
        output_schema=canonical(child_agent.output_schema) if child_agent.output_schema is not None else "",
        creator=record.creator,
        parent_task_id=record.task_id,
        root_task_id=record.root,
        depth=record.depth + 1,
        hops=",".join([*hops, target]),
        answer_to=record.task_id if mode in ("ask", "verify") else record.answer_to,
        deadline_ms=state.deadline_ms,
    )
    if record.creator_agent:
        fields["creator_agent"] = record.creator_agent
    created = TaskEvent(
        task_id=child_id,
        sequence=0,
        kind=EventKind.HANDOFF,
        time_ms=now,
        status=TaskStatus.PENDING,
        message=f"status PENDING: {mode} from agent {record.agent_id} (task {record.task_id}); "
        f"hop summary {hop.token_count} tokens",
        attributes=attributes,
    )
    # The tree's index first (cancelling the root finds every task of it), then the task.
    await run.tasks.add_to_tree(record.root, child_id)
    outcome = await run.tasks.create(child_id, {k: str(v) for k, v in fields.items()}, created, run.queue)
    if not outcome.created:
        log.info("task %s: child %s exists already (a resumed handoff)", record.task_id, child_id)
