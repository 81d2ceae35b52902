"""Resuming a task parked on an approval or a settlement, once, and the approval-expiry sweeper.

`ApprovalSettler.settle` moves a parked task on with a decision (ResolveApproval's, or an expired
approval's) as one compare-and-set on the parked status and the fence, so of a ResolveApproval and the
sweepers of every replica racing for the same approval exactly one moves the task. The sweeper (run by
the worker every `dispatcher.approval_sweep_interval_s`) resumes a parked task whose approval expired
with nobody resolving it: the call fails with APPROVAL_EXPIRED, an ENGINEERING error the model is told
about (docs/design.md §3, §7); a settlement nobody decided fails the task OUTCOME_UNKNOWN.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from agentmesh.errors import AgentmeshError, ErrorCode, NotFoundError
from dispatcher_svc.agents import AgentConfig, AgentRegistry
from dispatcher_svc.events import now_ms
from dispatcher_svc.model import (
    ApprovalRecord,
    CallStage,
    EventKind,
    PendingApproval,
    TaskEvent,
    TaskStatus,
    ToolOutcome,
)
from dispatcher_svc.ports import CallOptions, Ports
from dispatcher_svc.queue import TaskQueue
from dispatcher_svc.tasks import StaleOwnerError, TaskRecord, TaskStore, WrongStatusError, fields_of

__all__ = ["ApprovalSettler", "approval_expired", "settlement_expired"]

_SWEEP_BATCH = 32
"""Due approvals one sweep takes at most; the rest come due on the next pass."""
_SWEEP_HOLD_MS = 30_000
"""How long an entry a sweep took is hidden from other sweeps; it comes due again if not settled."""
_SWEEP_CALL_TIMEOUT_S = 10.0
_RECHECK_MS = 5_000
"""When tool_svc does not see a due approval expired yet, it is looked at again this much later."""

log = logging.getLogger("dispatcher_svc.service")


class ApprovalSettler:
    """Settles parked tasks (see the module docstring); one per Dispatcher."""

    def __init__(
        self,
        *,
        tasks: TaskStore,
        queue: TaskQueue,
        agents: AgentRegistry,
        ports: Ports,
        task_ttl_s: int,
        mint_token: Callable[[TaskRecord, AgentConfig], str],
    ) -> None:
        self.tasks = tasks
        self.queue = queue
        self.agents = agents
        self.ports = ports
        self.task_ttl_s = task_ttl_s
        self.mint_token = mint_token

    async def settle(
        self, record: TaskRecord, approval: ApprovalRecord, outcome: ToolOutcome | None, *, resolver: str, reason: str
    ) -> bool:
        """Resumes a task parked on `approval` with its decision, once: a compare-and-set on the parked
        status and the fence, so of a ResolveApproval and the sweepers of every replica racing for the
        same approval exactly one moves the task and writes its events. False when another one did.

        APPROVED without an outcome: the loop re-sends the call with its idempotency key and tool_svc
        replays the outcome; DENIED / EXPIRED fail the call (ENGINEERING: the model is told).
        """
        task_id, pending = record.task_id, record.pending
        assert pending is not None
        plan, approval_id = pending.plan, pending.approval_id
        expired = approval.state == "EXPIRED"
        if expired and pending.is_settlement:
            return await self.fail_unsettled(record, pending)
        if outcome is None and approval.state in ("DENIED", "EXPIRED"):
            err = (
                approval_expired(task_id, pending)
                if expired
                else AgentmeshError(
                    ErrorCode.APPROVAL_DENIED, f"approval {approval_id} denied: {approval.reason}".strip()
                )
            )
            outcome = ToolOutcome(plan.id, plan.name, error=err)
        cursor = record.cursor
        for cs in cursor.calls:
            if cs.state is CallStage.WAITING:
                cs.state = CallStage.RUNNING
                cs.resolved = outcome
        who = approval.resolved_by or resolver
        if expired:
            message = f"approval {approval_id} expired before anyone decided; {plan.name} did not run"
            attributes = {"state": approval.state}
        elif pending.is_settlement:
            found = {"ran": "RAN (recorded as ran; not re-sent)", "not_ran": "NOT_RAN (sent once more)"}
            verdict = found.get(approval.settlement, approval.state.lower())
            message = f"settlement {approval_id} of {plan.name}: {verdict} by {who}" + (f": {reason}" if reason else "")
            attributes = {"state": approval.state, "resolved_by": who, "settlement": approval.settlement}
        else:
            verdict = "approved" if approval.state == "APPROVED" else approval.state.lower()
            message = f"approval {approval_id} {verdict} by {who}" + (f": {reason}" if reason else "")
            attributes = {"state": approval.state, "resolved_by": who}
        events = resolution_events(
            record,
            pending,
            TaskStatus.PENDING,
            message,
            "status PENDING: resuming after the approval" + (" expired" if expired else ""),
            error=outcome.error if expired and outcome is not None else None,
            attributes=attributes,
        )
        try:
            await self.tasks.commit(
                task_id,
                fence=record.fence,
                expect_status=TaskStatus.WAITING_APPROVAL,
                fields=fields_of(status=TaskStatus.PENDING, pending=None, cursor=cursor, update_ms=now_ms()),
                events=events,
                agent=record.agent_id,
            )
        except (StaleOwnerError, WrongStatusError):
            return False
        await self.queue.enqueue(task_id)
        await self.unindex(task_id, approval_id)
        return True

    async def fail_unsettled(self, record: TaskRecord, pending: PendingApproval) -> bool:
        """A settlement nobody decided in time: the task fails OUTCOME_UNKNOWN and nothing is re-sent."""
        task_id = record.task_id
        err = settlement_expired(task_id, pending)
        events = resolution_events(
            record,
            pending,
            TaskStatus.FAILED,
            f"settlement {pending.approval_id} expired unsettled; {pending.plan.name} was not re-sent",
            f"status FAILED: {err}",
            error=err,
            attributes={"state": "EXPIRED"},
            status_error=err,
        )
        try:
            await self.tasks.commit(
                task_id,
                fence=record.fence,
                expect_status=TaskStatus.WAITING_APPROVAL,
                fields=fields_of(status=TaskStatus.FAILED, pending=None, error=err, update_ms=now_ms()),
                events=events,
                ttl_s=self.task_ttl_s,
                agent=record.agent_id,
            )
        except (StaleOwnerError, WrongStatusError):
            return False
        await self.unindex(task_id, pending.approval_id)
        return True

    async def unindex(self, task_id: str, approval_id: str) -> None:
        """Best effort: a member left behind is dropped by the sweeper."""
        try:
            await self.tasks.unindex_approval(task_id, approval_id)
        except AgentmeshError as exc:
            log.warning("task %s: approval %s left in the expiry index: %s", task_id, approval_id, exc)

    # -- the approval-expiry sweeper -----------------------------------------------------------

    async def sweep(self) -> int:
        """One pass of the expiry sweeper (Worker runs it every `approval_sweep_interval_s`): every
        parked task whose approval is due is settled by `expire`. Returns how many tasks this
        replica resumed. An entry that fails here comes due again after `_SWEEP_HOLD_MS`."""
        due = await self.tasks.due_approvals(_SWEEP_BATCH, _SWEEP_HOLD_MS)
        results = await asyncio.gather(*(self.expire(t, a) for t, a in due), return_exceptions=True)
        resumed = 0
        for (task_id, approval_id), result in zip(due, results, strict=True):
            if isinstance(result, asyncio.CancelledError):
                raise result
            if isinstance(result, BaseException):
                log.warning("task %s: approval %s not settled yet: %r", task_id, approval_id, result)
            elif result:
                resumed += 1
        return resumed

    async def expire(self, task_id: str, approval_id: str) -> bool:
        """Settles a task parked on `approval_id` once the approval's expiry has passed; True when this
        call moved the task (False: not due yet, already moved, or another replica won the race).

        tool_svc holds the approval and is authoritative, so it is asked first: a decision that reached
        it in time (its ResolveApproval answered, ours died before resuming the task) is applied as made;
        otherwise the approval expired and the call fails with APPROVAL_EXPIRED.
        """
        try:
            record = await self.tasks.load(task_id)
        except NotFoundError:
            await self.unindex(task_id, approval_id)
            return False
        pending = record.pending
        if record.status != TaskStatus.WAITING_APPROVAL or pending is None or pending.approval_id != approval_id:
            if record.status == TaskStatus.PENDING:
                # A settle may have died between its commit and its enqueue: a duplicate entry is harmless.
                await self.queue.enqueue(task_id)
            await self.unindex(task_id, approval_id)
            return False
        now = await self.tasks.redis_time_ms()
        if pending.expire_time_ms > now:
            await self.tasks.reindex_approval(task_id, approval_id, pending.expire_time_ms)
            return False
        approval = await self._approval_as_requester(record, pending)
        if approval.state not in ("APPROVED", "DENIED", "EXPIRED"):
            # tool_svc does not see it expired yet (another clock, or no known expiry): look again later.
            await self.tasks.reindex_approval(task_id, approval_id, now + _RECHECK_MS)
            return False
        return await self.settle(record, approval, None, resolver="", reason=approval.reason)

    async def _approval_as_requester(self, record: TaskRecord, pending: PendingApproval) -> ApprovalRecord:
        """tool_svc's record of the approval, read with the task's own identity (the agent that asked
        may read it; a sweep has no caller whose identity could be forwarded)."""
        try:
            agent: AgentConfig | None = self.agents.get(record.agent_id)
        except NotFoundError:
            agent = None  # removed from the configuration: the resumed run fails the task anyway
        if agent is None:
            return ApprovalRecord(request=pending, state="EXPIRED")
        opts = CallOptions(
            identity_token=self.mint_token(record, agent),
            request_id=record.request_id,
            timeout_s=_SWEEP_CALL_TIMEOUT_S,
        )
        try:
            return await self.ports.tools.get_approval(pending.approval_id, _SWEEP_CALL_TIMEOUT_S, opts)
        except NotFoundError:
            # Gone past its retention (a day after its expiry): it can no longer be decided.
            return ApprovalRecord(request=pending, state="EXPIRED")


def settlement_expired(task_id: str, pending: PendingApproval) -> AgentmeshError:
    """A settlement nobody decided in time: the outcome stays unknown and the task fails (FAILED is resumable:
    a resumed task re-sends the key and gets a new settlement, never a second side effect)."""
    return AgentmeshError(
        ErrorCode.OUTCOME_UNKNOWN,
        f"settlement {pending.approval_id} for {pending.plan.name} expired before anyone settled it; "
        "nothing was re-sent and the outcome stays unknown",
        metadata={"settlement_id": pending.approval_id, "task_id": task_id},
    )


def approval_expired(task_id: str, pending: PendingApproval) -> AgentmeshError:
    """The typed outcome of an approval nobody decided in time (ENGINEERING: the model is told)."""
    return AgentmeshError(
        ErrorCode.APPROVAL_EXPIRED,
        f"approval {pending.approval_id} for {pending.plan.name} expired before anyone decided; the call did not run",
        metadata={"approval_id": pending.approval_id, "task_id": task_id},
    )


def resolution_events(
    record: TaskRecord,
    pending: PendingApproval,
    status: TaskStatus,
    message: str,
    status_message: str,
    *,
    error: AgentmeshError | None,
    attributes: dict[str, str],
    status_error: AgentmeshError | None = None,
) -> list[TaskEvent]:
    """The APPROVAL_RESOLVED event of a parked task and the STATUS event it moves to (sequences are
    assigned by the commit)."""
    step = record.cursor.step
    return [
        TaskEvent(
            task_id=record.task_id,
            sequence=0,
            kind=EventKind.APPROVAL_RESOLVED,
            time_ms=now_ms(),
            status=status,
            step=step,
            message=message,
            tool_call=pending.plan,
            error=error,
            pending_approval=pending,
            attributes=attributes,
        ),
        TaskEvent(
            task_id=record.task_id,
            sequence=0,
            kind=EventKind.STATUS,
            time_ms=now_ms(),
            status=status,
            step=step,
            message=status_message,
            error=status_error,
        ),
    ]
