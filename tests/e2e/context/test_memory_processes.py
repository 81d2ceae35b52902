"""Long-term memory across conversations (issue 51), context_svc as a real process on a real Redis.

A user states a preference in one session ("I prefer invoices in EUR", extraction on); the service is
restarted with its memory clock three weeks later (context.memory_clock_offset_s); a new session of
the same user asking about an invoice gets the preference in its system block with its source cited,
another user does not; the Chinese statement works the same; a correction supersedes; Forget of the
user leaves no trace in Redis (every key and value scanned).
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2
from pydantic import SecretStr

from agentmesh.authenticator import Authenticator
from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.config import AuthSettings
from agentmesh.dev.localredis import LocalRedis
from agentmesh.v1 import common_pb2, context_pb2, context_pb2_grpc
from tests.e2e.conftest import AUTH_KEY, free_port, spawn, wait_serving
from tests.rediscluster import sync_client

pytestmark = pytest.mark.e2e

K = context_pb2
USER = common_pb2.ROLE_USER
AGENT = "billing-agent"
DAYS_21 = 21 * 86400
Md = tuple[tuple[str, str], ...]


def _md(task_id: str, user: str) -> Md:
    """A task's token as the dispatcher mints it: the task acts for `user` (its creator)."""
    token = Authenticator(AuthSettings(key=SecretStr(AUTH_KEY)), "dev").mint(
        subject=AGENT, roles=["agent"], agent_id=AGENT, task_id=task_id, creator=user
    )
    return ((IDENTITY_HEADER, token),)


def _start(
    base: dict[str, str], redis_server: LocalRedis, log: Path, offset_s: float
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {
        **base,
        "AGENTMESH_REDIS_URL": redis_server.url,
        "AGENTMESH_SERVICES": f'{{"context": {{"port": {port}, "http_port": 0}}}}',
        "AGENTMESH_CONTEXT": json.dumps({"memory_extract": True, "memory_clock_offset_s": offset_s}),
    }
    process = spawn(["-m", "context_svc"], env, log)
    try:
        wait_serving(f"127.0.0.1:{port}", timeout_s=60)
    except TimeoutError:
        process.kill()
        pytest.fail("context_svc did not serve:\n" + log.read_text())
    return process, f"127.0.0.1:{port}"


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0


def _say(stub: context_pb2_grpc.ContextServiceStub, md: Md, session_id: str, text: str) -> int:
    message = common_pb2.Message(role=USER, content=text)
    index: int = stub.AppendMessage(K.AppendMessageRequest(session_id=session_id, message=message), metadata=md).index
    return index


def _session(stub: context_pb2_grpc.ContextServiceStub, md: Md, session_id: str, *said: str) -> str:
    """Opens a session, says `said`, and returns the system block BuildContext gives it."""
    stub.CreateSession(K.CreateSessionRequest(session_id=session_id, goal="help with billing"), metadata=md)
    for text in said:
        _say(stub, md, session_id, text)
    return _system(stub, md, session_id)


def _system(stub: context_pb2_grpc.ContextServiceStub, md: Md, session_id: str) -> str:
    view = stub.BuildContext(K.BuildContextRequest(session_id=session_id), metadata=md).view
    content: str = view.messages[0].content
    return content


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, dict):
        return " ".join(f"{_text(k)}={_text(v)}" for k, v in value.items())
    if isinstance(value, list | set | tuple):
        return " ".join(_text(v) for v in value)
    return str(value)


def _value(client: Any, key: bytes, kind: str) -> object:
    if kind == "string":
        return client.get(key)
    if kind == "hash":
        return client.hgetall(key)
    if kind == "list":
        return client.lrange(key, 0, -1)
    if kind in ("set", "zset"):
        return client.smembers(key) if kind == "set" else client.zrange(key, 0, -1)
    if kind == "stream":
        return client.xrange(key)
    return kind


def _dump(redis_server: LocalRedis) -> str:
    """Every key and value in Redis as text (strings, hashes, lists, sets, sorted sets, streams)."""
    client = sync_client(redis_server.url)  # a RedisCluster under --redis=cluster: scans every primary
    out: list[str] = []
    try:
        for key in client.scan_iter(match="*", count=1000):
            kind = _text(client.type(key))
            out.append(f"{_text(key)} {_text(_value(client, key, kind))}")
    finally:
        client.close()
    return "\n".join(out)


def test_a_preference_is_remembered_weeks_later_for_its_user_only(
    process_env: dict[str, str], e2e_redis: LocalRedis, tmp_path: Path
) -> None:
    alice1, alice2, bob = _md("t-a1", "user-a"), _md("t-a2", "user-a"), _md("t-b1", "user-b")
    chen1, chen2 = _md("t-c1", "user-c"), _md("t-c2", "user-c")
    process, target = _start(process_env, e2e_redis, tmp_path / "day0.log", 0)
    try:
        with grpc.insecure_channel(target) as channel:
            stub = context_pb2_grpc.ContextServiceStub(channel)  # type: ignore[no-untyped-call]
            _session(stub, alice1, "a1", "Hi, I need help with billing.", "I prefer invoices in EUR. Thanks!")
            _session(stub, chen1, "c1", "你好", "以后发票都用欧元")
            # A memory that expires within the three weeks must not come back.
            subject_a = K.MemorySubject(scope=K.MEMORY_SCOPE_USER, id="user-a")
            stub.Remember(
                K.RememberRequest(
                    subject=subject_a,
                    text="This week invoices carry the reference PO-777",
                    kind=K.MEMORY_KIND_FACT,
                    source=K.MemorySource(task_id="t-a1"),
                    ttl=duration_pb2.Duration(seconds=7 * 86400),
                ),
                metadata=alice1,
            )
    finally:
        _stop(process)

    process, target = _start(process_env, e2e_redis, tmp_path / "day21.log", DAYS_21)
    try:
        with grpc.insecure_channel(target) as channel:
            stub = context_pb2_grpc.ContextServiceStub(channel)  # type: ignore[no-untyped-call]
            system = _session(stub, alice2, "a2", "Can you resend the invoice for order 42?")
            assert "I prefer invoices in EUR." in system
            assert "source: session a1 message #1" in system  # the statement's own message
            assert "PO-777" not in system  # expired after 7 days
            others = _session(stub, bob, "b1", "Can you resend the invoice for order 42?")
            assert "EUR" not in others and "long-term memory" not in others
            with pytest.raises(grpc.RpcError) as denied:
                stub.ListMemories(K.ListMemoriesRequest(subject=subject_a), metadata=bob)
            assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED

            chinese = _session(stub, chen2, "c2", "上个月的发票在哪里？")
            assert "以后发票都用欧元" in chinese and "source: session c1 message #1" in chinese
            _say(stub, chen2, "c2", "以后发票都用美元")
            chinese = _system(stub, chen2, "c2")
            assert "以后发票都用美元" in chinese and "欧元" not in chinese

            correction = _say(stub, alice2, "a2", "No, actually I prefer invoices in USD.")
            _say(stub, alice2, "a2", "And the invoice for order 43?")
            system = _system(stub, alice2, "a2")
            assert "I prefer invoices in USD." in system and f"session a2 message #{correction}" in system
            assert "invoices in EUR" not in system
            every = stub.ListMemories(K.ListMemoriesRequest(subject=subject_a, include_inactive=True), metadata=alice2)
            superseded = {r.text: r.superseded_by for r in every.records}
            assert (
                superseded["I prefer invoices in EUR."] != ""
                and superseded["No, actually I prefer invoices in USD."] == ""
            )

            before = _dump(e2e_redis)
            memory_keys = [line for line in before.splitlines() if ":mem:{user:" in line]
            assert len(memory_keys) >= 2  # user-a's and user-c's records are in Redis
            forgotten = stub.Forget(K.ForgetRequest(subject=subject_a), metadata=alice2)
            assert forgotten.deleted_count == 2  # EUR (superseded) and USD; the expired PO-777 went at the USD one
            system = _system(stub, alice2, "a2")
            assert "long-term memory" not in system and "USD" not in system
            # The statements stay in the conversations' logs until the sessions go: delete them too.
            for session_id in ("a1", "a2"):
                md = alice2 if session_id == "a2" else alice1
                stub.DeleteSession(K.DeleteSessionRequest(session_id=session_id), metadata=md)
            after = _dump(e2e_redis)
            for trace in ("EUR", "USD", "PO-777", "user-a"):
                assert trace not in after, trace
            assert "以后发票都用美元" in after  # user-c's memory is untouched
    finally:
        _stop(process)
