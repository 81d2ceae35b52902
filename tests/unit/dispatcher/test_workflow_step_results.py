"""How an agent step's task ends the step (dispatcher_svc/workflow_steps.py): every final status settles
it, ABORTED with its FATAL code; a HANDED_OFF task's step follows the transfers to the task doing the work,
for its result and for a cancel."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from agentmesh.errors import AgentmeshError, ErrorCode, NotFoundError
from agentmesh.identity_value import Identity
from dispatcher_svc.model import Task, TaskStatus
from dispatcher_svc.workflow_steps import DispatcherSteps, RunIdentity, run_of_task, task_id_of
from dispatcher_svc.workflows.executor import StepResult, step_id

STEP = step_id("run-1", "fix", None, 1)


@dataclass
class _Record:
    task: Task

    def view(self) -> Task:
        return self.task

    @property
    def status(self) -> TaskStatus:
        return self.task.status


class FakeTasks:
    def __init__(self, *tasks: Task) -> None:
        self.tasks = {t.task_id: t for t in tasks}

    async def load(self, task_id: str) -> _Record:
        if task_id not in self.tasks:
            raise NotFoundError(f"no task {task_id}")
        return _Record(self.tasks[task_id])


def steps(tasks: FakeTasks, cancelled: list[str] | None = None) -> DispatcherSteps:
    async def cancel_task(task_id: str, who: Identity) -> None:
        assert who.subject == "alice"
        (cancelled if cancelled is not None else []).append(task_id)

    async def load(run_id: str) -> Any:
        return SimpleNamespace(meta=RunIdentity("alice").meta())

    return DispatcherSteps(
        store=None,  # type: ignore[arg-type]  # not used by agent steps' results and cancels (wake off)
        runs=SimpleNamespace(load=load),  # type: ignore[arg-type]
        starter=None,  # type: ignore[arg-type]
        tasks=tasks,  # type: ignore[arg-type]
        tools=None,  # type: ignore[arg-type]
        authenticator=None,  # type: ignore[arg-type]
        environment="dev",
        call_timeout_s=1,
        lease_s=1,
        ttl_s=60,
        cancel_task=cancel_task,
        wake=False,
    )


def task(task_id: str, status: TaskStatus, **fields: Any) -> Task:
    return Task(task_id=task_id, agent_id="a", goal="g", status=status, **fields)


@pytest.mark.parametrize(
    ("ended", "expected"),
    [
        (task(task_id_of(STEP), TaskStatus.SUCCEEDED, answer="done"), StepResult(output="done")),
        (task(task_id_of(STEP), TaskStatus.SUCCEEDED, output_json='{"x": 1}'), StepResult(output={"x": 1})),
        (
            task(task_id_of(STEP), TaskStatus.FAILED, error=AgentmeshError(ErrorCode.UPSTREAM_TIMEOUT, "slow")),
            StepResult(error=ErrorCode.UPSTREAM_TIMEOUT),
        ),
        (
            task(task_id_of(STEP), TaskStatus.ABORTED, error=AgentmeshError(ErrorCode.DANGEROUS_OPERATION, "rm")),
            StepResult(error=ErrorCode.DANGEROUS_OPERATION),
        ),
        (task(task_id_of(STEP), TaskStatus.CANCELLED), StepResult(error=ErrorCode.CANCELLED)),
        (task(task_id_of(STEP), TaskStatus.HANDED_OFF), StepResult(error=ErrorCode.INTERNAL)),  # to no task
        (task(task_id_of(STEP), TaskStatus.RUNNING), None),
        (task(task_id_of(STEP), TaskStatus.WAITING_CHILD, child_task_id="c"), None),
    ],
)
async def test_each_status_of_the_steps_task(ended: Task, expected: StepResult | None) -> None:
    assert await steps(FakeTasks(ended))._task_result(STEP) == expected


async def test_a_handed_off_step_ends_with_the_last_task_of_its_transfers() -> None:
    chain = FakeTasks(
        task(task_id_of(STEP), TaskStatus.HANDED_OFF, child_task_id="t2"),
        task("t2", TaskStatus.HANDED_OFF, child_task_id="t3"),
        task("t3", TaskStatus.RUNNING),
    )
    assert await steps(chain)._task_result(STEP) is None
    chain.tasks["t3"] = task("t3", TaskStatus.SUCCEEDED, answer="refund sent")
    assert await steps(chain)._task_result(STEP) == StepResult(output="refund sent")
    chain.tasks["t3"] = task("t3", TaskStatus.ABORTED, error=AgentmeshError(ErrorCode.BUDGET_EXHAUSTED, "spent"))
    assert await steps(chain)._task_result(STEP) == StepResult(error=ErrorCode.BUDGET_EXHAUSTED)


async def test_a_step_whose_task_is_missing_or_loops_fails() -> None:
    assert await steps(FakeTasks())._task_result(STEP) == StepResult(error=ErrorCode.INTERNAL)
    loop = FakeTasks(
        task(task_id_of(STEP), TaskStatus.HANDED_OFF, child_task_id="t2"),
        task("t2", TaskStatus.HANDED_OFF, child_task_id=task_id_of(STEP)),
    )
    assert await steps(loop)._task_result(STEP) == StepResult(error=ErrorCode.INTERNAL)


async def test_cancelling_a_handed_off_step_cancels_the_task_doing_its_work() -> None:
    cancelled: list[str] = []
    chain = FakeTasks(task(task_id_of(STEP), TaskStatus.HANDED_OFF, child_task_id="t2"), task("t2", TaskStatus.RUNNING))
    await steps(chain, cancelled).cancel(STEP)
    assert cancelled == ["t2"]
    chain.tasks["t2"] = task("t2", TaskStatus.SUCCEEDED)
    await steps(chain, cancelled).cancel(STEP)  # ended: nothing to cancel
    assert cancelled == ["t2"]


def test_the_run_of_a_task() -> None:
    assert run_of_task(task_id_of(STEP)) == "run-1"
    assert run_of_task(task_id_of(step_id("wf.tick.schedule.2026-12-06T07:00", "a", 3, 2))) == (
        "wf.tick.schedule.2026-12-06T07:00"
    )
    assert run_of_task("t-123") == "" and run_of_task("wf.abc") == ""
    assert run_of_task(task_id_of(step_id("r" * 130, "a", None, 1))) == ""  # a digest: left to the poll
