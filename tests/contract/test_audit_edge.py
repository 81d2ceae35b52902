"""The edge audits every call it refuses for its role (`auth.refused`), best effort and bounded.

Through a real ServiceHost: the entry names the subject and the full method; a call the role admits
and a call without a valid token write nothing; an audit write that hangs or fails never holds up or
changes the refusal, and at most `max_in_flight` writes are pending at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import grpc.aio
import pytest

from agentmesh.audit import AuditEntry, AuditLog
from agentmesh.errors import UnavailableError
from agentmesh.rpc.auth import RefusalAudit
from agentmesh.v1 import tool_pb2, tool_pb2_grpc
from tests.conftest import RunningService
from tool_svc.server import SPEC as TOOL_SPEC

Start = Callable[..., Awaitable[RunningService]]
RESOLVE = "/agentmesh.v1.ToolService/ResolveApproval"


def _request() -> tool_pb2.ResolveApprovalRequest:
    return tool_pb2.ResolveApprovalRequest(approval_id="apr_x", approve=True, arguments_sha256="0" * 64)


async def _resolve(svc: RunningService, metadata: Any) -> grpc.StatusCode:
    stub = tool_pb2_grpc.ToolServiceStub(svc.channel)  # type: ignore[no-untyped-call]
    try:
        await stub.ResolveApproval(_request(), metadata=metadata, timeout=10)
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


async def _refused(svc: RunningService, at_least: int = 1, wait_s: float = 5.0) -> list[AuditEntry]:
    assert svc.host.store is not None
    log = AuditLog(svc.host.store, svc.settings.audit)
    deadline = time.monotonic() + wait_s
    while True:
        found = await log.read(action="auth.refused")
        if len(found) >= at_least or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.02)


def _refusals(svc: RunningService) -> RefusalAudit:
    refusals = svc.host.auth.refusals
    assert refusals is not None
    return refusals


async def test_a_call_refused_for_its_role_is_audited_and_others_are_not(start_service: Start) -> None:
    svc = await start_service(TOOL_SPEC)
    # Admitted by its role (the approval does not exist): nothing to audit.
    assert await _resolve(svc, svc.metadata(("operator",), subject="ops-jane")) == grpc.StatusCode.NOT_FOUND
    # No token: UNAUTHENTICATED, not a role refusal.
    assert await _resolve(svc, ()) == grpc.StatusCode.UNAUTHENTICATED
    assert await _refused(svc, wait_s=0.3) == []
    agent = svc.metadata(subject="sre-bot", agent_id="sre-bot")
    assert await _resolve(svc, agent) == grpc.StatusCode.PERMISSION_DENIED
    [entry] = await _refused(svc)
    assert (entry.subject, entry.action, entry.target, entry.outcome) == (
        "sre-bot",
        "auth.refused",
        RESOLVE,
        "PERMISSION_DENIED",
    )
    assert entry.detail == "requires admin or operator; held agent, agent sre-bot"
    assert entry.time_ms > 0


async def test_a_hanging_audit_write_neither_delays_the_refusal_nor_piles_up(start_service: Start) -> None:
    svc = await start_service(TOOL_SPEC)
    refusals = _refusals(svc)
    release = asyncio.Event()
    started: list[str] = []

    class Hanging:
        async def record(self, **fields: Any) -> None:
            started.append(fields["target"])
            await release.wait()

    refusals.audit = Hanging()  # type: ignore[assignment]
    refusals.max_in_flight = 4
    refusals.timeout_s = 30.0
    agent = svc.metadata(subject="sre-bot", agent_id="sre-bot")
    began = time.monotonic()
    codes = [await _resolve(svc, agent) for _ in range(10)]
    assert codes == [grpc.StatusCode.PERMISSION_DENIED] * 10
    assert time.monotonic() - began < 5  # each answered at once, the writes still hanging
    assert len(started) == 4 and refusals.dropped == 6
    release.set()
    await refusals.aclose()
    # Room again once the writes finished.
    assert await _resolve(svc, agent) == grpc.StatusCode.PERMISSION_DENIED
    await refusals.aclose()
    assert len(started) == 5


async def test_a_failing_or_slow_audit_write_is_logged_and_the_refusal_stands(
    start_service: Start, caplog: pytest.LogCaptureFixture
) -> None:
    svc = await start_service(TOOL_SPEC)
    refusals = _refusals(svc)

    class Failing:
        async def record(self, **fields: Any) -> None:
            raise UnavailableError("redis unavailable during append to the audit log")

    class Slow:
        async def record(self, **fields: Any) -> None:
            await asyncio.sleep(10)

    agent = svc.metadata(subject="sre-bot", agent_id="sre-bot")
    for fake, said in ((Failing(), "redis unavailable"), (Slow(), "TimeoutError")):
        refusals.audit = fake  # type: ignore[assignment]
        refusals.timeout_s = 0.1
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="agentmesh.rpc.auth"):
            assert await _resolve(svc, agent) == grpc.StatusCode.PERMISSION_DENIED
            await refusals.aclose(timeout_s=2)
        assert any("auth.refused of " + RESOLVE in r.getMessage() and said in r.getMessage() for r in caplog.records)


async def test_aclose_cancels_writes_that_outlive_it() -> None:
    class Stuck:
        async def record(self, **fields: Any) -> None:
            await asyncio.sleep(60)

    from agentmesh.identity_value import Identity

    refusals = RefusalAudit(Stuck(), timeout_s=60)  # type: ignore[arg-type]
    refusals.refused(Identity.dev(), RESOLVE, "requires admin")
    began = time.monotonic()
    await refusals.aclose(timeout_s=0.1)
    assert time.monotonic() - began < 2
