"""Two tool_svc processes sharing one Redis draw from one per-agent token bucket."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import grpc
import pytest

from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.identity import mint_token
from agentmesh.localredis import LocalRedis
from agentmesh.v1 import common_pb2, tool_pb2, tool_pb2_grpc
from tests.e2e.conftest import AUTH_KEY, free_port, spawn, wait_serving

pytestmark = pytest.mark.e2e

CAPACITY = 5


def test_rate_limit_holds_across_two_processes(
    process_env: dict[str, str], e2e_redis: LocalRedis, tmp_path: Path
) -> None:
    config = tmp_path / "agentmesh.yaml"
    config.write_text(
        "environment: dev\n"
        "auth: {mode: enabled}\n"
        f"tools:\n  rate_limit: {{capacity: {CAPACITY}, refill_per_second: 0.001}}\n",
        encoding="utf-8",
    )
    ports = [free_port(), free_port()]
    processes = []
    try:
        for i, port in enumerate(ports):
            env = {
                **process_env,
                "AGENTMESH_CONFIG": str(config),
                "AGENTMESH_REDIS_URL": e2e_redis.url,
                "AGENTMESH_SERVICES": json.dumps({"tool": {"host": "127.0.0.1", "port": port, "http_port": 0}}),
            }
            processes.append(spawn(["-m", "tool_svc"], env, tmp_path / f"tool-{i}.log"))
        for i, port in enumerate(ports):
            try:
                wait_serving(f"127.0.0.1:{port}", timeout_s=60)
            except TimeoutError:
                pytest.fail((tmp_path / f"tool-{i}.log").read_text())

        token = mint_token(
            AUTH_KEY.encode(), subject="agent-a", agent_id="agent-a", roles=["agent"], permissions=["*:*:*"], ttl_s=300
        )
        outcomes = []
        for n in range(4 * CAPACITY):
            with grpc.insecure_channel(f"127.0.0.1:{ports[n % 2]}") as channel:
                reply = tool_pb2_grpc.ToolServiceStub(channel).ExecuteTool(  # type: ignore[no-untyped-call]
                    tool_pb2.ExecuteToolRequest(
                        call=common_pb2.ToolCall(id=f"c{n}", name="calculator", arguments_json='{"expression": "2+2"}'),
                        session_id="s1",
                    ),
                    metadata=((IDENTITY_HEADER, token),),
                    timeout=10,
                )
            outcomes.append(reply.result)
        served = [r for r in outcomes if r.WhichOneof("outcome") == "output"]
        limited = [r for r in outcomes if r.WhichOneof("outcome") == "error"]
        assert len(served) == CAPACITY
        assert all(r.error.code == common_pb2.ERROR_CODE_RATE_LIMITED for r in limited)
        assert len(limited) == 3 * CAPACITY
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            assert process.wait(timeout=30) == 0
