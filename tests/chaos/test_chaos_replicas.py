"""Two replicas of every service on a Redis Cluster, short and seeded (issue 28; `make test-cluster`
runs it, `make chaos-replicas` the 200-task version): tasks spread over both dispatchers while one
replica of each service and one Redis primary are killed with -9 and restarted, and every invariant
of the chaos harness holds (each side effect once, counted at the upstream)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.harness import run_chaos
from tests.chaos.report import SERVICES
from tests.rediscluster import cluster_mode

pytestmark = pytest.mark.e2e
SEED = 5
TASKS = 24


@pytest.mark.timeout(300)
async def test_two_replicas_of_everything_survive_a_rolling_kill(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if not cluster_mode(request.config):
        pytest.skip("runs in make test-cluster (--redis=cluster): eight services and a Redis Cluster")
    report = await run_chaos(
        SEED,
        rounds=1,
        tasks_per_round=TASKS,
        dispatchers=2,
        tools=2,
        contexts=2,
        providers=2,
        cluster=True,
        rolling=True,
        drain_timeout_s=90,
        final_timeout_s=90,
        workdir=tmp_path / "chaos",
    )
    table = report.table()
    killed = {a.service for a in report.actions if a.kind == "kill -9"}
    assert killed == {*SERVICES, "redis"}, table
    assert not [a for a in report.actions if a.error], table
    assert report.tasks == TASKS, table
    assert set(report.owners) == {"dispatcher-1", "dispatcher-2"}, f"tasks did not spread over both\n{table}"
    assert report.violations == 0, table
