"""bench_scale's Mesh, which every multi-process bench starts its services with: a service that does not
come up stops the others before the error is raised (left running, they would keep polling Redis and
skew every later figure of the same machine)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentmesh.dev.localredis import LocalRedis
from bench import bench_peer
from bench.bench_scale import Mesh

pytestmark = pytest.mark.e2e


def test_a_service_that_cannot_start_stops_the_others(tmp_path: Path, fresh_redis: LocalRedis) -> None:
    settings = bench_peer.settings()
    settings["providers"]["backends"][0]["models"][0]["policy"] = "bench.no_such_module:policy"
    mesh = Mesh(1, fresh_redis.url, tmp_path, "", settings=settings)
    with pytest.raises(RuntimeError, match="provider did not start"):
        mesh.start()
    assert set(mesh.processes) == {"context", "tool", "provider", "dispatcher-1"}
    codes = {label: process.poll() for label, process in mesh.processes.items()}
    assert codes == {"context": 0, "tool": 0, "provider": 2, "dispatcher-1": 0}, codes
    assert "cannot import bench.no_such_module" in (tmp_path / "provider-1.log").read_text()
