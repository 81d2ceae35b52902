"""Shared pieces of the idempotency step's unit tests (tool_svc/idempotency.py): the step on the test Redis
with a real ApprovalBook, calls as the gateway builds them, and reads of what the step stored (records,
heartbeats and their TTLs), so a test checks what a second replica would find."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from agentmesh.store import Store
from tool_svc.approvals import ApprovalBook
from tool_svc.call import CallState
from tool_svc.idempotency import Idempotency
from tool_svc.model import (
    Caller,
    CallRequest,
    Output,
    Permission,
    Stats,
    ToolDef,
    ToolResult,
    arguments_sha256,
    call_sha256,
)
from tool_svc.registry import RegisteredTool
from tool_svc.validation import SchemaCheck

WRITE = ToolDef(
    name="charge",
    description="charges a card",
    input_schema={"type": "object"},
    permission=Permission(group="billing", access="write"),
    impact="moves money",
)
"""A write that is neither idempotent nor deduplicated upstream: never re-sent once it may have left."""
READ = replace(WRITE, name="balance", permission=Permission(group="billing", access="read"), impact="")
IDEMPOTENT = replace(WRITE, name="set_limit", idempotent=True)
DEDUPED = replace(WRITE, name="pay", upstream_idempotency_key=True)

REQUESTER = Caller(subject="agent-token", agent_id="ops-agent", roles=frozenset({"agent"}))
OPERATOR = Caller(subject="bob", roles=frozenset({"operator"}))

TTL_S = 3600
LEASE_S = 30.0
APPROVAL_TTL_S = 600.0


def make_call(
    key: str, spec: ToolDef = WRITE, arguments: Any = None, *, approved_id: str = "", call_id: str = "call-1"
) -> CallState:
    """An ExecuteTool with idempotency key `key`, resolved and validated as the pipeline hands it on."""
    arguments = {"amount": 5} if arguments is None else arguments
    return CallState(
        request=CallRequest(
            call_id=call_id,
            name=spec.name,
            arguments_json=json.dumps(arguments),
            session_id="task-1",
            idempotency_key=key,
        ),
        caller=REQUESTER,
        service_environment="dev",
        approved_id=approved_id,
        tool=RegisteredTool(spec, SchemaCheck.compile(spec.input_schema), None, "config"),
        arguments=arguments,
        arguments_sha256=arguments_sha256(arguments),
        call_sha256=call_sha256(spec.name, arguments),
    )


def ok(call: CallState, text: str = '{"charged":5}', attempts: int = 1) -> ToolResult:
    return ToolResult(
        call.request.call_id, call.spec.name, Output("structured", inline=text), Stats(attempts, 0.1, False, len(text))
    )


@dataclass
class Sleeps:
    """The step's `sleep`: records each wait and yields once (no wall-clock time passes)."""

    waits: list[float] = field(default_factory=list)

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        await asyncio.sleep(0)


@dataclass
class Env:
    store: Store
    approvals: ApprovalBook
    sleeps: Sleeps
    left: list[float | None]

    def idem(self, *, lease_s: float = LEASE_S, heartbeat_s: float = 2.0, with_approvals: bool = True) -> Idempotency:
        return Idempotency(
            self.store,
            self.approvals if with_approvals else None,
            ttl_s=TTL_S,
            lease_s=lease_s,
            approval_ttl_s=APPROVAL_TTL_S,
            heartbeat_s=heartbeat_s,
            remaining=lambda: self.left[0],
            sleep=self.sleeps,
        )

    def record_key(self, key: str) -> str:
        return self.store.keys.idempotency(key)

    async def record(self, key: str) -> dict[str, Any] | None:
        raw = await self.store.redis.get(self.record_key(key))
        return None if raw is None else dict(json.loads(raw))

    async def raw(self, key: str) -> bytes | None:
        raw = await self.store.redis.get(self.record_key(key))
        return raw.encode() if isinstance(raw, str) else raw

    async def pttl(self, key: str) -> int:
        return int(await self.store.redis.pttl(self.record_key(key)))

    async def heartbeat(self, key: str) -> str | None:
        raw = await self.store.redis.get(self.record_key(key) + ":hb")
        return raw.decode() if isinstance(raw, bytes) else raw

    async def heartbeat_pttl(self, key: str) -> int:
        return int(await self.store.redis.pttl(self.record_key(key) + ":hb"))

    async def put(self, key: str, record: dict[str, Any], *, heartbeat: str = "", ttl_ms: int = 60_000) -> None:
        """Stores a record as another replica (or an older release) would have."""
        await self.store.redis.set(self.record_key(key), json.dumps(record), px=ttl_ms)
        if heartbeat:
            await self.store.redis.set(self.record_key(key) + ":hb", heartbeat, px=ttl_ms)

    async def settle(self, settlement: str, verdict: str) -> None:
        """An operator (not the requester) records RAN or NOT_RAN."""
        record = await self.approvals.get(settlement)
        await self.approvals.decide(
            settlement,
            approve=True,
            approver=OPERATOR,
            reason="checked the upstream",
            arguments_sha256=record.pending.arguments_sha256,
            settlement=verdict,  # type: ignore[arg-type]
        )


async def finish(call: CallState, result: ToolResult | None) -> None:
    """The gateway's end of a call: its finalizers, last registered first."""
    for finalizer in reversed(call.finalizers):
        await finalizer(result)


async def send(call: CallState) -> None:
    """The gateway just before the executor runs: every before_send hook."""
    for hook in call.before_send:
        await hook()


Step = Callable[[CallState], Awaitable[Any]]
