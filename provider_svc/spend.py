"""GetSpendSummary and ListBudgets: who spent what, and against which budget (docs/design.md §6, §17).

- **Summary** (`SpendReports.summary`): the usage ledger's rows (`usage.py`) in a range of UTC days,
  filtered by agent, API key and model, summed by one dimension (day, agent, key, model, task tag), with
  the total over every group; groups in key order (days newest first), paged by a keyset cursor on the
  group's key.
- **Budgets** (`SpendReports.budgets`): every quota scope (`quotas.py`) with its effective limits and its
  spend of the current UTC day and month as the quota scripts keep it (the `state` hash: what admission
  compares with the budget, so the page shows what the next call will be judged by). Scopes: every API
  key (its own limits, else `gateway.key_defaults`), the agents of `gateway.agents` with a limit and,
  when `gateway.agent_defaults` sets one, every agent billed this month, and the tenants of
  `gateway.tenants` with a limit; keys, then agents, then tenants, each by name.

Who sees what (`Sight`): an operator (admin implies it) everything; an API key its own calls and its own
key; an agent's token its agent's calls, its agent's scope and the keys minted for it; any other caller
is PERMISSION_DENIED. Naming another agent (or another key, for a key) is PERMISSION_DENIED, never an
empty answer that would read as "no spend". Page tokens are agentmesh/pagetoken.py's (signed, bound to
the filters, expiring); a bad one, a bad filter or a negative page size is INVALID_REQUEST naming the
field. Domain code only: no grpc, no stubs.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agentmesh.apikeys import ApiKeyRecord, ApiKeys
from agentmesh.config import GatewaySettings, QuotaLimits
from agentmesh.errors import InvalidRequestError, NotFoundError, PermissionDeniedError, echo
from agentmesh.identity_value import Identity
from agentmesh.pagetoken import PageCursor, PageTokens, filter_hash
from provider_svc.quotas import Quotas, Scope
from provider_svc.usage import UsageLedger, UsageRow

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "GROUPS",
    "KINDS",
    "MAX_PAGE_SIZE",
    "BudgetPage",
    "BudgetView",
    "GroupSum",
    "Sight",
    "SpendFilter",
    "SpendReports",
    "SpendSummary",
    "page_size_of",
    "sight_of",
]

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
Group = Literal["day", "agent", "api_key", "model", "task_tag"]
GROUPS: tuple[Group, ...] = ("day", "agent", "api_key", "model", "task_tag")
Kind = Literal["api_key", "agent", "tenant"]
KINDS: tuple[Kind, ...] = ("api_key", "agent", "tenant")
SPEND_ACCESS = "operator"
"""The missing permission of a caller asking for spend that is not its own."""

_NANO = 1_000_000_000
_AGENT = re.compile(r"^[^\s{}\x00-\x1f\x7f]{1,128}$")
_KEY_ID = re.compile(r"^[0-9a-f]{12}$")
_MODEL = re.compile(r"^[^\s\x00-\x1f\x7f]{1,256}$")


def page_size_of(value: int) -> int:
    """0 reads as DEFAULT_PAGE_SIZE, more than MAX_PAGE_SIZE as MAX_PAGE_SIZE; negative is INVALID_REQUEST."""
    if value < 0:
        raise InvalidRequestError("page_size", f"must be >= 0 (0 for {DEFAULT_PAGE_SIZE}), got {value}")
    return min(value, MAX_PAGE_SIZE) if value else DEFAULT_PAGE_SIZE


@dataclass(frozen=True, slots=True)
class Sight:
    """What a caller may see: everything, or one agent's spend (and, for an API key, only its own key's)."""

    everything: bool
    agent_id: str = ""
    api_key_id: str = ""


def sight_of(caller: Identity) -> Sight:
    """The Sight of a verified identity (module doc); PERMISSION_DENIED for a caller with neither."""
    if caller.has_role("operator"):
        return Sight(True)
    if caller.agent_id:
        return Sight(False, caller.agent_id, caller.api_key_id)
    raise PermissionDeniedError(SPEND_ACCESS, "spend of agents other than the caller's own needs the operator role")


def _check_text(value: str, pattern: re.Pattern[str], field_name: str, what: str) -> str:
    if value and not pattern.match(value):
        raise InvalidRequestError(field_name, f"{echo(value)!r} is not {what}")
    return value


@dataclass(frozen=True, slots=True)
class SpendFilter:
    """GetSpendSummary's request: the dimension, the filters (empty: all), the range of UTC days."""

    group: Group = "day"
    agent_id: str = ""
    api_key_id: str = ""
    model: str = ""
    """"provider/model"."""
    start: dt.date | None = None
    """First day included; None for no bound."""
    end: dt.date | None = None
    """Last day included; None for today."""

    def checked(self) -> SpendFilter:
        """Itself when every filter is well-formed; INVALID_REQUEST naming the first bad one."""
        if self.group not in GROUPS:
            raise InvalidRequestError("group_by", f"unknown dimension {echo(str(self.group))!r}")
        _check_text(self.agent_id, _AGENT, "agent_id", "an agent id")
        _check_text(self.api_key_id, _KEY_ID, "api_key_id", "an API key id (12 hex digits)")
        _check_text(self.model, _MODEL, "model", "a model name")
        if self.start is not None and self.end is not None and self.start > self.end:
            raise InvalidRequestError("start_time", "must not be after end_time")
        return self

    def digest(self) -> str:
        return filter_hash(
            {
                "group": self.group,
                "agent": self.agent_id,
                "key": self.api_key_id,
                "model": self.model,
                "start": self.start.isoformat() if self.start else "",
                "end": self.end.isoformat() if self.end else "",
            }
        )


@dataclass(slots=True)
class GroupSum:
    """The spend of one group (or the total)."""

    key: str
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    total_latency_s: float = 0.0

    def add(self, row: UsageRow) -> None:
        self.calls += row.calls
        self.input_tokens += row.input_tokens
        self.output_tokens += row.output_tokens
        self.cost_usd += row.cost_usd
        self.total_latency_s += row.total_latency_s


@dataclass(frozen=True, slots=True)
class SpendSummary:
    """One page of groups, the total over all of them, and the next page's token ("" at the end)."""

    rows: list[GroupSum]
    total: GroupSum
    next_page_token: str
    total_groups: int


@dataclass(frozen=True, slots=True)
class BudgetView:
    """A quota scope as ListBudgets shows it."""

    kind: Kind
    scope: str
    limits: QuotaLimits
    """The effective limits (an API key's own, else `gateway.key_defaults`)."""
    spent_day_usd: float = 0.0
    spent_month_usd: float = 0.0
    reserved_usd: float = 0.0
    name: str = ""
    agent_id: str = ""
    revoked: bool = False
    expires_ms: int = 0


@dataclass(frozen=True, slots=True)
class BudgetPage:
    """One page of scopes, the next page's token, the day and month their spend is of."""

    budgets: list[BudgetView]
    next_page_token: str
    day: str
    month: str


def _group_key(row: UsageRow, group: Group) -> str:
    if group == "day":
        return row.day
    if group == "agent":
        return row.agent_id
    if group == "api_key":
        return row.api_key_id
    if group == "model":
        return f"{row.provider}/{row.model}"
    return row.task_tag


def _effective(own: QuotaLimits, defaults: QuotaLimits) -> QuotaLimits:
    """An API key's limits as the quota script applies them: each of its own, else the default's."""
    return QuotaLimits(
        rpm=own.rpm if own.rpm is not None else defaults.rpm,
        tpm=own.tpm if own.tpm is not None else defaults.tpm,
        budget_usd_day=own.budget_usd_day if own.budget_usd_day is not None else defaults.budget_usd_day,
        budget_usd_month=own.budget_usd_month if own.budget_usd_month is not None else defaults.budget_usd_month,
    )


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else "" if value is None else str(value)


def _nusd(value: Any) -> float:
    try:
        return int(_text(value) or 0) / _NANO
    except ValueError:
        return 0.0


@dataclass
class _Candidate:
    kind: Kind
    name: str
    scope: Scope
    limits: QuotaLimits
    record: ApiKeyRecord | None = None

    @property
    def rank(self) -> int:
        return KINDS.index(self.kind)


class SpendReports:
    """The two reads over the usage ledger, the API keys and the quota scopes (module doc)."""

    def __init__(
        self,
        ledger: UsageLedger | None,
        quotas: Quotas | None,
        keys: ApiKeys | None,
        settings: GatewaySettings,
        secret: str | None,
    ) -> None:
        self.ledger = ledger
        self.quotas = quotas
        self.keys = keys
        self.settings = settings
        self.spend_tokens = PageTokens(secret, "spend")
        self.budget_tokens = PageTokens(secret, "budgets")

    # -- GetSpendSummary --------------------------------------------------------------------------

    async def summary(self, caller: Identity, filters: SpendFilter, page_size: int, page_token: str) -> SpendSummary:
        """One page of `filters.group`'s sums of what `caller` may see."""
        sight = sight_of(caller)
        filters = filters.checked()
        size = page_size_of(page_size)
        if not sight.everything:
            if filters.agent_id and filters.agent_id != sight.agent_id:
                raise PermissionDeniedError(
                    SPEND_ACCESS,
                    f"agent_id {echo(filters.agent_id)!r} is not the caller's agent ({sight.agent_id}): "
                    "the spend of other agents needs the operator role",
                )
            if sight.api_key_id and filters.api_key_id and filters.api_key_id != sight.api_key_id:
                raise PermissionDeniedError(
                    SPEND_ACCESS, f"an API key sees its own spend only (api_key_id {filters.api_key_id!r})"
                )
        digest = filters.digest()
        cursor = self.spend_tokens.parse(page_token, digest) if page_token else None
        rows: list[UsageRow] = []
        if self.ledger is not None:
            agent = filters.agent_id or ("" if sight.everything else sight.agent_id)
            rows = await self.ledger.query(agent, filters.start, filters.end)
        key_id = filters.api_key_id or sight.api_key_id
        groups: dict[str, GroupSum] = {}
        total = GroupSum("")
        for row in rows:
            if key_id and row.api_key_id != key_id:
                continue
            if filters.model and f"{row.provider}/{row.model}" != filters.model:
                continue
            name = _group_key(row, filters.group)
            groups.setdefault(name, GroupSum(name)).add(row)
            total.add(row)
        newest_first = filters.group == "day"
        ordered = sorted(groups.values(), key=lambda g: g.key, reverse=newest_first)
        if cursor is not None:
            after = cursor.id
            ordered = [g for g in ordered if (g.key < after if newest_first else g.key > after)]
        page = ordered[:size]
        token = ""
        if len(ordered) > size:
            token = self.spend_tokens.issue(PageCursor(0, page[-1].key), digest)
        return SpendSummary(page, total, token, len(groups))

    # -- ListBudgets ------------------------------------------------------------------------------

    async def budgets(self, caller: Identity, kind: str, page_size: int, page_token: str) -> BudgetPage:
        """One page of the quota scopes `caller` may see (of `kind`, "" for all) with their spend."""
        sight = sight_of(caller)
        if kind and kind not in KINDS:
            raise InvalidRequestError("kind", f"unknown scope kind {echo(kind)!r}")
        size = page_size_of(page_size)
        digest = filter_hash({"kind": kind})
        cursor = self.budget_tokens.parse(page_token, digest) if page_token else None
        now = dt.datetime.now(dt.UTC)
        day, month = now.strftime("%Y-%m-%d"), now.strftime("%Y-%m")
        if self.quotas is None:
            return BudgetPage([], "", day, month)
        candidates: list[_Candidate] = []
        if kind in ("", "api_key"):
            candidates += await self._key_candidates(sight)
        if kind in ("", "agent"):
            candidates += await self._agent_candidates(sight, now.date())
        if kind in ("", "tenant") and sight.everything:
            candidates += self._tenant_candidates()
        candidates.sort(key=lambda c: (c.rank, c.name))
        if cursor is not None:
            candidates = [c for c in candidates if (c.rank, c.name) > (cursor.ms, cursor.id)]
        page = candidates[:size]
        token = ""
        if len(candidates) > size:
            last = page[-1]
            token = self.budget_tokens.issue(PageCursor(last.rank, last.name), digest)
        return BudgetPage(await self._views(page, day, month), token, day, month)

    async def _key_candidates(self, sight: Sight) -> list[_Candidate]:
        assert self.quotas is not None
        if self.keys is None:
            return []
        if sight.api_key_id:
            try:
                records = [await self.keys.get(sight.api_key_id)]
            except NotFoundError:
                records = []
        else:
            records = await self.keys.list()
        found = []
        for record in records:
            if not sight.everything and record.agent_id != sight.agent_id:
                continue
            scope = self.quotas.key_scope(record.key_id, record.name)
            limits = _effective(record.limits, self.settings.key_defaults)
            found.append(_Candidate("api_key", record.key_id, scope, limits, record))
        return found

    async def _agent_candidates(self, sight: Sight, today: dt.date) -> list[_Candidate]:
        assert self.quotas is not None
        if sight.everything:
            names = {name for name, limits in self.settings.agents.items() if limits.any()}
            if self.settings.agent_defaults.any():
                names |= await self._agents_billed_since(today.replace(day=1), today)
        else:
            names = {sight.agent_id}
        found = []
        for name in names:
            try:
                scope = self.quotas.agent_scope(name)  # None: no limit applies to it
            except InvalidRequestError:
                continue  # a name no call could be billed to
            if scope is not None:
                found.append(_Candidate("agent", name, scope, scope.limits))
        return found

    def _tenant_candidates(self) -> list[_Candidate]:
        assert self.quotas is not None
        found = []
        for name in self.settings.tenants:
            scope = self.quotas.tenant_named(name)
            if scope is not None:
                found.append(_Candidate("tenant", name, scope, scope.limits))
        return found

    async def _agents_billed_since(self, first: dt.date, last: dt.date) -> set[str]:
        """The agents of the usage index between two days (the ledger's own index: no SCAN)."""
        if self.ledger is None:
            return set()
        store = self.ledger.store
        async with store.guard("read usage index"):
            members = await store.redis.zrangebyscore(self.ledger.index_key, first.toordinal(), last.toordinal())
        return {_text(m).split(" ", 1)[1] for m in members if " " in _text(m)}

    async def _views(self, page: Sequence[_Candidate], day: str, month: str) -> list[BudgetView]:
        if not page:
            return []
        assert self.quotas is not None
        store = self.quotas.store
        async with store.guard("read budgets"):
            pipe = store.redis.pipeline(transaction=False)
            for candidate in page:
                pipe.hmget(candidate.scope.keys()[0], ["day", "day_spent", "month", "month_spent", "reserved"])
            states: list[Any] = await pipe.execute()
        views = []
        for candidate, state in zip(page, states, strict=True):
            state_day, day_spent, state_month, month_spent, reserved = (_text(v) for v in state)
            record = candidate.record
            views.append(
                BudgetView(
                    kind=candidate.kind,
                    scope=candidate.name,
                    limits=candidate.limits,
                    spent_day_usd=_nusd(day_spent) if state_day == day else 0.0,
                    spent_month_usd=_nusd(month_spent) if state_month == month else 0.0,
                    reserved_usd=_nusd(reserved),
                    name=record.name if record else "",
                    agent_id=record.agent_id if record else "",
                    revoked=bool(record and record.revoked_ms),
                    expires_ms=record.expires_ms if record else 0,
                )
            )
        return views
