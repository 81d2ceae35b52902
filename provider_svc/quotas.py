"""Quotas and spend budgets per API key, agent and tenant, enforced across replicas (docs/design.md §6).

Every model call is admitted by each scope that applies to it before anything goes upstream, and
settled after the reply with its real usage:

- the API key it was made with (`agentmesh keys`: its own limits, else `gateway.key_defaults`, 60 rpm);
- the agent it is billed to (`gateway.agents.<id>`, else `gateway.agent_defaults`);
- the tenant of the caller's subject (`gateway.tenants.<t>`, the subject up to `tenant_separator`).

A scope is one Redis hash tag, so one Lua script admits or refuses atomically on every replica:
- rpm: a sliding 60 s window of admitted requests (a sorted set), so 60 rpm admits exactly 60 in any
  minute; tpm: the same window of tokens, a request counted at its reserve (input estimate + output
  limit) until the reply settles it to the real count;
- USD per UTC day and month: admitted only when spent + the reservations in flight + this call's
  reserve (its input estimate and output limit at the model's prices, the dearest model of its chain)
  fit the budget. So spend stays within the budget whenever replies cost no more than their reserve,
  and exceeds it by at most one reply's reserve when the upstream counts more than the estimate;
- a reservation a replica never settled (it died) stops counting after `gateway.reservation_ttl_s`.

Scopes are admitted in the order key, agent, tenant; a refusal releases the scopes admitted before it
(their counters as if the call never came). Refusals are typed: RATE_LIMITED with RetryInfo (rpm, tpm),
BUDGET_EXCEEDED (FATAL: a task aborts), UNAUTHENTICATED for a key revoked or expired since it was
verified (the key scope reads the key's record in the same script, so a revocation stops model calls at
once). Settling reports the spend alerts that crossed a threshold (`alerts.py`), once per threshold,
scope, budget and period.

Keys: `am:apikey:{<id>}:q:*` (beside the key's record), `am:quota:{agent:<id>}:*`,
`am:quota:{tenant:<t>}:*`: `state` (hash: reserved, tpm, day, day_spent, day_alerts, month, ...),
`res` (reservations by expiry), `rpm` and `tok` (the windows), `amt` (per reservation: reserve, tokens).
The two Lua scripts are `provider_svc.quota_scripts`. Domain code only: no grpc, no stubs.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import secrets
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentmesh.config import GatewaySettings, QuotaLimits
from agentmesh.errors import AgentmeshError, ErrorCode, InvalidRequestError, UnauthenticatedError
from agentmesh.metrics import Metrics
from agentmesh.store import Store
from provider_svc.quota_scripts import RESERVE_LUA, SETTLE_LUA

__all__ = [
    "RESERVE_LUA",
    "SETTLE_LUA",
    "Alert",
    "Quotas",
    "Reservation",
    "Scope",
    "ScopeKind",
    "Spend",
]

log = logging.getLogger("provider_svc.quotas")

ScopeKind = Literal["key", "agent", "tenant"]
_NANO = 1_000_000_000
_WINDOW_MS = 60_000
_MAX_OBSERVED = 2000
_LIMITS = ("rpm", "tpm", "tpm_request", "budget_day", "budget_month", "revoked", "expired")


@dataclass(frozen=True)
class Scope:
    """One quota scope of a call: its kind, its name, its configured limits, its Redis keys' base."""

    kind: ScopeKind
    name: str
    limits: QuotaLimits
    base: str
    """The scope's keys are `<base>:q:<part>` (one hash tag)."""
    record: str = ""
    """key scope: the key's record (read in the same script: revocation, the key's own limits)."""

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.name}"

    def keys(self) -> list[str]:
        keys = [f"{self.base}:q:{part}" for part in ("state", "res", "rpm", "tok", "amt")]
        return [*keys, self.record] if self.record else keys


@dataclass(frozen=True)
class Alert:
    """A threshold of a budget crossed (once per scope, period and threshold)."""

    scope: Scope
    period: Literal["day", "month"]
    period_id: str
    """2026-12-05 or 2026-12."""
    threshold: int
    spent_usd: float
    budget_usd: float


@dataclass(frozen=True)
class Spend:
    """A scope's spend of the current day and month as a settle or admission saw it."""

    day_usd: float
    month_usd: float
    budget_day_usd: float | None
    budget_month_usd: float | None


@dataclass
class Reservation:
    """What one admitted call holds in each of its scopes until it is settled or released."""

    rid: str
    scopes: list[Scope]
    reserve_usd: float
    tokens: int
    settled: bool = False
    spend: dict[str, Spend] = field(default_factory=dict)


def _limit(value: float | int | None, scale: int = 1) -> int:
    return -1 if value is None else round(value * scale)


def _period_ids(now: dt.datetime | None = None) -> tuple[str, str]:
    moment = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    return moment.strftime("%Y-%m-%d"), moment.strftime("%Y-%m")


def _resets_at(period: str, now: dt.datetime | None = None) -> str:
    moment = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    if period == "day":
        nxt = dt.datetime(moment.year, moment.month, moment.day, tzinfo=dt.UTC) + dt.timedelta(days=1)
    else:
        year, month = (moment.year + 1, 1) if moment.month == 12 else (moment.year, moment.month + 1)
        nxt = dt.datetime(year, month, 1, tzinfo=dt.UTC)
    return nxt.strftime("%Y-%m-%dT%H:%M:%SZ")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


AlertSink = Callable[[Alert], Coroutine[Any, Any, None]]


class Quotas:
    """Admits, settles and releases model calls in their scopes (the module doc)."""

    def __init__(
        self,
        store: Store,
        settings: GatewaySettings,
        *,
        metrics: Metrics | None = None,
        on_alert: AlertSink | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.metrics = metrics or Metrics()
        self.on_alert = on_alert
        self.thresholds = ",".join(str(t) for t in sorted(set(settings.alerts.thresholds)))
        self._reserve = store.script("quota_reserve", RESERVE_LUA)
        self._settle = store.script("quota_settle", SETTLE_LUA)
        self._observed: dict[tuple[str, str, str], tuple[float, float]] = {}
        self._alerts: set[asyncio.Task[None]] = set()
        self.metrics.observe_budgets(self._budget_states)
        # Every series at zero from the start: the dashboard's rates read 0, not "no data", until one fires.
        for kind in ("key", "agent", "tenant"):
            for limit in _LIMITS:
                self.metrics.quota_refused(kind, limit, 0)
            for period in ("day", "month"):
                for threshold in sorted(set(settings.alerts.thresholds)):
                    self.metrics.budget_alert(kind, period, threshold, 0)

    # -- scopes -----------------------------------------------------------------------------------

    def key_scope(self, key_id: str, name: str = "") -> Scope:
        """The scope of API key `key_id`: its record's limits win over `gateway.key_defaults`."""
        base = f"{self.store.keys.prefix}:apikey:{{{key_id}}}"
        return Scope("key", name or key_id, self.settings.key_defaults, base, record=base)

    def agent_scope(self, agent: str) -> Scope | None:
        limits = self.settings.agents.get(agent, self.settings.agent_defaults)
        if not limits.any():
            return None
        self.store.keys.usage(agent, "x")  # the id check of every key (no braces, no whitespace)
        return Scope("agent", agent, limits, f"{self.store.keys.prefix}:quota:{{agent:{agent}}}")

    def tenant_of(self, subject: str) -> str:
        tenant, sep, _ = subject.partition(self.settings.tenant_separator)
        return tenant if sep and tenant else ""

    def tenant_scope(self, subject: str) -> Scope | None:
        return self.tenant_named(self.tenant_of(subject))

    def tenant_named(self, tenant: str) -> Scope | None:
        """The scope of tenant `tenant` (None when it has no limits)."""
        limits = self.settings.tenants.get(tenant) if tenant else None
        if limits is None or not limits.any():
            return None
        self.store.keys.usage(tenant, "x")  # configured names pass; the id check of every key all the same
        return Scope("tenant", tenant, limits, f"{self.store.keys.prefix}:quota:{{tenant:{tenant}}}")

    def scopes(self, *, key_id: str, agent: str, subject: str) -> list[Scope]:
        """The scopes of a call, in admission order: key, agent, tenant (those with limits)."""
        found: list[Scope] = []
        if key_id:
            found.append(self.key_scope(key_id))
        for scope in (self.agent_scope(agent), self.tenant_scope(subject)):
            if scope is not None:
                found.append(scope)
        return found

    # -- admission --------------------------------------------------------------------------------

    async def reserve(self, scopes: Sequence[Scope], *, reserve_usd: float, tokens: int) -> Reservation:
        """Admits a call in every scope (or none: a refusal releases the earlier ones and raises it typed)."""
        reservation = Reservation(secrets.token_hex(8), [], reserve_usd, tokens)
        day, month = _period_ids()
        ttl_ms = self.settings.reservation_ttl_s * 1000
        for scope in scopes:
            limits = scope.limits
            args: list[str | int] = [
                reservation.rid,
                round(reserve_usd * _NANO),
                tokens,
                ttl_ms,
                _limit(limits.rpm),
                _limit(limits.tpm),
                _limit(limits.budget_usd_day, _NANO),
                _limit(limits.budget_usd_month, _NANO),
                day,
                month,
                self.thresholds,
            ]
            try:
                async with self.store.guard("quota reserve"):
                    reply = [_text(v) for v in await self._reserve(keys=scope.keys(), args=args)]
            except BaseException:
                await self.release(reservation)
                raise
            if reply[0] != "ok":
                await self.release(reservation)
                raise self._refusal(scope, reply, reserve_usd, tokens, day, month)
            reservation.scopes.append(scope)
            budget_day, budget_month = int(reply[6]), int(reply[7])
            self._observe(scope, "day", int(reply[1]), budget_day)
            self._observe(scope, "month", int(reply[2]), budget_month)
        return reservation

    async def settle(self, reservation: Reservation, *, cost_usd: float, tokens: int) -> None:
        """Ends a reservation with the call's real cost and tokens; fires the alerts it crossed. Never
        raises: the reply is paid for already (a failure is logged, the reservation expires on its own)."""
        await self._finish(reservation, "settle", cost_usd, tokens)

    async def release(self, reservation: Reservation) -> None:
        """Ends a reservation whose call never went upstream (refused later, invalid): no trace left."""
        await self._finish(reservation, "release", 0.0, 0)

    async def _finish(self, reservation: Reservation, mode: str, cost_usd: float, tokens: int) -> None:
        if reservation.settled:
            return
        reservation.settled = True
        day, month = _period_ids()
        for scope in reservation.scopes:
            limits = scope.limits
            args: list[str | int] = [
                reservation.rid,
                round(cost_usd * _NANO),
                tokens,
                day,
                month,
                mode,
                _limit(limits.budget_usd_day, _NANO),
                _limit(limits.budget_usd_month, _NANO),
                self.thresholds,
            ]
            try:
                async with self.store.guard("quota settle"):
                    reply = [_text(v) for v in await self._settle(keys=scope.keys(), args=args)]
            except AgentmeshError as err:
                log.error("quota %s of %s not recorded (%s); its reservation expires", mode, scope.label, err)
                continue
            if reply[0] != "settled":
                continue
            day_spent, month_spent, budget_day, budget_month = (int(v) for v in reply[1:5])
            self._observe(scope, "day", day_spent, budget_day)
            self._observe(scope, "month", month_spent, budget_month)
            reservation.spend[scope.label] = Spend(
                day_spent / _NANO,
                month_spent / _NANO,
                budget_day / _NANO if budget_day >= 0 else None,
                budget_month / _NANO if budget_month >= 0 else None,
            )
            for fired in reply[5:]:
                period, _, threshold = fired.partition(":")
                budget, spent, period_id = (
                    (budget_day, day_spent, day) if period == "day" else (budget_month, month_spent, month)
                )
                which: Literal["day", "month"] = "day" if period == "day" else "month"
                self._alert(Alert(scope, which, period_id, int(threshold), spent / _NANO, budget / _NANO))

    # -- refusals and alerts ----------------------------------------------------------------------

    def _refusal(
        self, scope: Scope, reply: list[str], reserve_usd: float, tokens: int, day: str, month: str
    ) -> AgentmeshError:
        kind = reply[0]
        who = {"key": "API key", "agent": "agent", "tenant": "tenant"}[scope.kind] + f" {scope.name}"
        self.metrics.quota_refused(scope.kind, kind)
        meta = {"scope": scope.label, "limit": kind}
        if kind in ("revoked", "expired"):
            return UnauthenticatedError(
                f"{who} was {kind}: model calls with it are refused", metadata={"reason": f"api_key_{kind}"}
            )
        if kind == "rpm":
            retry_s = max(int(reply[1]), 1) / 1000
            return AgentmeshError(
                ErrorCode.RATE_LIMITED,
                f"{who}: {reply[3]} requests per minute reached; retry in {retry_s:.1f}s",
                retry_after=retry_s,
                metadata=meta | {"quota": reply[3]},
            )
        if kind == "tpm":
            retry_s = max(int(reply[1]), 1) / 1000
            return AgentmeshError(
                ErrorCode.RATE_LIMITED,
                f"{who}: {reply[3]} tokens per minute reached ({reply[2]} in the last minute, this call reserves "
                f"{tokens}); retry in {retry_s:.1f}s",
                retry_after=retry_s,
                metadata=meta | {"quota": reply[3]},
            )
        if kind == "tpm_request":
            return InvalidRequestError(
                "max_tokens",
                f"this call reserves {reply[2]} tokens, more than {who}'s {reply[3]} tokens per minute: send a "
                "shorter prompt or a lower max_tokens",
                metadata=meta,
            )
        period: Literal["day", "month"] = "day" if kind == "budget_day" else "month"
        spent, reserved, budget = (int(v) / _NANO for v in reply[1:4])
        for threshold in reply[5:]:
            self._alert(Alert(scope, period, day if period == "day" else month, int(threshold), spent, budget))
        return AgentmeshError(
            ErrorCode.BUDGET_EXCEEDED,
            f"{who}: the {period}'s budget of ${budget:.4f} would be exceeded (spent ${spent:.4f}, in flight "
            f"${reserved:.4f}, this call reserves ${reserve_usd:.4f}); nothing was sent upstream",
            retryable=False,
            metadata=meta
            | {
                "period": period,
                "budget_usd": f"{budget:.6f}",
                "spent_usd": f"{spent:.6f}",
                "reserved_usd": f"{reserved:.6f}",
                "reserve_usd": f"{reserve_usd:.6f}",
                "resets_at": _resets_at(period),
            },
        )

    def _alert(self, alert: Alert) -> None:
        self.metrics.budget_alert(alert.scope.kind, alert.period, alert.threshold)
        log.warning(
            "spend alert: %s reached %d%% of its %s budget ($%.4f of $%.4f)",
            alert.scope.label, alert.threshold, alert.period, alert.spent_usd, alert.budget_usd,
        )  # fmt: skip
        if self.on_alert is None:
            return
        task = asyncio.get_running_loop().create_task(self.on_alert(alert))
        self._alerts.add(task)
        task.add_done_callback(self._alerts.discard)

    async def aclose(self, timeout_s: float = 2.0) -> None:
        """Waits up to `timeout_s` for the alerts being delivered."""
        if self._alerts:
            await asyncio.wait(set(self._alerts), timeout=timeout_s)

    # -- metrics ----------------------------------------------------------------------------------

    def _observe(self, scope: Scope, period: str, spent_nusd: int, budget_nusd: int) -> None:
        if budget_nusd < 0:
            return
        key = (scope.kind, scope.name, period)
        if key not in self._observed and len(self._observed) >= _MAX_OBSERVED:
            return
        self._observed[key] = (spent_nusd / _NANO, budget_nusd / _NANO)

    def _budget_states(self) -> Iterable[tuple[str, str, str, float, float]]:
        return [(kind, name, period, spent, budget) for (kind, name, period), (spent, budget) in self._observed.items()]
