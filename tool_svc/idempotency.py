"""Idempotency keys (docs/architecture.md §5, §7): a side effect runs once per key.

`am:idem:{<key>}` holds one JSON record:
  {"s": "run", "h": <args sha>, "t": <lease token>}      a call holds the lease (SET NX PX)
  {"s": "pending", "h": ..., "a": <approval id>}         the call waits for a human
  {"s": "done", "h": ..., "o": <outcome>}                 finished: replayed to any repeat

A repeat with other arguments is IDEMPOTENCY_CONFLICT. A repeat while the first call runs waits for its
outcome (bounded by the caller's deadline) and replays it. A transient outcome (retryable errors, faults
of our own) releases the key instead of being stored, so a repeat runs again; so does a pending approval
that expired. Every write after the claim is a compare-and-set on the owner (lease token or approval
id) in Lua, so a call whose lease ran out cannot overwrite a newer owner's record.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

from agentmesh import callctx
from agentmesh.errors import AgentmeshError, ErrorCode
from agentmesh.store import Store
from tool_svc.approvals import ApprovalBook
from tool_svc.call import CallState
from tool_svc.model import Outcome, Pending, ToolResult, outcome_from_json, outcome_to_json

# Codes whose outcome is not a property of the call but of the moment: never replayed.
_NOT_CACHED = frozenset(
    {
        ErrorCode.INTERNAL,
        ErrorCode.UNAVAILABLE,
        ErrorCode.SANDBOX_UNAVAILABLE,
        ErrorCode.DEADLINE_EXCEEDED,
        ErrorCode.CANCELLED,
        ErrorCode.OVERLOADED,
        ErrorCode.APPROVAL_EXPIRED,
    }
)

_SETTLE_LUA = """
local cur = redis.call('GET', KEYS[1])
if not cur then return 0 end
local rec = cjson.decode(cur)
if rec['t'] ~= ARGV[1] and rec['a'] ~= ARGV[1] then return 0 end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
return 1
"""

_POLL_S = (0.01, 0.02, 0.05, 0.1, 0.2)


def is_transient(result: ToolResult | None) -> bool:
    """Whether an outcome must not be replayed (a repeat should run again)."""
    if result is None:
        return True
    outcome = result.outcome
    return isinstance(outcome, AgentmeshError) and (outcome.retryable or outcome.code in _NOT_CACHED)


class Idempotency:
    """Pipeline step: claim the key, or replay / wait for / refuse what holds it."""

    def __init__(
        self,
        store: Store | None,
        approvals: ApprovalBook | None,
        *,
        ttl_s: int,
        lease_s: float,
        approval_ttl_s: float,
        remaining: Callable[[], float | None] = callctx.remaining_time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.store = store
        self.approvals = approvals
        self.ttl_s = ttl_s
        self.lease_s = lease_s
        self.approval_ttl_s = approval_ttl_s
        self.remaining = remaining
        self.sleep = sleep

    def _lease_ms(self, call: CallState) -> int:
        spec = call.spec
        retry = spec.retry
        worst = spec.timeout_s * retry.max_attempts + (retry.max_backoff_s + retry.max_jitter_s) * (
            retry.max_attempts - 1
        )
        return int((worst + self.lease_s) * 1000)

    async def settle(self, key: str, owner: str, record: dict[str, Any] | None, ttl_ms: int) -> bool:
        """Compare-and-set of the record owned by `owner` (None deletes it)."""
        assert self.store is not None
        value = "" if record is None else json.dumps(record, separators=(",", ":"))
        async with self.store.guard("settle idempotency key"):
            done = await self.store.script("idempotency_settle", _SETTLE_LUA)(
                keys=[self.store.keys.idempotency(key)], args=[owner, value, ttl_ms]
            )
        return bool(done)

    def finalizer(self, key: str, owner: str, sha: str) -> Callable[[ToolResult | None], Awaitable[None]]:
        async def finish(result: ToolResult | None) -> None:
            if is_transient(result):
                await self.settle(key, owner, None, 0)
            elif result is not None and isinstance(result.outcome, Pending):
                ttl_ms = int((self.approval_ttl_s + 60) * 1000)
                await self.settle(key, owner, {"s": "pending", "h": sha, "a": result.outcome.approval_id}, ttl_ms)
            else:
                assert result is not None
                await self.settle(key, owner, {"s": "done", "h": sha, "o": outcome_to_json(result)}, self.ttl_s * 1000)

        return finish

    async def __call__(self, call: CallState) -> Outcome | None:
        key = call.request.idempotency_key
        if not key or self.store is None:
            return None
        sha = call.call_sha256
        if call.approved_id:
            # Resuming an approved call: the key holds its pending record, owned by the approval.
            call.finalizers.append(self.finalizer(key, call.approved_id, sha))
            return None
        redis_key = self.store.keys.idempotency(key)
        left = self.remaining()
        give_up = time.monotonic() + (min(left, self._lease_ms(call) / 1000) if left is not None else 30.0)
        for poll in range(10_000):
            token = secrets.token_hex(12)
            record = json.dumps({"s": "run", "h": sha, "t": token}, separators=(",", ":"))
            async with self.store.guard("claim idempotency key"):
                claimed = await self.store.redis.set(redis_key, record, nx=True, px=self._lease_ms(call))
                current = None if claimed else await self.store.redis.get(redis_key)
            if claimed:
                call.finalizers.append(self.finalizer(key, token, sha))
                return None
            if current is not None:
                held = json.loads(current)
                if held.get("h") != sha:
                    return AgentmeshError(
                        ErrorCode.IDEMPOTENCY_CONFLICT,
                        f"idempotency key {key[:80]!r} was used with other arguments; use a new key for a new call",
                        metadata={"idempotency_key": key[:200]},
                    )
                if held.get("s") == "done":
                    replay = outcome_from_json(held["o"])
                    call.stats.replayed = True
                    call.stats.attempts = replay.stats.attempts
                    call.stats.output_bytes = replay.stats.output_bytes
                    return replay.outcome
                if held.get("s") == "pending" and self.approvals is not None:
                    found = await self._pending(key, held)
                    if found is not None:
                        return found
            if time.monotonic() >= give_up:
                raise AgentmeshError(
                    ErrorCode.UNAVAILABLE,
                    f"a call with idempotency key {key[:80]!r} is still running; retry to get its outcome",
                    retryable=True,
                    retry_after=0.5,
                )
            await self.sleep(_POLL_S[min(poll, len(_POLL_S) - 1)])
        raise AssertionError("unreachable")  # pragma: no cover

    async def _pending(self, key: str, held: dict[str, Any]) -> Outcome | None:
        """A repeat of a call awaiting approval: the same PendingApproval, or APPROVAL_EXPIRED."""
        assert self.approvals is not None
        approval_id = str(held.get("a", ""))
        try:
            record = await self.approvals.get(approval_id)
        except AgentmeshError as exc:
            if exc.code != ErrorCode.NOT_FOUND:
                raise
            await self.settle(key, approval_id, None, 0)
            return None
        if record.state == "pending":
            return record.pending
        if record.state == "expired":
            # Not replayed: the next repeat asks for a new approval.
            await self.settle(key, approval_id, None, 0)
            return AgentmeshError(
                ErrorCode.APPROVAL_EXPIRED,
                f"approval {approval_id} expired before anyone decided; the call did not run",
                metadata={"approval_id": approval_id},
            )
        return None  # decided: its outcome is being recorded; wait for it
