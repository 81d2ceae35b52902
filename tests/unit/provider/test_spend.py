"""provider_svc/spend.py without gRPC or Redis: who sees what, filter and page-size checks, grouping, totals
and keyset paging over a fake ledger, and page tokens bound to the filters."""

from __future__ import annotations

import datetime as dt
from typing import cast

import pytest

from agentmesh.config import GatewaySettings
from agentmesh.errors import AgentmeshError, ErrorCode
from agentmesh.identity_value import Identity
from provider_svc.spend import MAX_PAGE_SIZE, SpendFilter, SpendReports, page_size_of, sight_of
from provider_svc.usage import UsageLedger, UsageRow

KEY = "unit-test-key-" + "s" * 32


def who(*roles: str, agent: str = "", key: str = "") -> Identity:
    return Identity(
        subject="someone", agent_id=agent, instance="", environment="dev", roles=frozenset(roles),
        permissions=(), task_id="", issued_at=0, expires_at=2**40, token_id="t", api_key_id=key,
    )  # fmt: skip


def row(agent: str, day: str, key: str = "", model: str = "m1", cost: float = 1.0, calls: int = 1) -> UsageRow:
    return UsageRow(agent, "p", model, day, calls, 10 * calls, 5 * calls, cost, 0.1, "", key)


class FakeLedger:
    def __init__(self, rows: list[UsageRow]) -> None:
        self.rows = rows
        self.asked: list[str] = []

    async def query(
        self, agent_id: str = "", start: dt.date | None = None, end: dt.date | None = None
    ) -> list[UsageRow]:
        self.asked.append(agent_id)
        return [r for r in self.rows if not agent_id or r.agent_id == agent_id]


ROWS = [
    row("app", "2026-12-01", "aaaaaaaaaaaa", cost=1.0),
    row("app", "2026-12-02", "bbbbbbbbbbbb", cost=2.0),
    row("ops", "2026-12-02", cost=4.0, calls=3),
    row("zed", "2026-12-03", model="m2", cost=8.0),
]


def reports(rows: list[UsageRow] = ROWS) -> tuple[SpendReports, FakeLedger]:
    ledger = FakeLedger(rows)
    return SpendReports(cast(UsageLedger, ledger), None, None, GatewaySettings(), KEY), ledger


def code(err: pytest.ExceptionInfo[AgentmeshError]) -> ErrorCode:
    return err.value.code


def test_sight_operator_all_agent_its_own_key_itself_others_nothing() -> None:
    assert sight_of(who("operator")).everything and sight_of(who("admin")).everything
    agent = sight_of(who("agent", agent="app"))
    assert not agent.everything and agent.agent_id == "app" and agent.api_key_id == ""
    assert sight_of(who("agent", agent="app", key="aaaaaaaaaaaa")).api_key_id == "aaaaaaaaaaaa"
    with pytest.raises(AgentmeshError) as denied:
        sight_of(who("agent"))
    assert code(denied) == ErrorCode.PERMISSION_DENIED and denied.value.missing_permission == "operator"


@pytest.mark.parametrize(
    ("filters", "field"),
    [
        (SpendFilter(group="week"), "group_by"),  # type: ignore[arg-type]
        (SpendFilter(agent_id="a{b}"), "agent_id"),
        (SpendFilter(agent_id="a b"), "agent_id"),
        (SpendFilter(agent_id="x" * 129), "agent_id"),
        (SpendFilter(api_key_id="AAAAAAAAAAAA"), "api_key_id"),
        (SpendFilter(model="m\n1"), "model"),
        (SpendFilter(start=dt.date(2026, 12, 2), end=dt.date(2026, 12, 1)), "start_time"),
    ],
)
def test_bad_filters_name_the_field(filters: SpendFilter, field: str) -> None:
    with pytest.raises(AgentmeshError) as bad:
        filters.checked()
    assert code(bad) == ErrorCode.INVALID_REQUEST and bad.value.violations[0].path == field


def test_page_sizes() -> None:
    assert page_size_of(0) == 50 and page_size_of(7) == 7 and page_size_of(10**6) == MAX_PAGE_SIZE
    with pytest.raises(AgentmeshError):
        page_size_of(-1)


async def test_groups_totals_and_keyset_pages() -> None:
    spend, _ = reports()
    op = who("operator")
    by_agent = await spend.summary(op, SpendFilter("agent"), 0, "")
    assert [(g.key, g.calls, g.cost_usd) for g in by_agent.rows] == [("app", 2, 3.0), ("ops", 3, 4.0), ("zed", 1, 8.0)]
    assert by_agent.total.cost_usd == 15.0 and by_agent.total.calls == 6 and by_agent.total_groups == 3
    by_day = await spend.summary(op, SpendFilter("day"), 0, "")
    assert [g.key for g in by_day.rows] == ["2026-12-03", "2026-12-02", "2026-12-01"]  # newest first
    pages, token = [], ""
    while True:
        page = await spend.summary(op, SpendFilter("day"), 1, token)
        pages.append([g.key for g in page.rows])
        token = page.next_page_token
        if not token:
            break
    assert pages == [["2026-12-03"], ["2026-12-02"], ["2026-12-01"]]
    by_model = await spend.summary(op, SpendFilter("model", model="p/m2"), 0, "")
    assert [g.key for g in by_model.rows] == ["p/m2"] and by_model.total.cost_usd == 8.0
    by_key = await spend.summary(op, SpendFilter("api_key"), 0, "")
    assert [g.key for g in by_key.rows] == ["", "aaaaaaaaaaaa", "bbbbbbbbbbbb"]
    # A token of one dimension is not one of another (AIP-158: the filters must not change).
    first = await spend.summary(op, SpendFilter("agent"), 1, "")
    with pytest.raises(AgentmeshError) as moved:
        await spend.summary(op, SpendFilter("model"), 1, first.next_page_token)
    assert moved.value.metadata["reason"] == "page_token.filter"


async def test_an_agent_reads_only_its_agent_and_a_key_only_its_key() -> None:
    spend, ledger = reports()
    mine = await spend.summary(who("agent", agent="app"), SpendFilter("agent"), 0, "")
    assert [g.key for g in mine.rows] == ["app"] and ledger.asked[-1] == "app"  # never read the others'
    keyed = await spend.summary(who("agent", agent="app", key="bbbbbbbbbbbb"), SpendFilter("api_key"), 0, "")
    assert [(g.key, g.cost_usd) for g in keyed.rows] == [("bbbbbbbbbbbb", 2.0)] and keyed.total.cost_usd == 2.0
    for filters in (SpendFilter(agent_id="ops"), SpendFilter(api_key_id="aaaaaaaaaaaa")):
        caller = who("agent", agent="app", key="bbbbbbbbbbbb")
        with pytest.raises(AgentmeshError) as denied:
            await spend.summary(caller, filters, 0, "")
        assert code(denied) == ErrorCode.PERMISSION_DENIED


async def test_without_a_store_there_is_nothing_to_list() -> None:
    spend = SpendReports(None, None, None, GatewaySettings(), None)
    assert (await spend.summary(who("operator"), SpendFilter(), 0, "")).rows == []
    page = await spend.budgets(who("operator"), "", 0, "")
    assert page.budgets == [] and page.month and page.day.startswith(page.month)
    with pytest.raises(AgentmeshError) as bad:
        await spend.budgets(who("operator"), "planet", 0, "")
    assert bad.value.violations[0].path == "kind"
