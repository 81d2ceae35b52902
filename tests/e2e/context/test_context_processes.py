"""context_svc as real processes: two replicas on one Redis, a restart, and `agentmesh context`."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from pydantic import SecretStr

from agentmesh.authenticator import Authenticator
from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.config import AuthSettings
from agentmesh.dev.localredis import LocalRedis
from agentmesh.v1 import common_pb2, context_pb2, context_pb2_grpc
from tests.e2e.conftest import AUTH_KEY, REPO, free_port, spawn, wait_serving
from tests.unit.context.ops_session import ops_session

pytestmark = pytest.mark.e2e

K = context_pb2
USER = common_pb2.ROLE_USER


def _env(base: dict[str, str], redis: LocalRedis, port: int) -> dict[str, str]:
    services = f'{{"context": {{"port": {port}, "http_port": 0}}}}'
    return {**base, "AGENTMESH_REDIS_URL": redis.url, "AGENTMESH_SERVICES": services}


def _start(env: dict[str, str], log: Path, port: int) -> subprocess.Popen[bytes]:
    process = spawn(["-m", "context_svc"], env, log)
    try:
        wait_serving(f"127.0.0.1:{port}", timeout_s=60)
    except TimeoutError:
        process.kill()
        pytest.fail("context_svc did not serve:\n" + log.read_text())
    return process


def _metadata() -> tuple[tuple[str, str], ...]:
    token = Authenticator(AuthSettings(key=SecretStr(AUTH_KEY)), "dev").mint(
        subject="ops-agent", roles=["agent"], agent_id="ops-agent", task_id="t-ops"
    )
    return ((IDENTITY_HEADER, token),)


async def _appends(targets: list[str], md: tuple[tuple[str, str], ...]) -> list[tuple[int, int]]:
    """50 concurrent appends spread over the replicas; (writer, index) of each."""
    channels = [grpc.aio.insecure_channel(t) for t in targets]
    stubs = [context_pb2_grpc.ContextServiceStub(c) for c in channels]  # type: ignore[no-untyped-call]
    try:

        async def one(i: int) -> tuple[int, int]:
            request = K.AppendMessageRequest(session_id="s1", message=common_pb2.Message(role=USER, content=f"m{i}"))
            reply = await stubs[i % len(stubs)].AppendMessage(request, metadata=md)
            return i, reply.index

        return await asyncio.gather(*(one(i) for i in range(50)))
    finally:
        for channel in channels:
            await channel.close(None)


async def _view(target: str, md: tuple[tuple[str, str], ...]) -> Any:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = context_pb2_grpc.ContextServiceStub(channel)  # type: ignore[no-untyped-call]
        return (await stub.BuildContext(K.BuildContextRequest(session_id="s1"), metadata=md)).view


def test_replicas_restart_and_cli(process_env: dict[str, str], e2e_redis: LocalRedis, tmp_path: Path) -> None:
    md = _metadata()
    ports = [free_port(), free_port()]
    targets = [f"127.0.0.1:{p}" for p in ports]
    envs = [_env(process_env, e2e_redis, p) for p in ports]
    replicas = [_start(envs[i], tmp_path / f"ctx{i}.log", ports[i]) for i in range(2)]
    try:
        with grpc.insecure_channel(targets[0]) as channel:
            stub = context_pb2_grpc.ContextServiceStub(channel)  # type: ignore[no-untyped-call]
            stub.CreateSession(K.CreateSessionRequest(session_id="s1", goal="排查 checkout"), metadata=md)
            for step in ops_session(6, big=False):
                if step.kind != "tool":
                    stub.AppendMessage(
                        K.AppendMessageRequest(
                            session_id="s1", message=common_pb2.Message(role=USER, content=step.text)
                        ),
                        metadata=md,
                    )
        results = asyncio.run(_appends(targets, md))
        assert sorted(index for _, index in results) == list(range(12, 62))

        before = asyncio.run(_view(targets[1], md))
        replicas[0].send_signal(signal.SIGTERM)
        assert replicas[0].wait(timeout=30) == 0
        replicas[0] = _start(envs[0], tmp_path / "ctx0-restarted.log", ports[0])
        after = asyncio.run(_view(targets[0], md))
        assert [(m.role, m.content) for m in before.messages] == [(m.role, m.content) for m in after.messages]

        cli = subprocess.run(
            [sys.executable, "-m", "agentmesh.cli", "context", "s1"],
            env=envs[1], cwd=REPO, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert cli.returncode == 0, cli.stderr
        assert "### SYSTEM block" in cli.stdout and "排查 checkout" in cli.stdout
        for block in ("system", "summary", "recent", "observations", "total"):
            assert f"\n{block}" in "\n" + cli.stdout
        missing = subprocess.run(
            [sys.executable, "-m", "agentmesh.cli", "context", "nope"],
            env=envs[1], cwd=REPO, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert missing.returncode == 1 and "NOT_FOUND" in missing.stderr
    finally:
        for process in replicas:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=30)
