"""bench/peer_skeleton.py (issue 45): the task's bare shape runs as four processes, bare and with our RPC
edge, each task streaming its 12 events; the edge variant really runs our edge (its spans are written).
No speed is asserted."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import grpc
import grpc.aio
import pytest

from bench.peer_skeleton import ROLES, SERVICE, Skeleton

pytestmark = pytest.mark.e2e


async def _tasks(skeleton: Skeleton, n: int) -> tuple[list[float], float, float]:
    skeleton.start()
    try:
        await skeleton.ready()
        if skeleton.edge:
            # The edge checks tokens as the services' does: a call without one is refused.
            async with grpc.aio.insecure_channel(f"127.0.0.1:{skeleton.ports['dispatcher']}") as channel:
                stream = channel.unary_stream(f"/{SERVICE}/RunTask")  # type: ignore[call-arg]
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    async for _ in stream(b"goal", timeout=30):
                        pass
                assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        return await skeleton.run(n, 2, "t")
    finally:
        skeleton.stop()


@pytest.mark.parametrize("edge", [False, True], ids=["bare", "edge"])
def test_the_skeleton_runs_tasks_of_twelve_events(redis_url: str, tmp_path: Path, edge: bool) -> None:
    skeleton = Skeleton(redis_url, tmp_path, edge=edge)
    latencies, wall, cpu = asyncio.run(_tasks(skeleton, 4))
    assert len(latencies) == 4 and wall > 0 and cpu > 0
    spans_file = tmp_path / "skeleton-edge" / "spans.jsonl"
    if not edge:
        assert not spans_file.exists()
        return
    spans = [json.loads(line) for line in spans_file.read_text().splitlines()]
    servers = {s["name"] for s in spans if s["kind"].endswith("SERVER")}
    # Every call of the 4 tasks has its SERVER span (RunTask's included): the edge ran on both ends.
    assert {"skeleton.Skeleton/RunTask", "skeleton.Skeleton/Generate", "skeleton.Skeleton/ExecuteTool"} <= servers
    assert sum(1 for s in spans if s["name"] == "skeleton.Skeleton/Generate" and s["kind"].endswith("CLIENT")) == 8
    assert {s["service"] for s in spans} >= {f"skeleton-{role}" for role in ROLES}
