"""Long-term memory found by meaning (issue 51): context_svc as a real process with
`context.memory_recall: semantic` (the offline multilingual embedder) on a real Redis.

A user states a preference in English, another in Chinese; three weeks later (memory clock injected) a new
session asks "What currency should the bill use?", which shares no word with either statement, and the
system block cites the user's own statement and its source; another user never sees it; a Chinese
correction supersedes the Chinese preference; Forget of the user leaves no trace in Redis (vectors live
only in the process and are dropped with the records: tests/unit/context/test_semantic_memory.py).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import grpc
import pytest

from agentmesh.dev.localredis import LocalRedis
from agentmesh.v1 import context_pb2, context_pb2_grpc
from tests.e2e.conftest import free_port, spawn, wait_serving
from tests.e2e.context.test_memory_processes import DAYS_21, _dump, _md, _say, _session, _stop, _system

pytestmark = pytest.mark.e2e

K = context_pb2
QUESTION = "What currency should the bill use?"


def _start(
    base: dict[str, str], redis_server: LocalRedis, log: Path, offset_s: float
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    context = {"memory_extract": True, "memory_clock_offset_s": offset_s, "memory_recall": "semantic"}
    env = {
        **base,
        "AGENTMESH_REDIS_URL": redis_server.url,
        "AGENTMESH_SERVICES": f'{{"context": {{"port": {port}, "http_port": 0}}}}',
        "AGENTMESH_CONTEXT": json.dumps(context),
    }
    process = spawn(["-m", "context_svc"], env, log)
    try:
        wait_serving(f"127.0.0.1:{port}", timeout_s=60)
    except TimeoutError:
        process.kill()
        pytest.fail("context_svc did not serve:\n" + log.read_text())
    return process, f"127.0.0.1:{port}"


def test_a_preference_is_found_by_meaning_weeks_later_for_its_user_only(
    process_env: dict[str, str], e2e_redis: LocalRedis, tmp_path: Path
) -> None:
    alice1, alice2, bob = _md("s-a1", "user-sa"), _md("s-a2", "user-sa"), _md("s-b1", "user-sb")
    chen1, chen2 = _md("s-c1", "user-sc"), _md("s-c2", "user-sc")
    process, target = _start(process_env, e2e_redis, tmp_path / "day0.log", 0)
    try:
        with grpc.insecure_channel(target) as channel:
            stub = context_pb2_grpc.ContextServiceStub(channel)  # type: ignore[no-untyped-call]
            _session(stub, alice1, "sa1", "Hi, I need help with billing.", "I prefer invoices in EUR. Thanks!")
            _session(stub, chen1, "sc1", "你好", "以后发票都用欧元")
    finally:
        _stop(process)

    process, target = _start(process_env, e2e_redis, tmp_path / "day21.log", DAYS_21)
    try:
        with grpc.insecure_channel(target) as channel:
            stub = context_pb2_grpc.ContextServiceStub(channel)  # type: ignore[no-untyped-call]
            system = _session(stub, alice2, "sa2", QUESTION)
            assert "I prefer invoices in EUR." in system and "source: session sa1 message #1" in system
            others = _session(stub, bob, "sb1", QUESTION)
            assert "EUR" not in others and "long-term memory" not in others

            chinese = _session(stub, chen2, "sc2", QUESTION)
            assert "以后发票都用欧元" in chinese and "source: session sc1 message #1" in chinese
            correction = _say(stub, chen2, "sc2", "以后发票都用美元")
            _say(stub, chen2, "sc2", QUESTION)
            chinese = _system(stub, chen2, "sc2")
            assert "以后发票都用美元" in chinese and "欧元" not in chinese
            assert f"source: session sc2 message #{correction}" in chinese

            subject = K.MemorySubject(scope=K.MEMORY_SCOPE_USER, id="user-sa")
            assert stub.Forget(K.ForgetRequest(subject=subject), metadata=alice2).deleted_count == 1
            system = _system(stub, alice2, "sa2")
            assert "long-term memory" not in system and "EUR" not in system
            for session_id, md in (("sa1", alice1), ("sa2", alice2)):
                stub.DeleteSession(K.DeleteSessionRequest(session_id=session_id), metadata=md)
            after = _dump(e2e_redis)
            assert "EUR" not in after and "user-sa" not in after
    finally:
        _stop(process)
