"""Edge hygiene under hostile callers (docs/design.md §11, issue 21).

- a flood of the caller's faults (garbage bytes, no token) costs a bounded, small amount of log and
  never a traceback: client errors are logged briefly, at INFO at most, rate-limited per kind;
- a bad token costs at most one short log line.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import grpc
import grpc.aio
import pytest

from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.telemetry import JsonFormatter
from agentmesh.v1 import context_pb2
from context_svc.server import SPEC as CONTEXT_SPEC
from tests.conftest import RunningService

Start = Callable[..., Awaitable[RunningService]]
CONTEXT = context_pb2.DESCRIPTOR.services_by_name["ContextService"]


class _Records(logging.Handler):
    """Every record any logger sends to the root, grpc's own included, at every level."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.setFormatter(JsonFormatter("test"))

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def lines(self, level: int = logging.DEBUG) -> list[str]:
        return [self.format(r) for r in self.records if r.levelno >= level]


@pytest.fixture
def logged() -> Iterator[_Records]:
    handler = _Records()
    root = logging.getLogger()
    old_level = root.level
    # Below every service's configured level: whatever is emitted at all is counted.
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)


def _no_tracebacks(handler: _Records) -> None:
    for record in handler.records:
        assert not record.exc_info and not record.exc_text, handler.format(record)
        assert "Traceback" not in record.getMessage(), record.getMessage()


async def test_a_flood_of_unauthenticated_garbage_costs_little_log_and_no_traceback(
    start_service: Start, logged: _Records
) -> None:
    svc = await start_service(CONTEXT_SPEC)
    channel: Any = svc.channel  # bytes in, bytes out
    methods = [m for m in CONTEXT.methods if not m.client_streaming and not m.server_streaming]
    rng = random.Random(21)
    logged.records.clear()
    for i in range(200):
        method = methods[i % len(methods)]
        payload = rng.randbytes(rng.randrange(1, 2048))
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await channel.unary_unary(f"/{CONTEXT.full_name}/{method.name}")(payload, timeout=20)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    _no_tracebacks(logged)
    assert all(r.levelno <= logging.INFO for r in logged.records), logged.lines(logging.WARNING)
    # At the level a service logs by default (INFO) and below it alike. The log is rate-limited per
    # (method, code), so its bound grows with the service's methods (~1.8 kB each; 11 methods: 20 kB).
    size = sum(len(line) + 1 for line in logged.lines())
    assert size < 1_800 * len(methods), (size, len(logged.records), logged.lines()[:5])
    # Still visible to the operator, kind by kind.
    assert any("UNAUTHENTICATED" in r.getMessage() for r in logged.records)


async def test_a_bad_token_logs_at_most_one_short_line(start_service: Start, logged: _Records) -> None:
    svc = await start_service(CONTEXT_SPEC)
    stub_call = svc.channel.unary_unary(
        f"/{CONTEXT.full_name}/GetSession",
        request_serializer=context_pb2.GetSessionRequest.SerializeToString,
        response_deserializer=context_pb2.GetSessionResponse.FromString,
    )
    forged = "eyJ2IjoxfQ." + "A" * 2000  # well-formed enough to be checked, and long
    logged.records.clear()
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub_call(
            context_pb2.GetSessionRequest(session_id="s-" + "x" * 5000),
            metadata=((IDENTITY_HEADER, forged),),
            timeout=20,
        )
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    _no_tracebacks(logged)
    lines = logged.lines()
    assert len(lines) <= 1, lines
    for record, line in zip(logged.records, lines, strict=True):
        assert record.levelno <= logging.INFO
        assert len(line) < 600, line
        assert "AAAA" not in line and "xxxx" not in line, line
    # The same bad call again and again: a few lines in all, not one each.
    for _ in range(50):
        with pytest.raises(grpc.aio.AioRpcError):
            await stub_call(context_pb2.GetSessionRequest(session_id="s"), metadata=((IDENTITY_HEADER, forged),))
    _no_tracebacks(logged)
    assert len(logged.records) <= 10, [r.getMessage() for r in logged.records]


async def test_a_flood_of_undecodable_requests_is_logged_briefly_and_rate_limited(
    start_service: Start, logged: _Records
) -> None:
    svc = await start_service(CONTEXT_SPEC)
    channel: Any = svc.channel
    metadata = svc.metadata(roles=("admin",))
    logged.records.clear()
    for _ in range(200):
        # A length-delimited field 1 that promises 5 bytes and carries 2: no message can parse it.
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await channel.unary_unary(f"/{CONTEXT.full_name}/GetSession")(b"\x0a\x05ab", metadata=metadata, timeout=20)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    _no_tracebacks(logged)
    assert all(r.levelno <= logging.INFO for r in logged.records), logged.lines(logging.WARNING)
    rejected = [r for r in logged.records if "INVALID_REQUEST" in r.getMessage()]
    # Rate-limited per (method, code): a handful of lines, not one per call.
    assert 1 <= len(rejected) <= 10, [r.getMessage() for r in rejected]
    assert sum(len(line) + 1 for line in logged.lines()) < 5_000
