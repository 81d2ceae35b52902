"""dispatcher_svc/access.py's rules as pure functions (issue 50): who may resolve, who may see a task,
and what each refusal tells the caller (the subject, the task and the rule, never another task's facts)."""

from __future__ import annotations

import logging

import pytest

from agentmesh.audit import AuditLog
from agentmesh.errors import PermissionDeniedError, UnavailableError
from agentmesh.store import Store
from dispatcher_svc.access import (
    NOT_TASK_AGENT,
    NOT_TASK_CREATOR,
    TASK_ACCESS,
    Auditor,
    Creator,
    check_resolver,
    check_run,
    check_task,
)
from tests.unit.dispatcher.conftest import identity

ALICE = identity("alice", "operator")
BOB = identity("bob", "operator")
OPS_AGENT = identity("ops-bot", "agent", agent_id="ops")
BILLING_AGENT = identity("billing-bot", "agent", agent_id="billing")


def denied(call: object) -> PermissionDeniedError:
    assert callable(call)
    with pytest.raises(PermissionDeniedError) as caught:
        call()
    return caught.value


def test_a_creator_is_recorded_with_its_agent_only_when_it_has_one() -> None:
    assert Creator.of(ALICE).fields() == {"creator": "alice"}
    assert Creator.of(OPS_AGENT).fields() == {"creator": "ops-bot", "creator_agent": "ops"}


def test_the_creator_may_not_resolve_and_the_refusal_says_why() -> None:
    err = denied(lambda: check_resolver(ALICE, "t-1", Creator.of(ALICE), task_agent="ops"))
    assert err.missing_permission == NOT_TASK_CREATOR
    assert err.message == (
        "alice started task t-1 and may not resolve its approvals: another operator must (separation of duties)"
    )
    assert "alice started task t-1 and may not resolve its approvals" in err.message
    assert "another operator must (separation of duties)" in err.message
    check_resolver(BOB, "t-1", Creator.of(ALICE), task_agent="ops")  # another operator may


def test_the_tasks_own_agent_may_not_resolve_but_another_agent_may() -> None:
    err = denied(lambda: check_resolver(OPS_AGENT, "t-2", Creator.of(ALICE), task_agent="ops"))
    assert err.missing_permission == NOT_TASK_AGENT
    assert err.message.endswith("agent ops runs task t-2 and may not resolve its approvals")
    # An agent's token that is not the task's agent is judged by the other rules, not refused here.
    check_resolver(BILLING_AGENT, "t-2", Creator.of(ALICE), task_agent="ops")
    check_resolver(ALICE, "t-2", Creator(), task_agent="")  # no creator, no agent: nothing to separate


def test_a_refused_look_names_the_task_the_caller_and_the_verb_the_same_whether_it_exists_or_not() -> None:
    err = denied(lambda: check_task(BILLING_AGENT, "t-3", Creator.of(OPS_AGENT), "cancel"))
    assert err.missing_permission == TASK_ACCESS
    assert err.message.endswith("no task t-3 started by billing-bot: only a task's creator and operators may cancel it")
    missing = denied(lambda: check_task(BILLING_AGENT, "t-3", Creator(), "cancel"))
    assert missing.message == err.message
    check_task(OPS_AGENT, "t-3", Creator.of(OPS_AGENT), "cancel")
    check_task(BOB, "t-3", Creator.of(OPS_AGENT), "cancel")


def test_a_refused_start_names_the_grant_it_needs() -> None:
    err = denied(lambda: check_run(BILLING_AGENT, "dev", "ops"))
    assert err.message.endswith(
        "billing-bot may not start tasks as agent ops: needs the operator role or the grant dev:agent.ops:run"
    )
    check_run(ALICE, "dev", "ops")


# --- the audit entries (agentmesh.audit), as a reader of the stream finds them ---------------------------


async def test_an_act_is_audited_with_no_detail_unless_given(store: Store) -> None:
    auditor = Auditor(AuditLog(store))
    await auditor.record(ALICE, "task.start", "t-1")
    refusal = denied(lambda: check_task(BILLING_AGENT, "t-1", Creator.of(ALICE), "cancel"))
    await auditor.refused(BILLING_AGENT, "task.cancel", "t-1", refusal)
    (started, refused) = await AuditLog(store).read()
    assert (started.subject, started.action, started.target, started.outcome, started.detail) == (
        "alice",
        "task.start",
        "t-1",
        "ok",
        "",
    )
    assert (refused.subject, refused.outcome, refused.detail) == ("billing-bot", "PERMISSION_DENIED", TASK_ACCESS)


@pytest.mark.parametrize(
    ("error", "said"), [(UnavailableError("redis away"), "redis away"), (RuntimeError(), "RuntimeError")]
)
async def test_a_failed_audit_write_is_logged_whole_and_never_raised(
    store: Store, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, error: Exception, said: str
) -> None:
    auditor = Auditor(AuditLog(store))

    async def failing(**fields: str) -> None:
        raise error

    monkeypatch.setattr(auditor.audit, "record", failing)
    with caplog.at_level(logging.WARNING, logger="dispatcher_svc.access"):
        await auditor.record(ALICE, "task.start", "t-1")
    assert [r.getMessage() for r in caplog.records] == [f"audit: task.start of t-1 by alice not recorded: {said}"]
