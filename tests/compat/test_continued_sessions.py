"""Rolling upgrades (issue 24): sessions and tasks every earlier release stored can be continued and read.

A session of an earlier release has no newest task recorded: its newest is the task that opened it (the
session id), generation 0. AttachTask continues it, keeps an older session's access rule (no attached
set: its agent's tokens), and the new task's token may use an attached one. A task record of an earlier
release has no step prompts: GetStepPrompt answers NOT_FOUND for its steps, and a commit by the new
release (three keys) leaves its record as it was."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agentmesh.config import ContextSettings, DispatcherSettings
from agentmesh.errors import AgentmeshError, ErrorCode
from context_svc.engine import ContextEngine
from context_svc.model import Caller as ContextCaller
from context_svc.model import Message, Role
from dispatcher_svc.prompts import PromptStore
from dispatcher_svc.tasks import TaskRecord, TaskStore
from tests.compat.test_rolling_upgrade import loaded  # noqa: F401  (the fixture, one run per redis_v*.json)
from tests.compat.upgrade_helpers import Loaded

OPERATOR = ContextCaller(subject="compat-upgraded-operator", is_operator=True)


async def test_every_stored_session_can_be_continued(loaded: Loaded) -> None:  # noqa: F811
    engine = ContextEngine(ContextSettings(), loaded.store)
    sessions = loaded.records["context"]["sessions"]
    assert sessions
    for session_id, want in sessions.items():
        caller = ContextCaller(**want["caller"])
        before, _ = await engine.get_session(OPERATOR, session_id)
        assert before.newest_task_id == session_id  # nothing recorded: the opening task's
        first = await engine.attach_task(OPERATOR, session_id, "t-next", want["session"]["agent_id"])
        assert (first.attached, first.newest_task_id, first.generation) == (False, session_id, 0)
        assert first.newest_age_s > 0
        done = await engine.attach_task(
            OPERATOR, session_id, "t-next", before.agent_id, expected_task_id=session_id, expected_generation=0
        )
        assert done.attached and done.generation == 1
        after, _ = await engine.get_session(OPERATOR, session_id)
        assert after.newest_task_id == "t-next" and after.message_count == before.message_count
        next_task = replace(caller, task_id="t-next")
        if before.tasks is None:
            assert after.tasks is None  # an older session keeps its rule: its agent's tokens
        else:
            assert after.tasks == (*before.tasks, "t-next")
        index, _ = await engine.append_message(next_task, session_id, Message(Role.USER, "And one more thing."))
        assert index == before.message_count
        view = await engine.build_context(next_task, session_id)
        assert view.messages[-1].content == "And one more thing."


async def test_stored_tasks_have_no_prompts_and_keep_their_records(loaded: Loaded) -> None:  # noqa: F811
    tasks = TaskStore(loaded.store, DispatcherSettings())
    prompts = PromptStore(loaded.store)
    records: dict[str, TaskRecord] = {}
    for task_id in loaded.records["dispatcher"]["tasks"]:
        records[task_id] = record = await tasks.load(task_id)
        assert await prompts.steps(task_id) == []
        if record.step >= 1:
            with pytest.raises(AgentmeshError) as missing:
                await prompts.get(task_id, record.session_id, 1, record.step)
            assert missing.value.code == ErrorCode.NOT_FOUND
    # A write by this release (three keys) to a task an older one stored changes only what it writes.
    for task_id, record in records.items():
        if record.status.terminal:
            continue
        await tasks.commit(task_id, fence=record.fence, fields={"update_ms": "1"})
        again = await tasks.load(task_id)
        assert replace(again, update_time_ms=record.update_time_ms) == record
