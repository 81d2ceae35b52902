"""The chaos harness, short and seeded, in the normal test run (issue 18): 8 tasks with counted side
effects while Redis, tool_svc, provider_svc and the dispatcher are killed with -9 and context_svc is
paused with SIGSTOP (seed 29's schedule touches every target); every invariant must hold, and every
task SUCCEEDS without a client's resume (issue 49: the dispatcher waits the restarts out). `make chaos`
runs the long version."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.harness import run_chaos

pytestmark = pytest.mark.e2e
SEED = 29


@pytest.mark.timeout(110)
async def test_kills_lose_and_repeat_nothing(tmp_path: Path) -> None:
    report = await run_chaos(
        SEED,
        rounds=1,
        tasks_per_round=8,
        kills=4,
        pauses=1,
        drain_timeout_s=25,
        final_timeout_s=25,
        max_resumes=0,
        workdir=tmp_path / "chaos",
    )
    table = report.table()
    assert {a.service for a in report.actions} == {"redis", "tool", "provider", "dispatcher", "context"}, table
    assert report.count("kill -9") == 4 and report.count("SIGSTOP") == 1, table
    assert report.tasks == 8, table
    assert report.violations == 0, table
    assert report.statuses == {"SUCCEEDED": 8}, table
    assert not report.resumes, table
