"""Rolling upgrades (issue 27): tasks every earlier release stored, before ListTasks' index existed, are
indexed once by the backfill and then listed, newest first, with the creator rule of GetTask. A fixture
written since (redis_v5 on) holds the index already: the backfill then only confirms it."""

from __future__ import annotations

from agentmesh.config import DispatcherSettings
from agentmesh.identity_value import Identity
from dispatcher_svc.listing import Listing, TaskFilter
from dispatcher_svc.task_index import TaskIndex
from dispatcher_svc.tasks import TaskStore
from tests.compat.fixture_common import CREATOR
from tests.compat.test_rolling_upgrade import loaded  # noqa: F401  (the fixture, one run per redis_v*.json)
from tests.compat.upgrade_helpers import Loaded


def caller(subject: str, *roles: str) -> Identity:
    return Identity(subject, "", "", "dev", frozenset(roles), (), "", 0, 0, "")


async def test_stored_tasks_are_backfilled_once_and_listed(loaded: Loaded) -> None:  # noqa: F811
    tasks = TaskStore(loaded.store, DispatcherSettings())
    index = TaskIndex(loaded.store)
    listing = Listing(tasks, index, "compat-key")
    stored = loaded.records["dispatcher"]["tasks"]
    assert stored
    if index.key not in loaded.keys:  # a writer from before the index (every fixture up to redis_v4)
        assert (await listing.list_tasks(TaskFilter(), 0, "", caller=caller("op", "operator")))[0] == []
    # The backfill adds whatever the writer did not index (all of an older writer's tasks), once per Redis.
    assert await index.backfill() == len(stored)
    assert await index.backfill() == -1
    listed, token = await listing.list_tasks(TaskFilter(), 0, "", caller=caller("op", "operator"))
    assert token == ""
    assert sorted(t.task_id for t in listed) == sorted(stored)
    times = [t.create_time_ms for t in listed]
    assert times == sorted(times, reverse=True)
    # Records with a creator are the creator's; those from before creators existed are operators' only.
    records = {task_id: await tasks.load(task_id) for task_id in stored}
    mine, _ = await listing.list_tasks(TaskFilter(), 0, "", caller=caller(CREATOR))
    assert sorted(t.task_id for t in mine) == sorted(i for i, r in records.items() if r.creator == CREATOR)
