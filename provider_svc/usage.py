"""Usage and cost per call, in Redis; aggregated by agent, provider, model and UTC day (docs/design.md §6).

Layout: one hash per (agent, day) at `am:usage:{<agent>}:<day>:r` whose fields are
`<task tag>|<api key id>|<provider>/<model>#<metric>` (metrics: calls, in, out, cost_nusd, latency_us;
integers, so HINCRBY is exact; tag and key "" when none), plus one sorted set `am:usage:index` of
"<day> <agent>" scored by the day's ordinal, so a query finds its hashes without SCAN. Both expire after
`ttl_days`. Releases before issue 43 wrote `am:usage:{<agent>}:<day>` with fields
`<provider>/<model>#<metric>` (no tag, no key): still read, never written.

Writes are behind and aggregated: `add` sums a call into memory (no I/O on the reply's path) and a
flusher writes every `flush_interval_s`, one Lua call per (agent, day) whatever the number of calls.
A failed flush keeps its sums for the next one. `query` flushes first, so this replica's calls are
always visible; a replica killed with SIGKILL loses at most one interval of accounting (a graceful
stop flushes).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from agentmesh.errors import AgentmeshError
from agentmesh.lua_source import package_lua
from agentmesh.store import Store
from provider_svc.models.base import Usage

__all__ = ["Prices", "UsageLedger", "UsageRow", "cost_usd", "day_of"]

log = logging.getLogger("provider_svc.usage")

_NANO = 1_000_000_000
_METRICS = ("calls", "in", "out", "cost_nusd", "latency_us")
_MAX_INDEXED_CACHE = 10_000
ROUTED_SUFFIX = ":r"
"""The hash of rows with their task tag and API key (the key without it: rows of earlier releases)."""

RECORD_LUA = package_lua("provider_svc", "usage_record")


@dataclass(frozen=True, slots=True)
class Prices:
    """USD per million tokens."""

    input_per_mtok: float = 0.0
    output_per_mtok: float = 0.0


def cost_usd(usage: Usage, prices: Prices) -> float:
    """The cost of `usage` at `prices`, in USD."""
    return (usage.input_tokens * prices.input_per_mtok + usage.output_tokens * prices.output_per_mtok) / 1_000_000


def day_of(when: dt.datetime | None = None) -> str:
    """The UTC day (YYYY-MM-DD) of `when` (default now)."""
    return (when or dt.datetime.now(dt.UTC)).astimezone(dt.UTC).strftime("%Y-%m-%d")


@dataclass(frozen=True, slots=True)
class UsageRow:
    """Usage of one (agent, provider, model, day)."""

    agent_id: str
    provider: str
    model: str
    day: str
    calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    total_latency_s: float
    task_tag: str = ""
    """The task tag the calls were routed by ("" when they named a model)."""
    api_key_id: str = ""
    """The API key they were made with ("" for identity tokens)."""


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


# (agent, day) -> model -> [calls, in, out, cost_nusd, latency_us]
_Buffer = dict[tuple[str, str], dict[str, list[int]]]


class UsageLedger:
    """Records calls (write-behind, aggregated) and answers usage queries."""

    def __init__(self, store: Store, ttl_days: int = 400, *, flush_interval_s: float = 0.25) -> None:
        self.store = store
        self.ttl_s = ttl_days * 86400
        self.ttl_days = ttl_days
        self.flush_interval_s = flush_interval_s
        self.index_key = f"{store.keys.prefix}:usage:index"
        self._buffer: _Buffer = {}
        self._indexed: set[tuple[str, str]] = set()
        """(agent, day) pairs this process has put in the index already."""
        self._flusher: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    def add(
        self,
        agent_id: str,
        model: str,
        usage: Usage,
        cost: float,
        latency_s: float,
        *,
        when: dt.datetime | None = None,
        task_tag: str = "",
        api_key_id: str = "",
    ) -> None:
        """Adds one call of `model` ("provider/model") to `agent_id`'s usage of today (or `when`), under the
        task tag it was routed by and the API key it was made with."""
        # Validated now, so a bad agent id fails its own call rather than a later flush.
        day = day_of(when)
        self.store.keys.usage(agent_id, day)
        row = f"{_clean(task_tag)}|{_clean(api_key_id)}|{model}"
        sums = self._buffer.setdefault((agent_id, day), {}).setdefault(row, [0, 0, 0, 0, 0])
        for i, amount in enumerate(
            (1, usage.input_tokens, usage.output_tokens, round(cost * _NANO), round(latency_s * 1_000_000))
        ):
            sums[i] += amount
        if self._flusher is None and not self._closed:
            self._flusher = asyncio.get_running_loop().create_task(self._flush_periodically())

    async def record(
        self,
        agent_id: str,
        model: str,
        usage: Usage,
        cost: float,
        latency_s: float,
        *,
        when: dt.datetime | None = None,
        task_tag: str = "",
        api_key_id: str = "",
    ) -> None:
        """`add` and write now."""
        self.add(agent_id, model, usage, cost, latency_s, when=when, task_tag=task_tag, api_key_id=api_key_id)
        await self.flush()

    async def _flush_periodically(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.flush_interval_s)
            try:
                await self.flush()
            except AgentmeshError as err:
                log.error("usage not written yet (kept for the next flush): %s", err)

    async def flush(self) -> None:
        """Writes every buffered sum; on failure they stay buffered and the error is raised."""
        async with self._lock:
            pending, self._buffer = self._buffer, {}
            try:
                for (agent, day), models in list(pending.items()):
                    args: list[str | int] = [self.ttl_s]
                    for model, sums in models.items():
                        args += [model, *sums]
                    async with self.store.guard("record usage"):
                        await self.store.script("usage_record", RECORD_LUA)(
                            keys=[self.store.keys.usage(agent, day) + ROUTED_SUFFIX], args=args
                        )
                        del pending[(agent, day)]
                        if (agent, day) not in self._indexed:
                            await self._index(agent, day)
            finally:
                self._merge_back(pending)

    def _merge_back(self, pending: _Buffer) -> None:
        for key, models in pending.items():
            target = self._buffer.setdefault(key, {})
            for model, sums in models.items():
                current = target.setdefault(model, [0, 0, 0, 0, 0])
                for i, amount in enumerate(sums):
                    current[i] += amount

    async def _index(self, agent_id: str, day: str) -> None:
        # The index lives in another hash slot than the usage hash, so it cannot share the script.
        ordinal = dt.date.fromisoformat(day).toordinal()
        pipe = self.store.redis.pipeline(transaction=False)
        pipe.zadd(self.index_key, {f"{day} {agent_id}": ordinal})
        pipe.zremrangebyscore(self.index_key, "-inf", ordinal - self.ttl_days - 1)
        pipe.expire(self.index_key, self.ttl_s)
        await pipe.execute()
        if len(self._indexed) > _MAX_INDEXED_CACHE:
            self._indexed.clear()
        self._indexed.add((agent_id, day))

    async def aclose(self) -> None:
        """Stops the flusher and writes what is left (a failure is logged: nothing else can be done)."""
        self._closed = True
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
            self._flusher = None
        try:
            await self.flush()
        except AgentmeshError as err:
            log.error("usage lost at shutdown: %s", err)

    async def query(
        self, agent_id: str = "", start_day: dt.date | None = None, end_day: dt.date | None = None
    ) -> list[UsageRow]:
        """Rows for `agent_id` (all when empty) from `start_day` (unbounded) to `end_day` (today)."""
        await self.flush()
        end = (end_day or dt.datetime.now(dt.UTC).date()).toordinal()
        start: float | str = start_day.toordinal() if start_day is not None else "-inf"
        async with self.store.guard("read usage"):
            members = await self.store.redis.zrangebyscore(self.index_key, start, end)
            pairs = [_text(m).split(" ", 1) for m in members if isinstance(m, bytes | str)]
            wanted = sorted((day, agent) for day, agent in pairs if not agent_id or agent == agent_id)
            pipe = self.store.redis.pipeline(transaction=False)
            for day, agent in wanted:
                pipe.hgetall(self.store.keys.usage(agent, day))
                pipe.hgetall(self.store.keys.usage(agent, day) + ROUTED_SUFFIX)
            hashes = await pipe.execute() if wanted else []
        rows: list[UsageRow] = []
        for i, (day, agent) in enumerate(wanted):
            legacy, routed = hashes[2 * i], hashes[2 * i + 1]
            rows.extend(_rows(agent, day, ((_text(k), int(v)) for k, v in legacy.items()), routed=False))
            rows.extend(_rows(agent, day, ((_text(k), int(v)) for k, v in routed.items()), routed=True))
        return rows


def _clean(text: str) -> str:
    """A tag or key id as a field part: no separator, bounded."""
    return text.replace("|", "_").replace("#", "_")[:64]


def _rows(agent: str, day: str, fields: Iterable[tuple[str, int]], *, routed: bool) -> list[UsageRow]:
    per_model: dict[str, dict[str, int]] = {}
    for name, value in fields:
        model, _, metric = name.rpartition("#")
        if metric in _METRICS and model:
            per_model.setdefault(model, {})[metric] = value
    rows = []
    for row, metrics in sorted(per_model.items()):
        tag, key_id, model = row.split("|", 2) if routed and row.count("|") >= 2 else ("", "", row)
        provider, _, model_id = model.partition("/")
        rows.append(
            UsageRow(
                agent_id=agent,
                provider=provider,
                model=model_id,
                day=day,
                calls=metrics.get("calls", 0),
                input_tokens=metrics.get("in", 0),
                output_tokens=metrics.get("out", 0),
                cost_usd=metrics.get("cost_nusd", 0) / _NANO,
                total_latency_s=metrics.get("latency_us", 0) / 1_000_000,
                task_tag=tag,
                api_key_id=key_id,
            )
        )
    return rows
