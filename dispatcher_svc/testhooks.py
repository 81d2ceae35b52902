"""Fault-injection points for crash-safety tests, enabled only by an environment variable.

`DISPATCHER_TEST_PAUSE_AT=after_reply_checkpoint` (or `after_tool_call`, `after_append_result`) makes the first task
that reaches that point in this process announce it (a line on stderr; with
`DISPATCHER_TEST_PAUSE_FILE` set, "<point> <task id> <fence>" written to that file) and wait
there until the file is deleted. A test can `kill -9` the process at exactly that point, or freeze
it (SIGSTOP), let another replica take over, then thaw it and delete the file to watch the stale
owner's next write be refused. With `DISPATCHER_TEST_PAUSE_AGENT=<agent id>`, only a task of that agent
pauses (a relay's child, while its parent waits). Unset (always, outside tests), no hook is installed.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from dispatcher_svc.run.loop import Hook
from dispatcher_svc.tasks import TaskRecord

PAUSE_AT_ENV = "DISPATCHER_TEST_PAUSE_AT"
PAUSE_FILE_ENV = "DISPATCHER_TEST_PAUSE_FILE"
PAUSE_AGENT_ENV = "DISPATCHER_TEST_PAUSE_AGENT"
POINTS = frozenset(
    {
        "after_reply_checkpoint",
        "after_tool_call",
        "after_append_result",
        "before_handoff_child",  # a handoff's hop is built, its child task not created yet
        "after_handoff_child",  # the child task is created, the parent not yet HANDED_OFF / WAITING_CHILD
    }
)


def from_env() -> Hook | None:
    point = os.environ.get(PAUSE_AT_ENV, "").strip()
    if not point:
        return None
    if point not in POINTS:
        raise ValueError(f"{PAUSE_AT_ENV}={point!r}: expected one of {sorted(POINTS)}")
    marker = os.environ.get(PAUSE_FILE_ENV, "")
    agent = os.environ.get(PAUSE_AGENT_ENV, "").strip()
    fired = False

    async def pause(reached: str, record: TaskRecord) -> None:
        nonlocal fired
        if reached != point or fired or (agent and record.agent_id != agent):
            return
        fired = True
        print(f"PAUSED {reached} {record.task_id} fence={record.fence}", file=sys.stderr, flush=True)
        if not marker:
            await asyncio.Event().wait()  # until killed
        path = Path(marker)
        await asyncio.to_thread(path.write_text, f"{reached} {record.task_id} {record.fence}\n", encoding="utf-8")
        while await asyncio.to_thread(path.exists):  # noqa: ASYNC110 - a file, not an in-process event
            await asyncio.sleep(0.05)
        print(f"RESUMED {reached} {record.task_id}", file=sys.stderr, flush=True)

    return pause
