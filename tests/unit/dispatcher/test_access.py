"""Who may do what with tasks (issue 20; dispatcher_svc/access.py): starting as an agent, the creator's
tasks, separation of duties, ListAgents, and the audit entries of each act. Real Redis, fake services."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from agentmesh.audit import AuditEntry, AuditLog
from agentmesh.authenticator import Authenticator
from agentmesh.errors import ErrorCode, NotFoundError, PermissionDeniedError, UnavailableError
from agentmesh.identity_value import Identity
from agentmesh.store import Store
from dispatcher_svc.access import NOT_TASK_AGENT, NOT_TASK_CREATOR, TASK_ACCESS
from dispatcher_svc.model import PendingApproval, TaskStatus
from dispatcher_svc.service import Dispatcher
from tests.unit.dispatcher.conftest import AGENT, APPROVER, OPERATOR, MakeRig, Rig, identity
from tests.unit.dispatcher.fakes import FakeContext, FakeProvider, FakeTools, Prompt, call, ports, reply
from tests.unit.dispatcher.test_approval_expiry import _until
from tests.unit.dispatcher.test_settlement import NO_SWEEPER, UnknownTools, charge_policy

BILLING = identity("billing", "agent", agent_id="billing", permissions=("dev:billing.*:write",))
"""Another agent's token, without a run grant."""
OPS_TOKEN = identity("ops", "agent", agent_id="ops", permissions=("dev:*:*",), task_id="t-other")
"""A token of agent ops itself (of another task)."""
CAROL = identity("carol", "operator")
"""A third operator."""


def answer(p: Prompt) -> Any:
    return reply(text="ok")


def restart_policy(p: Prompt) -> Any:
    if not p.tool_messages():
        return reply(call("restart", {"svc": "payment-svc"}, "c1"))
    return reply(text=f"done: {p.last['content']}")


async def parked(rig: Rig, task_id: str) -> PendingApproval:
    """Waits until the task is WAITING_APPROVAL; its pending approval (or settlement)."""

    async def waiting() -> bool:
        return (await rig.dispatcher.get_task(task_id, caller=OPERATOR)).status == TaskStatus.WAITING_APPROVAL

    await _until(waiting)
    pending = (await rig.dispatcher.get_task(task_id, caller=OPERATOR)).pending_approval
    assert pending is not None
    return pending


async def audit(rig: Rig, action: str = "") -> list[AuditEntry]:
    return await AuditLog(rig.store, rig.dispatcher.settings.audit).read(action=action)


async def refused(awaitable: Any, missing: str) -> PermissionDeniedError:
    with pytest.raises(PermissionDeniedError) as caught:
        await awaitable
    assert caught.value.code == ErrorCode.PERMISSION_DENIED
    assert caught.value.missing_permission == missing, caught.value
    return caught.value


# --- starting a task as an agent --------------------------------------------------------------------


async def test_an_agent_token_cannot_start_another_agents_task(make_rig: MakeRig) -> None:
    rig = await make_rig(answer)
    for caller in (BILLING, identity("billing", "agent", agent_id="billing", permissions=("dev:*:write",))):
        err = await refused(rig.start(caller=caller), "dev:agent.ops:run")  # write never confers run
        assert "billing may not start tasks as agent ops" in err.message
    # Not even the agent's NOT_FOUND listing the agents: the grant is checked first.
    await refused(rig.start(caller=BILLING, agent_id="ghost"), "dev:agent.ghost:run")
    assert await rig.store.redis.keys("am:task:*") == []


@pytest.mark.parametrize("grant", ["dev:agent.ops:run", "dev:agent.*:run", "*:agent.ops:*"])
async def test_the_run_grant_lets_an_agent_start_that_agents_task(make_rig: MakeRig, grant: str) -> None:
    rig = await make_rig(answer)
    caller = identity("billing", "agent", agent_id="billing", permissions=(grant,))
    task_id = await rig.start(caller=caller)
    assert (await rig.events(task_id))[-1].status == TaskStatus.SUCCEEDED
    record = await rig.dispatcher.tasks.load(task_id)
    assert (record.creator, record.creator_agent) == ("billing", "billing")
    assert (await rig.dispatcher.get_task(task_id, caller=caller)).created_by == "billing"


async def test_a_grant_of_another_environment_does_not_run(make_rig: MakeRig) -> None:
    rig = await make_rig(answer)
    await refused(rig.start(caller=identity("b", "agent", permissions=("prod:agent.ops:run",))), "dev:agent.ops:run")


async def test_list_agents_hides_agents_the_caller_cannot_run(make_settings: Any) -> None:
    settings = make_settings({"agents": [AGENT, {**AGENT, "id": "billing"}, {**AGENT, "id": "hr"}]})
    store = await Store.connect(settings.redis, settings.environment)
    try:
        dispatcher = Dispatcher(
            settings=settings,
            store=store,
            ports=ports(FakeContext(), FakeTools(), FakeProvider(answer)),
            authenticator=Authenticator(settings.auth, settings.environment),
        )

        def listed(*grants: str, roles: tuple[str, ...] = ("agent",)) -> list[str]:
            caller = identity("x", *roles, agent_id="x", permissions=grants)
            return [a.id for a in dispatcher.list_agents(caller=caller)]

        assert listed(roles=("operator",)) == ["billing", "hr", "ops"]
        assert listed(roles=("admin",)) == ["billing", "hr", "ops"]
        assert listed() == []
        assert listed("dev:*:write", "dev:*:read") == []
        assert listed("dev:agent.ops:run") == ["ops"]
        assert listed("dev:agent.billing:run", "dev:agent.hr:*") == ["billing", "hr"]
        assert listed("prod:agent.*:run") == []
    finally:
        await store.close()


# --- the creator's tasks -----------------------------------------------------------------------------


async def test_an_agent_token_cannot_get_watch_or_cancel_a_task_it_did_not_start(make_rig: MakeRig) -> None:
    rig = await make_rig(restart_policy, FakeTools({"restart": lambda c: "restarted"}, needs_approval={"restart"}))
    task_id = await rig.start()  # by alice
    await parked(rig, task_id)
    for caller in (OPS_TOKEN, BILLING):  # the task's own agent (another task's token), another agent
        await refused(rig.dispatcher.get_task(task_id, caller=caller), TASK_ACCESS)
        with pytest.raises(PermissionDeniedError):
            await anext(rig.dispatcher.watch(task_id, caller=caller))
        await refused(rig.dispatcher.cancel(task_id, "mine now", caller=caller), TASK_ACCESS)
    assert (await rig.dispatcher.get_task(task_id, caller=OPERATOR)).status == TaskStatus.WAITING_APPROVAL
    # Unknown ids answer the same as others' tasks: ids cannot be probed. Operators get NOT_FOUND.
    await refused(rig.dispatcher.get_task("no-such-task", caller=OPS_TOKEN), TASK_ACCESS)
    with pytest.raises(PermissionDeniedError):
        await anext(rig.dispatcher.watch("no-such-task", caller=OPS_TOKEN))
    await refused(rig.dispatcher.cancel("no-such-task", caller=OPS_TOKEN), TASK_ACCESS)
    with pytest.raises(NotFoundError):
        await rig.dispatcher.get_task("no-such-task", caller=CAROL)
    # Any operator may (another one than the creator included).
    cancelled = await rig.dispatcher.cancel(task_id, "not needed", caller=CAROL)
    assert cancelled.status == TaskStatus.CANCELLED and cancelled.created_by == "alice"


async def test_the_creating_agent_reads_watches_and_cancels_its_own_task(make_rig: MakeRig) -> None:
    rig = await make_rig(restart_policy, FakeTools({"restart": lambda c: "restarted"}, needs_approval={"restart"}))
    creator = identity("billing", "agent", agent_id="billing", permissions=("dev:agent.ops:run",))
    task_id = await rig.start(caller=creator)
    await parked(rig, task_id)
    assert (await rig.dispatcher.get_task(task_id, caller=creator)).created_by == "billing"
    first = await anext(rig.dispatcher.watch(task_id, caller=creator))
    assert first.sequence == 1
    # The same subject without the agent id is not the creator.
    await refused(rig.dispatcher.get_task(task_id, caller=identity("billing", "agent")), TASK_ACCESS)
    assert (await rig.dispatcher.cancel(task_id, caller=creator)).status == TaskStatus.CANCELLED


async def test_only_the_creator_and_operators_resume_a_failed_task(make_rig: MakeRig) -> None:
    rig = await make_rig(answer, dispatcher={"service_retry_attempts": 1})
    rig.provider.rpc_failures = [UnavailableError("provider down")]
    creator = identity("billing", "agent", agent_id="billing", permissions=("dev:agent.ops:run",))
    task_id = await rig.start(caller=creator)
    assert (await rig.events(task_id))[-1].status == TaskStatus.FAILED
    other = identity("hr", "agent", agent_id="hr", permissions=("dev:agent.ops:run",))
    await refused(rig.start(caller=other, task_id=task_id), TASK_ACCESS)
    assert (await rig.dispatcher.get_task(task_id, caller=OPERATOR)).status == TaskStatus.FAILED
    assert await rig.start(caller=creator, task_id=task_id) == task_id
    assert (await rig.events(task_id))[-1].status == TaskStatus.SUCCEEDED
    entries = [(e.subject, e.action, e.target, e.outcome) for e in await audit(rig, "task.")]
    assert entries == [
        ("billing", "task.start", task_id, "ok"),
        ("hr", "task.resume", task_id, "PERMISSION_DENIED"),
        ("billing", "task.resume", task_id, "ok"),
    ]


async def test_a_task_without_a_creator_is_for_operators_only(make_rig: MakeRig) -> None:
    rig = await make_rig(answer)
    task_id = await rig.start(caller=identity("billing", "agent", agent_id="billing", permissions=("*:*:*",)))
    await rig.events(task_id)
    await rig.store.redis.hdel(rig.store.keys.task(task_id), "creator", "creator_agent")  # stored before issue 20
    task = await rig.dispatcher.get_task(task_id, caller=CAROL)
    assert task.created_by == ""
    await refused(
        rig.dispatcher.get_task(task_id, caller=identity("billing", "agent", agent_id="billing")), TASK_ACCESS
    )


async def test_the_task_token_carries_the_creator(make_rig: MakeRig) -> None:
    rig = await make_rig(answer)
    task_id = await rig.start(caller=CAROL)
    record = await rig.dispatcher.tasks.load(task_id)
    token = rig.dispatcher.mint_task_token(record, rig.dispatcher.agents.get("ops"))
    minted = rig.dispatcher.authenticator.verify(token)
    assert (minted.subject, minted.task_id, minted.creator) == ("ops", task_id, "carol")


# --- separation of duties ----------------------------------------------------------------------------


async def test_the_creator_cannot_approve_its_own_tasks_write(make_rig: MakeRig) -> None:
    tools = FakeTools({"restart": lambda c: "restarted"}, needs_approval={"restart"})
    rig = await make_rig(restart_policy, tools)
    task_id = await rig.start()  # by alice
    pending = await parked(rig, task_id)
    as_agent = identity("ops-oncall", "operator", agent_id="ops")  # an operator token of the task's agent
    for caller, missing in ((OPERATOR, NOT_TASK_CREATOR), (as_agent, NOT_TASK_AGENT)):
        for approve in (True, False):
            err = await refused(
                rig.dispatcher.resolve_approval(
                    task_id, pending.approval_id, approve=approve, reason="", arguments_sha256="", caller=caller
                ),
                missing,
            )
            assert "separation of duties" in err.message or missing == NOT_TASK_AGENT
    assert tools.approvals[pending.approval_id][1] == "PENDING"  # tool_svc was never asked
    approval, _ = await rig.dispatcher.resolve_approval(
        task_id, pending.approval_id, approve=True, reason="ok", arguments_sha256="", caller=APPROVER
    )
    assert approval.state == "APPROVED"
    assert (await rig.events(task_id))[-1].status == TaskStatus.SUCCEEDED
    entries = [(e.subject, e.action, e.target, e.outcome, e.detail) for e in await audit(rig, "approval.")]
    assert entries == [
        ("alice", "approval.resolve", pending.approval_id, "PERMISSION_DENIED", NOT_TASK_CREATOR),
        ("alice", "approval.resolve", pending.approval_id, "PERMISSION_DENIED", NOT_TASK_CREATOR),
        ("ops-oncall", "approval.resolve", pending.approval_id, "PERMISSION_DENIED", NOT_TASK_AGENT),
        ("ops-oncall", "approval.resolve", pending.approval_id, "PERMISSION_DENIED", NOT_TASK_AGENT),
    ]  # bob's decision is audited once, by tool_svc, which stores it (issue 42: it was audited twice)


async def test_separation_of_duties_can_be_turned_off(make_rig: MakeRig) -> None:
    tools = FakeTools({"restart": lambda c: "restarted"}, needs_approval={"restart"})
    rig = await make_rig(restart_policy, tools, overrides={"auth": {"separation_of_duties": False}})
    task_id = await rig.start()
    pending = await parked(rig, task_id)
    approval, _ = await rig.dispatcher.resolve_approval(
        task_id, pending.approval_id, approve=False, reason="no", arguments_sha256="", caller=OPERATOR
    )
    assert approval.state == "DENIED"
    assert await audit(rig, "approval.") == []  # the decision is tool_svc's to audit: nothing refused here


@pytest.mark.parametrize("finding", ["ran", "not_ran"])
async def test_the_creator_cannot_settle_its_own_task(make_rig: MakeRig, finding: str) -> None:
    fake = UnknownTools({"charge": lambda c: "unused"}, effect=finding == "ran")
    rig = await make_rig(charge_policy, fake, dispatcher=NO_SWEEPER)
    task_id = await rig.start()
    pending = await parked(rig, task_id)

    def settle(caller: Identity) -> Any:
        return rig.dispatcher.resolve_approval(
            task_id,
            pending.approval_id,
            approve=True,
            reason="checked",
            arguments_sha256=pending.arguments_sha256,
            caller=caller,
            settlement=finding,
        )

    await refused(settle(OPERATOR), NOT_TASK_CREATOR)
    await settle(APPROVER)
    assert (await rig.events(task_id))[-1].status == TaskStatus.SUCCEEDED
    entries = [(e.subject, e.action, e.outcome, e.detail) for e in await audit(rig, "settlement.")]
    assert entries == [
        ("alice", "settlement.resolve", "PERMISSION_DENIED", NOT_TASK_CREATOR),
    ]  # bob's settlement: audited by tool_svc, which records it


# --- the audit trail -----------------------------------------------------------------------------------


async def test_start_cancel_and_refusals_are_audited(make_rig: MakeRig) -> None:
    rig = await make_rig(restart_policy, FakeTools({"restart": lambda c: "restarted"}, needs_approval={"restart"}))
    await refused(rig.start(caller=BILLING, task_id="t-audit-1"), "dev:agent.ops:run")
    task_id = await rig.start(task_id="t-audit-1")
    await parked(rig, task_id)
    await refused(rig.dispatcher.cancel(task_id, "mine", caller=OPS_TOKEN), TASK_ACCESS)
    await rig.dispatcher.cancel(task_id, "not needed", caller=OPERATOR)
    entries = await audit(rig)
    assert [(e.subject, e.action, e.target, e.outcome, e.detail) for e in entries] == [
        ("billing", "task.start", "t-audit-1", "PERMISSION_DENIED", "dev:agent.ops:run"),
        ("alice", "task.start", "t-audit-1", "ok", "agent ops"),
        ("ops", "task.cancel", "t-audit-1", "PERMISSION_DENIED", TASK_ACCESS),
        ("alice", "task.cancel", "t-audit-1", "ok", "not needed"),
    ]
    assert all(e.time_ms > 0 for e in entries)


async def test_a_failed_audit_write_never_undoes_the_act(
    make_rig: MakeRig, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    rig = await make_rig(answer)

    async def unavailable(**fields: str) -> None:
        raise UnavailableError("redis away")

    monkeypatch.setattr(rig.dispatcher.auditor.audit, "record", unavailable)
    with caplog.at_level(logging.WARNING, logger="dispatcher_svc.access"):
        task_id = await rig.start()
        assert (await rig.events(task_id))[-1].status == TaskStatus.SUCCEEDED
        await refused(rig.start(caller=BILLING), "dev:agent.ops:run")  # the refusal stands too
    assert "audit: task.start of " + task_id + " by alice not recorded: redis away" in caplog.text
