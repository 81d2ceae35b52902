"""Idempotency keys (docs/design.md §5, §7): a side effect runs at most once per key.

`am:idem:{<key>}` holds one JSON record; `am:idem:{<key>}:hb` (same Cluster slot) holds the token of the
call in flight while its replica heartbeats it (once the call is `done` it is left to lapse, at most a lease):
  {"s": "run", "h": sha, "t": token, "g": gen}       claimed; nothing has left the gateway yet
  {"s": "sent", "h": sha, "t": token, "g": gen}      a write's request may have reached its upstream
  {"s": "pending", "h": sha, "a": approval, "g": gen}  waits for a human
  {"s": "unknown", "h": sha, "a": settlement, "g": gen}  sent, outcome unknown: an operator settles it
  {"s": "done", "h": sha, "o": outcome}               finished: replayed to any repeat

A repeat with other arguments is IDEMPOTENCY_CONFLICT; of a finished call it gets the recorded outcome;
while the first call runs (its heartbeat alive) it waits, within its deadline, then gets a retryable
"in progress" UNAVAILABLE with a retry delay. A call whose owner died (no heartbeat for `lease_s`) is
taken over if nothing had been sent, and becomes "unknown" if something may have been.

A write (neither read-only, idempotent nor deduplicated upstream by our Idempotency-Key header) is
marked "sent" just before its executor runs; from then on its record is never released. A timeout, a
cancel, a crash or a broken connection after that point is an unknown outcome: the answer is a typed
OUTCOME_UNKNOWN naming a settlement (an approval of kind "settlement" in ApprovalBook), and nothing is
re-sent until an operator settles it: RAN records "the call ran; its output is unknown", NOT_RAN
re-sends once with the same key. Retry-safe tools keep the old rule: a transient outcome releases the
key so a repeat runs again.

During a rolling upgrade a "run" record without "g" belongs to a replica of the previous release, which
does not heartbeat: it is waited for until its lease (PX) runs out, as that release did.

Every write after the claim is a compare-and-set on the owner (token, approval or settlement id) in
Lua, so a call whose owner was declared dead cannot overwrite what a newer owner recorded.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

from agentmesh import callctx
from agentmesh.errors import AgentmeshError, ErrorCode, FailedPreconditionError, NotFoundError
from agentmesh.lua_source import package_lua
from agentmesh.store import Store
from tool_svc.approvals import ApprovalBook, ApprovalRecord
from tool_svc.call import CallState
from tool_svc.model import Outcome, Output, Pending, Stats, ToolDef, ToolResult, outcome_from_json, outcome_to_json

log = logging.getLogger("tool_svc.idempotency")

# Codes whose outcome is not a property of the call but of the moment: never replayed (retry-safe tools,
# or writes that never left the gateway).
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

# Failures after which a request that was sent may or may not have had its effect. An HTTP answer
# (metadata http_status) or an MCP server's error answer (mcp_error_code) is known; so is a failure
# marked as never sent (metadata sent=no).
_UNKNOWN_DELIVERY = frozenset(
    {
        ErrorCode.UPSTREAM_TIMEOUT,
        ErrorCode.UPSTREAM_UNAVAILABLE,
        ErrorCode.INTERNAL,
        ErrorCode.UNAVAILABLE,
        ErrorCode.DEADLINE_EXCEEDED,
        ErrorCode.CANCELLED,
    }
)

# KEYS: record, heartbeat. ARGV: record JSON, token, record ttl ms, lease ms.
# Returns {1} when claimed, else {0, current record, heartbeat alive}.
_CLAIM_LUA = package_lua("tool_svc", "idempotency_claim")

# Compare-and-set of the record. KEYS: record, heartbeat. ARGV: owner (t or a), allowed states
# (comma-separated, '' = any), new record ('' deletes), record ttl ms, new heartbeat token ('' = none),
# lease ms, '1' when the owner must be dead (no heartbeat), '1' to leave the old heartbeat to lapse
# instead of deleting it (a `done` record: nothing reads it; one command fewer per call, issue 45).
_CAS_LUA = package_lua("tool_svc", "idempotency_cas")

# KEYS: record, heartbeat. ARGV: token, lease ms. Refreshes the heartbeat while the record is ours.
_HEARTBEAT_LUA = package_lua("tool_svc", "idempotency_heartbeat")

_POLL_S = (0.01, 0.02, 0.05, 0.1, 0.2)
# Kept back from the caller's deadline so the "in progress" answer reaches it before it gives up.
_ANSWER_MARGIN_S = 0.25


def is_transient(result: ToolResult | None) -> bool:
    """Whether an outcome must not be replayed (a repeat should run again)."""
    if result is None:
        return True
    outcome = result.outcome
    return isinstance(outcome, AgentmeshError) and (outcome.retryable or outcome.code in _NOT_CACHED)


def retry_safe(tool: ToolDef) -> bool:
    """Whether re-sending a call whose outcome is unknown can do no harm."""
    return tool.read_only or tool.idempotent or tool.upstream_idempotency_key


def unknown_delivery(outcome: Outcome | None) -> bool:
    """Whether a sent request ended without telling us if it had its effect (None: cancelled or crashed)."""
    if outcome is None:
        return True
    if not isinstance(outcome, AgentmeshError):
        return False
    if outcome.code == ErrorCode.OUTCOME_UNKNOWN:
        return True
    meta = outcome.metadata
    # An HTTP status or an MCP server's own error answer means the upstream answered: the outcome is known.
    answered = "http_status" in meta or "mcp_error_code" in meta
    return outcome.code in _UNKNOWN_DELIVERY and not answered and meta.get("sent") != "no"


def settlement_id(key: str, generation: int) -> str:
    """The settlement of one unknown outcome of `key`: the same for every replica that finds it."""
    return "stl_" + hashlib.sha256(f"{key}\n{generation}".encode()).hexdigest()[:32]


def ran_output(settled_by: str) -> Output:
    """What the model reads for a call an operator settled as RAN."""
    note = {
        "settled": "ran",
        "settled_by": settled_by,
        "output": None,
        "note": "the call ran; its output is unknown. Do not repeat it; read the current state if you need it.",
    }
    return Output("structured", inline=json.dumps(note, sort_keys=True, separators=(",", ":")))


class _Heartbeats:
    """The heartbeats of this replica's calls in flight: one loop refreshes them all every `heartbeat_s`
    (issue 45: not a task per call), dropping a key that is no longer ours (declared dead, or settled)."""

    def __init__(self, idem: Idempotency) -> None:
        self.idem = idem
        self.beating: dict[str, str] = {}
        """Idempotency key -> the token of this replica's call in flight under it."""
        self._loop: asyncio.Task[None] | None = None

    def start(self, key: str, token: str) -> None:
        self.beating[key] = token
        if self._loop is None or self._loop.done():
            self._loop = asyncio.create_task(self._run(), name="idempotency heartbeats")

    def stop(self, key: str, token: str) -> None:
        if self.beating.get(key) == token:
            del self.beating[key]

    async def _run(self) -> None:
        idem = self.idem
        assert idem.store is not None
        script = idem.store.script("idempotency_heartbeat", _HEARTBEAT_LUA)
        while self.beating:
            await asyncio.sleep(idem.heartbeat_s)
            for key, token in list(self.beating.items()):
                keys = [idem.store.keys.idempotency(key), idem.hb_key(key)]
                try:
                    if not await script(keys=keys, args=[token, idem.lease_ms]):
                        self.stop(key, token)  # declared dead, or settled: nothing left to keep alive
                except Exception as exc:  # Redis away for a moment: the lease is several heartbeats long
                    log.warning("heartbeat of %s failed: %s", key[:80], exc)


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
        heartbeat_s: float = 2.0,
        remaining: Callable[[], float | None] = callctx.remaining_time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.store = store
        self.approvals = approvals
        self.ttl_s = ttl_s
        self.lease_s = lease_s
        self.heartbeat_s = min(heartbeat_s, lease_s / 3)
        self.approval_ttl_s = approval_ttl_s
        self.remaining = remaining
        self.sleep = sleep
        self.heartbeats = _Heartbeats(self)

    @property
    def lease_ms(self) -> int:
        return max(1, int(self.lease_s * 1000))

    def hb_key(self, key: str) -> str:
        assert self.store is not None
        return self.store.keys.idempotency(key) + ":hb"

    @staticmethod
    def _json(record: dict[str, Any]) -> str:
        return json.dumps(record, separators=(",", ":"))

    async def cas(
        self,
        key: str,
        owner: str,
        record: dict[str, Any] | None,
        ttl_ms: int,
        *,
        states: str = "",
        heartbeat: str = "",
        owner_dead: bool = False,
    ) -> bool:
        """Compare-and-set of the record owned by `owner` (None deletes it and its heartbeat). A `done`
        record leaves the heartbeat to lapse within its lease: no reader of a `done` record looks at it."""
        assert self.store is not None
        value = "" if record is None else self._json(record)
        lapse = "1" if record is not None and record.get("s") == "done" else ""
        async with self.store.guard("settle idempotency key"):
            done = await self.store.script("idempotency_cas", _CAS_LUA, durable=True)(
                keys=[self.store.keys.idempotency(key), self.hb_key(key)],
                args=[owner, states, value, ttl_ms, heartbeat, self.lease_ms, "1" if owner_dead else "", lapse],
            )
        return bool(done)

    # -- unknown outcomes ------------------------------------------------------------------------

    async def go_unknown(
        self, call: CallState, owner: str, generation: int, *, states: str = "run,sent", owner_dead: bool = False
    ) -> tuple[AgentmeshError, bool]:
        """Records the key's outcome as unknown under a settlement (created first, so a record never names
        a settlement that does not exist); the OUTCOME_UNKNOWN to answer and whether this call moved it."""
        assert self.approvals is not None
        key = call.request.idempotency_key
        sid = settlement_id(key, generation)
        pending = await self.approvals.create_settlement(sid, call, key)
        record = {"s": "unknown", "h": call.call_sha256, "a": sid, "g": generation}
        moved = await self.cas(key, owner, record, self.ttl_s * 1000, states=states, owner_dead=owner_dead)
        return outcome_unknown(call.spec.name, pending, key), moved

    async def _unknown(self, call: CallState, held: dict[str, Any]) -> Outcome | None:
        """A repeat of a call whose outcome is unknown: OUTCOME_UNKNOWN under its settlement (a new one
        when the last expired), or the settled outcome. None: look again."""
        assert self.approvals is not None
        key, sid, generation = call.request.idempotency_key, str(held.get("a", "")), int(held.get("g", 0))
        try:
            record: ApprovalRecord | None = await self.approvals.get(sid)
        except NotFoundError:
            record = None
        if record is None:
            # The record names a settlement that is gone (past its retention): open the next one.
            error, moved = await self.go_unknown(call, sid, generation + 1, states="unknown")
            return error if moved else None
        if record.state == "pending":
            return outcome_unknown(call.spec.name, record.pending, key)
        if record.state == "approved" and record.settlement == "ran":
            # Settled RAN, and the settler died before recording it: record it now.
            settled = ToolResult(call.request.call_id, call.spec.name, ran_output(record.resolved_by), Stats())
            done = {"s": "done", "h": call.call_sha256, "o": outcome_to_json(settled)}
            await self.cas(key, sid, done, self.ttl_s * 1000, states="unknown")
            return None
        # Expired unsettled (nothing was re-sent), or settled NOT_RAN by a re-send that never took the key:
        # still unknown to us, under a new settlement.
        error, moved = await self.go_unknown(call, sid, generation + 1, states="unknown")
        return error if moved else None

    # -- the step ----------------------------------------------------------------------------------

    def finalizer(
        self, call: CallState, owner: str, generation: int, beating: bool
    ) -> Callable[[ToolResult | None], Awaitable[None]]:
        key, sha = call.request.idempotency_key, call.call_sha256

        async def finish(result: ToolResult | None) -> None:
            if beating:
                self.heartbeats.stop(key, owner)
            outcome = None if result is None else result.outcome
            never_left = isinstance(outcome, AgentmeshError) and outcome.metadata.get("sent") == "no"
            if call.sent and not retry_safe(call.spec) and not never_left:
                # Never released once a write may have left: recorded, or unknown until settled.
                if call.went_unknown:
                    return
                if unknown_delivery(outcome):
                    await self.go_unknown(call, owner, generation)
                    return
                assert result is not None
                await self.cas(key, owner, {"s": "done", "h": sha, "o": outcome_to_json(result)}, self.ttl_s * 1000)
            elif is_transient(result):
                await self.cas(key, owner, None, 0)
            elif isinstance(outcome, Pending):
                ttl_ms = int((self.approval_ttl_s + 60) * 1000)
                pending = {"s": "pending", "h": sha, "a": outcome.approval_id, "g": generation}
                await self.cas(key, owner, pending, ttl_ms)
            else:
                assert result is not None
                await self.cas(key, owner, {"s": "done", "h": sha, "o": outcome_to_json(result)}, self.ttl_s * 1000)

        return finish

    def _own(self, call: CallState, owner: str, generation: int) -> None:
        """This call holds the key: heartbeat it, mark it sent before a write leaves, settle it after."""
        key = call.request.idempotency_key
        self.heartbeats.start(key, owner)
        call.finalizers.append(self.finalizer(call, owner, generation, True))
        if not retry_safe(call.spec):

            async def mark_sent() -> None:
                record = {"s": "sent", "h": call.call_sha256, "t": owner, "g": generation}
                if not await self.cas(
                    key, owner, record, self.ttl_s * 1000, states="run", heartbeat=owner
                ):  # another replica declared us dead meanwhile: do not send
                    raise AgentmeshError(
                        ErrorCode.UNAVAILABLE,
                        f"the call with idempotency key {key[:80]!r} lost its claim before it was sent; retry",
                        retryable=True,
                        retry_after=0.5,
                    )
                call.sent = True

            call.before_send.append(mark_sent)

    async def after(self, call: CallState, outcome: Outcome) -> Outcome:
        """The pipeline's outcome as the caller gets it: a sent write whose effect is unknown answers
        OUTCOME_UNKNOWN (its settlement opened now) instead of the error that hid it."""
        if not (call.sent and call.owner and not retry_safe(call.spec) and unknown_delivery(outcome)):
            return outcome
        error, _ = await self.go_unknown(call, call.owner, call.generation)
        call.went_unknown = True
        if isinstance(outcome, AgentmeshError):
            error = error.replace(message=f"{error.message} (cause: {outcome.code.name}: {outcome.message[:200]})")
        return error

    async def __call__(self, call: CallState) -> Outcome | None:
        key = call.request.idempotency_key
        if not key or self.store is None:
            return None
        if call.approved_id:
            return await self._resume(call)
        sha = call.call_sha256
        left = self.remaining()
        give_up = time.monotonic() + (max(0.0, left - _ANSWER_MARGIN_S) if left is not None else self.lease_s * 2)
        ttl_ms = self.ttl_s * 1000
        for poll in range(100_000):
            token = "t_" + secrets.token_hex(12)
            record = self._json({"s": "run", "h": sha, "t": token, "g": 0})
            async with self.store.guard("claim idempotency key"):
                answer = await self.store.script("idempotency_claim", _CLAIM_LUA, durable=True)(
                    keys=[self.store.keys.idempotency(key), self.hb_key(key)],
                    args=[record, token, ttl_ms, self.lease_ms],
                )
            if int(answer[0]) == 1:
                self._claimed(call, token, 0)
                return None
            held, alive = json.loads(answer[1]), bool(int(answer[2]))
            found = await self._held(call, held, alive, token)
            if found is not None:
                return found
            if call.owner:
                return None  # took over a dead owner's claim
            if time.monotonic() >= give_up:
                raise AgentmeshError(
                    ErrorCode.UNAVAILABLE,
                    f"a call with idempotency key {key[:80]!r} is still in progress; retry to get its outcome",
                    retryable=True,
                    retry_after=max(0.2, self.heartbeat_s),
                    metadata={"reason": "in_progress", "idempotency_key": key[:200]},
                )
            await self.sleep(_POLL_S[min(poll, len(_POLL_S) - 1)])
        raise AssertionError("unreachable")  # pragma: no cover

    def _claimed(self, call: CallState, owner: str, generation: int) -> None:
        call.owner, call.generation = owner, generation
        self._own(call, owner, generation)

    async def _held(self, call: CallState, held: dict[str, Any], alive: bool, token: str) -> Outcome | None:
        """What a repeat gets from the record that holds the key (None: wait, or taken over)."""
        key = call.request.idempotency_key
        if held.get("h") != call.call_sha256:
            return AgentmeshError(
                ErrorCode.IDEMPOTENCY_CONFLICT,
                f"idempotency key {key[:80]!r} was used with other arguments; use a new key for a new call",
                metadata={"idempotency_key": key[:200]},
            )
        state = held.get("s")
        if state == "done":
            replay = outcome_from_json(held["o"])
            call.stats.replayed = True
            call.stats.attempts = replay.stats.attempts
            call.stats.output_bytes = replay.stats.output_bytes
            return replay.outcome
        if state == "pending" and self.approvals is not None:
            return await self._pending(key, held)
        if state == "unknown" and self.approvals is not None:
            return await self._unknown(call, held)
        if state == "run" and "g" not in held:
            return None  # claimed by a replica of the last release (no heartbeat): wait for its lease
        if state in ("run", "sent") and not alive:
            generation = int(held.get("g", 0))
            if state == "sent" and not retry_safe(call.spec) and self.approvals is not None:
                error, moved = await self.go_unknown(call, str(held.get("t", "")), generation, owner_dead=True)
                return error if moved else None
            # Nothing left the gateway (or re-sending is harmless): the call is ours now.
            record = {"s": "run", "h": call.call_sha256, "t": token, "g": generation}
            if await self.cas(
                key,
                str(held.get("t", "")),
                record,
                self.ttl_s * 1000,
                states="run,sent",
                heartbeat=token,
                owner_dead=True,
            ):
                log.info("took over idempotency key %s from a dead owner", key[:80])
                self._claimed(call, token, generation)
        return None

    async def _resume(self, call: CallState) -> Outcome | None:
        """An approved call, or a settlement's NOT_RAN re-send: the key passes from the approval to the run."""
        key, owner = call.request.idempotency_key, call.approved_id
        assert self.store is not None
        async with self.store.guard("read idempotency key"):
            current = await self.store.redis.get(self.store.keys.idempotency(key))
        held = json.loads(current) if current else {}
        generation = int(held.get("g", 0))
        if held.get("s") == "unknown":
            generation += 1  # a re-send that ends unknown again opens the next settlement
        record = {"s": "run", "h": call.call_sha256, "t": owner, "g": generation}
        moved = await self.cas(key, owner, record, self.ttl_s * 1000, states="pending,unknown", heartbeat=owner)
        if not moved and not owner.startswith("stl_") and not current:
            # The approval's pending record expired with it: claim the key afresh.
            async with self.store.guard("claim idempotency key"):
                answer = await self.store.script("idempotency_claim", _CLAIM_LUA, durable=True)(
                    keys=[self.store.keys.idempotency(key), self.hb_key(key)],
                    args=[self._json(record), owner, self.ttl_s * 1000, self.lease_ms],
                )
            moved = int(answer[0]) == 1
        if not moved:
            raise FailedPreconditionError(
                f"the key {key[:80]!r} is no longer waiting for {owner}; the call was not sent again"
            )
        self._claimed(call, owner, generation)
        return None

    async def _pending(self, key: str, held: dict[str, Any]) -> Outcome | None:
        """A repeat of a call awaiting approval: the same PendingApproval, or APPROVAL_EXPIRED."""
        assert self.approvals is not None
        approval_id = str(held.get("a", ""))
        try:
            record = await self.approvals.get(approval_id)
        except AgentmeshError as exc:
            if exc.code != ErrorCode.NOT_FOUND:
                raise
            await self.cas(key, approval_id, None, 0)
            return None
        if record.state == "pending":
            return record.pending
        if record.state == "expired":
            # Not replayed: the next repeat asks for a new approval.
            await self.cas(key, approval_id, None, 0)
            return AgentmeshError(
                ErrorCode.APPROVAL_EXPIRED,
                f"approval {approval_id} expired before anyone decided; the call did not run",
                metadata={"approval_id": approval_id},
            )
        return None  # decided: its outcome is being recorded; wait for it


def outcome_unknown(tool_name: str, pending: Pending, key: str) -> AgentmeshError:
    """The typed answer for a call whose effect is unknown; the settlement it waits for is in the metadata."""
    return AgentmeshError(
        ErrorCode.OUTCOME_UNKNOWN,
        f"{tool_name}: the call may have reached its upstream but its outcome is unknown; it is not re-sent "
        f"until an operator settles {pending.approval_id} (RAN or NOT_RAN)",
        metadata={
            "settlement_id": pending.approval_id,
            "idempotency_key": key[:200],
            "arguments_sha256": pending.arguments_sha256,
            "expire_at": f"{pending.expire_at:.3f}",
        },
    )
