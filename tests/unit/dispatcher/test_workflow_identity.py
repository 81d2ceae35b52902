"""The identity a workflow run acts under, and the ids of its steps' tasks (dispatcher_svc/workflow_steps.py)."""

from __future__ import annotations

from agentmesh.identity_value import Identity
from agentmesh.workflow_config import WorkflowDefinition, WorkflowsSettings
from dispatcher_svc.workflow_steps import RunIdentity, run_of_step, task_id_of
from dispatcher_svc.workflows.executor import step_id
from dispatcher_svc.workflows.validate import Names, compile_workflow


def caller() -> Identity:
    return Identity(
        subject="alice",
        agent_id="",
        instance="",
        environment="prod",
        roles=frozenset({"operator"}),
        permissions=("prod:ops.read:read",),
        task_id="",
        issued_at=1,
        expires_at=2,
        token_id="t",
    )


def test_a_started_run_acts_as_its_starter_and_the_meta_round_trips() -> None:
    who = RunIdentity.of(caller(), "req-1")
    back = RunIdentity.from_meta(who.meta())
    assert back == who
    identity = back.identity("prod")
    assert (identity.subject, identity.roles, identity.permissions) == (
        "alice",
        frozenset({"operator"}),
        ("prod:ops.read:read",),
    )


def test_a_scheduled_run_acts_under_its_run_as_with_only_its_agents_run_grants() -> None:
    definition = WorkflowDefinition.model_validate(
        {
            "name": "daily",
            "schedule": {"cron": "0 6 * * *", "run_as": {"permissions": ["prod:reports:read"]}},
            "nodes": [
                {"id": "a", "type": "agent", "agent": "writer", "goal": "report"},
                {"id": "b", "type": "parallel", "over": "{{ input.xs }}",
                 "do": {"type": "agent", "agent": "checker", "goal": "x"}},
            ],
        }
    )  # fmt: skip
    flow = compile_workflow(
        definition, Names(frozenset({"writer", "checker", "other"}), frozenset()), WorkflowsSettings()
    )
    who = RunIdentity.scheduled(flow, "prod")
    assert who.subject == "workflow:daily" and who.roles == ("agent",)
    assert set(who.permissions) == {"prod:reports:read", "prod:agent.writer:run", "prod:agent.checker:run"}


def test_step_task_ids_are_deterministic_valid_and_name_their_run() -> None:
    sid = step_id("run.1", "lookup", None, 2)
    assert task_id_of(sid) == "wf.run.1.lookup.-.2" == task_id_of(sid)
    assert run_of_step(sid) == "run.1"
    long = step_id("r" * 128, "n", 3, 1)
    assert len(task_id_of(long)) <= 128 and task_id_of(long) == task_id_of(long)
    assert run_of_step(long) == "r" * 128
