"""GetSpendSummary and ListBudgets through a real gRPC server (provider_svc/spend.py): sums that match the
usage ledger, budgets whose spend is what the quota scripts settled, who sees what (an operator all, an
agent its own, an API key itself), and hostile requests: tampered, foreign and expired page tokens, other
agents' and keys' spend, negative page sizes, malformed filters."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest
from google.protobuf import timestamp_pb2

from agentmesh.config import QuotaLimits
from agentmesh.pagetoken import PageCursor, PageTokens
from agentmesh.rpc.status import from_rpc_error
from agentmesh.v1 import common_pb2, provider_pb2, provider_pb2_grpc
from provider_svc.spend import SpendFilter
from tests.conftest import TEST_AUTH_KEY
from tests.contract.gateway.conftest import Gateway, gateway_config

P = provider_pb2
Md = tuple[tuple[str, str], ...]


def _stub(gw: Gateway) -> provider_pb2_grpc.ProviderServiceStub:
    return provider_pb2_grpc.ProviderServiceStub(gw.svc.channel)  # type: ignore[no-untyped-call]


def _bearer(key: str) -> Md:
    return (("authorization", f"Bearer {key}"),)


async def _generate(gw: Gateway, md: Md, text: str = "hello") -> None:
    request = P.GenerateRequest(messages=[common_pb2.Message(role=common_pb2.ROLE_USER, content=text)])
    await _stub(gw).Generate(request, metadata=md)


async def _refused(call: Awaitable[Any], code: grpc.StatusCode, reason: str = "", field: str = "") -> Any:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    assert caught.value.code() == code, caught.value.details()
    err = from_rpc_error(caught.value)
    if reason:
        assert err.metadata.get("reason") == reason, err
    if field:
        assert field in [v.path for v in err.violations], err
    return err


class World:
    """provider_svc with two API keys of two agents, an agent `ops` with a daily budget whose subject is in
    tenant `acme` (a monthly budget), and calls of each (what they cost is in the usage ledger)."""

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw
        self.operator = gw.svc.metadata(roles=("operator",), subject="root")
        self.ops = gw.svc.metadata(agent_id="ops", subject="acme:ops")
        self.key_a = self.key_b = ""
        self.id_a = self.id_b = ""

    async def setup(self) -> World:
        self.key_a, a = await self.gw.keys.create(
            agent_id="app", environment="dev", name="app-prod", limits=QuotaLimits(budget_usd_day=1.0)
        )
        self.key_b, b = await self.gw.keys.create(agent_id="other", environment="dev", name="other-dev")
        self.id_a, self.id_b = a.key_id, b.key_id
        for md in (_bearer(self.key_a), _bearer(self.key_a), _bearer(self.key_b), self.ops):
            await _generate(self.gw, md)
        return self

    async def summary(self, md: Md, **kw: Any) -> P.GetSpendSummaryResponse:
        reply: P.GetSpendSummaryResponse = await _stub(self.gw).GetSpendSummary(
            P.GetSpendSummaryRequest(**kw), metadata=md
        )
        return reply

    async def budgets(self, md: Md, **kw: Any) -> P.ListBudgetsResponse:
        reply: P.ListBudgetsResponse = await _stub(self.gw).ListBudgets(P.ListBudgetsRequest(**kw), metadata=md)
        return reply

    async def usage(self) -> list[P.UsageRow]:
        return list((await _stub(self.gw).GetUsage(P.GetUsageRequest(), metadata=self.operator)).rows)


@pytest.fixture
async def world(start_gateway: Callable[..., Awaitable[Gateway]]) -> World:
    config = gateway_config(
        gateway={"agents": {"ops": {"budget_usd_day": 5.0}}, "tenants": {"acme": {"budget_usd_month": 100.0}}}
    )
    return await World(await start_gateway(config)).setup()


def _sums(reply: P.GetSpendSummaryResponse) -> dict[str, tuple[int, float]]:
    return {r.key: (r.calls, r.cost_usd) for r in reply.rows}


async def test_the_summary_sums_the_usage_ledger_by_each_dimension(world: World) -> None:
    usage = await world.usage()
    cost = sum(r.cost_usd for r in usage)
    assert cost > 0 and len(usage) == 3  # (app, key a), (other, key b), (ops, no key)
    by_agent = await world.summary(world.operator, group_by=P.SPEND_GROUP_AGENT)
    assert {k: c for k, (c, _) in _sums(by_agent).items()} == {"app": 2, "other": 1, "ops": 1}
    assert [r.key for r in by_agent.rows] == ["app", "ops", "other"]
    assert by_agent.total.calls == 4 and by_agent.total.cost_usd == pytest.approx(cost)
    assert by_agent.total_groups == 3 and not by_agent.next_page_token
    app_cost = sum(r.cost_usd for r in usage if r.agent_id == "app")
    assert _sums(by_agent)["app"][1] == pytest.approx(app_cost)
    assert by_agent.rows[0].usage.total_tokens == sum(r.usage.total_tokens for r in usage if r.agent_id == "app")
    by_key = await world.summary(world.operator, group_by=P.SPEND_GROUP_API_KEY)
    assert [(r.key, r.calls) for r in by_key.rows] == sorted([("", 1), (world.id_a, 2), (world.id_b, 1)])
    by_model = await world.summary(world.operator, group_by=P.SPEND_GROUP_MODEL)
    assert [(r.key, r.calls) for r in by_model.rows] == [("scripted/default", 4)]
    by_day = await world.summary(world.operator)  # UNSPECIFIED: by day
    assert len(by_day.rows) == 1 and by_day.rows[0].key == usage[0].day and by_day.rows[0].calls == 4
    # Filters narrow the groups and the total alike.
    only_a = await world.summary(world.operator, group_by=P.SPEND_GROUP_AGENT, api_key_id=world.id_a)
    assert _sums(only_a).keys() == {"app"} and only_a.total.calls == 2
    none = await world.summary(world.operator, model="scripted/nothing")
    assert list(none.rows) == [] and none.total.calls == 0
    tomorrow = timestamp_pb2.Timestamp(seconds=4_000_000_000)  # 2096
    later = await world.summary(world.operator, start_time=tomorrow, end_time=tomorrow)
    assert later.total.calls == 0


async def test_pages_cover_every_group_once_and_tokens_are_bound_and_signed(world: World) -> None:
    md = world.operator
    keys, token, pages = [], "", 0
    while True:
        reply = await world.summary(md, group_by=P.SPEND_GROUP_AGENT, page_size=1, page_token=token)
        keys += [r.key for r in reply.rows]
        pages += 1
        assert reply.total.calls == 4 and reply.total_groups == 3  # the total is of every page
        token = reply.next_page_token
        if not token:
            break
    assert keys == ["app", "ops", "other"] and pages == 3
    first = await world.summary(md, group_by=P.SPEND_GROUP_AGENT, page_size=1)
    token = first.next_page_token
    s = _stub(world.gw)
    bad = grpc.StatusCode.INVALID_ARGUMENT

    def call(**kw: Any) -> Any:
        return s.GetSpendSummary(P.GetSpendSummaryRequest(group_by=P.SPEND_GROUP_AGENT, **kw), metadata=md)

    await _refused(call(page_token="garbage"), bad, "page_token.malformed")
    await _refused(call(page_token="x" * 5000), bad, "page_token.malformed")
    body, _, mac = token.partition(".")
    flipped = body[:-2] + ("A" if body[-2] != "A" else "B") + body[-1]
    await _refused(call(page_token=f"{flipped}.{mac}"), bad, "page_token.signature")
    # Signed with another key (another deployment's): refused the same way.
    forged = PageTokens("another-key-" + "z" * 32, "spend").issue(PageCursor(0, "a"), SpendFilter("agent").digest())
    await _refused(call(page_token=forged), bad, "page_token.signature")
    await _refused(call(page_token=token, agent_id="app"), bad, "page_token.filter")
    expired = PageTokens(TEST_AUTH_KEY, "spend", ttl_s=-60).issue(PageCursor(0, "a"), SpendFilter("agent").digest())
    await _refused(call(page_token=expired), bad, "page_token.expired")
    # Another list's token (a genuine ListTasks token, or ListBudgets') is not one of this list.
    tasks = PageTokens(TEST_AUTH_KEY, "tasks").issue(PageCursor(0, "a"), SpendFilter("agent").digest())
    await _refused(call(page_token=tasks), bad, "page_token.malformed")
    budgets = (await world.budgets(md, page_size=1)).next_page_token
    assert budgets
    await _refused(call(page_token=budgets), bad, "page_token.malformed")
    await _refused(s.ListBudgets(P.ListBudgetsRequest(page_token=token), metadata=md), bad, "page_token.malformed")
    await _refused(
        s.ListBudgets(P.ListBudgetsRequest(page_token=budgets, kind=P.BUDGET_SCOPE_KIND_TENANT), metadata=md),
        bad,
        "page_token.filter",
    )
    # page_size may change between pages; more than 500 reads as 500.
    rest = await world.summary(md, group_by=P.SPEND_GROUP_AGENT, page_size=10_000, page_token=token)
    assert [r.key for r in rest.rows] == ["ops", "other"] and not rest.next_page_token


async def test_hostile_sizes_and_filters_are_invalid_argument_naming_the_field(world: World) -> None:
    s, md, bad = _stub(world.gw), world.operator, grpc.StatusCode.INVALID_ARGUMENT

    def summary(**kw: Any) -> Any:
        return s.GetSpendSummary(P.GetSpendSummaryRequest(**kw), metadata=md)

    await _refused(summary(page_size=-1), bad, field="page_size")
    await _refused(s.ListBudgets(P.ListBudgetsRequest(page_size=-5), metadata=md), bad, field="page_size")
    await _refused(summary(group_by=99), bad, field="group_by")
    await _refused(s.ListBudgets(P.ListBudgetsRequest(kind=42), metadata=md), bad, field="kind")  # type: ignore[arg-type]
    for agent in ("a{b}", "two words", "x" * 300, "nul\x00"):
        await _refused(summary(agent_id=agent), bad, field="agent_id")
    for key_id in ("zz", "../../etc", "ABCDEF012345", world.id_a + "0"):
        await _refused(summary(api_key_id=key_id), bad, field="api_key_id")
    await _refused(summary(model="m" * 300), bad, field="model")
    late, early = timestamp_pb2.Timestamp(seconds=1_800_000_000), timestamp_pb2.Timestamp(seconds=1_700_000_000)
    await _refused(summary(start_time=late, end_time=early), bad, field="start_time")
    # A hostile filter's echo is short (the error never carries the whole input).
    err = await _refused(summary(agent_id="<script>" + "y" * 5000), bad, field="agent_id")
    assert len(err.message) < 300


async def test_an_agent_and_a_key_see_only_their_own_spend(world: World) -> None:
    denied = grpc.StatusCode.PERMISSION_DENIED
    key_a = _bearer(world.key_a)
    mine = await world.summary(key_a, group_by=P.SPEND_GROUP_API_KEY)
    assert [(r.key, r.calls) for r in mine.rows] == [(world.id_a, 2)] and mine.total.calls == 2
    assert (await world.summary(key_a, agent_id="app")).total.calls == 2  # naming itself is fine
    # Another agent, another key: refused (not an empty answer reading as "no spend").
    err = await _refused(world.summary(key_a, agent_id="other"), denied)
    assert err.missing_permission == "operator"
    await _refused(world.summary(key_a, api_key_id=world.id_b), denied)
    ops = await world.summary(world.ops, group_by=P.SPEND_GROUP_AGENT)
    assert _sums(ops).keys() == {"ops"} and ops.total.calls == 1
    await _refused(world.summary(world.ops, agent_id="app"), denied)
    # Naming another agent's key from an agent token narrows to nothing of the other agent.
    assert (await world.summary(world.ops, api_key_id=world.id_a)).total.calls == 0
    # A token with neither the operator role nor an agent id sees nothing.
    nobody = world.gw.svc.metadata(roles=("agent",), subject="someone")  # no agent id
    await _refused(world.summary(nobody), denied)
    await _refused(world.budgets(nobody), denied)
    await _refused(world.summary(()), grpc.StatusCode.UNAUTHENTICATED)


async def _settled(world: World, scope: str, want: float) -> P.Budget:
    """The scope's budget once the settles (off the replies' path) have landed."""
    found: P.Budget | None = None
    for _ in range(200):
        found = next(b for b in (await world.budgets(world.operator)).budgets if b.scope == scope)
        if found.spent_day_usd == pytest.approx(want, abs=1e-9) and found.reserved_usd == 0:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"{scope}: {found}")


async def test_budgets_show_the_spend_admission_judges_by(world: World) -> None:
    usage = await world.usage()
    cost_a = sum(r.cost_usd for r in usage if r.api_key_id == world.id_a)
    cost_ops = sum(r.cost_usd for r in usage if r.agent_id == "ops")
    a = await _settled(world, world.id_a, cost_a)
    assert a.kind == P.BUDGET_SCOPE_KIND_API_KEY and a.name == "app-prod" and a.agent_id == "app"
    assert a.HasField("budget_usd_day") and a.budget_usd_day == 1.0 and not a.HasField("budget_usd_month")
    assert a.spent_month_usd == pytest.approx(cost_a) and a.rpm == 60  # gateway.key_defaults
    ops = await _settled(world, "ops", cost_ops)
    assert ops.kind == P.BUDGET_SCOPE_KIND_AGENT and ops.budget_usd_day == 5.0
    reply = await world.budgets(world.operator)
    assert reply.day and reply.month and reply.day.startswith(reply.month)
    order = [(b.kind, b.scope) for b in reply.budgets]
    keys = sorted([world.id_a, world.id_b])
    kind = P.BudgetScopeKind
    assert order == [
        (kind.Value("BUDGET_SCOPE_KIND_API_KEY"), keys[0]),
        (kind.Value("BUDGET_SCOPE_KIND_API_KEY"), keys[1]),
        (kind.Value("BUDGET_SCOPE_KIND_AGENT"), "ops"),
        (kind.Value("BUDGET_SCOPE_KIND_TENANT"), "acme"),
    ]
    acme = reply.budgets[-1]
    assert acme.budget_usd_month == 100.0 and acme.spent_month_usd == pytest.approx(cost_ops)
    # Paged one by one: the same scopes, once each.
    seen, token = [], ""
    while True:
        page = await world.budgets(world.operator, page_size=1, page_token=token)
        seen += [(b.kind, b.scope) for b in page.budgets]
        token = page.next_page_token
        if not token:
            break
    assert seen == order
    only = await world.budgets(world.operator, kind=P.BUDGET_SCOPE_KIND_TENANT)
    assert [b.scope for b in only.budgets] == ["acme"]
    # A revoked key stays listed, marked; reading changed nothing.
    await world.gw.keys.revoke(world.id_b)
    again = await world.budgets(world.operator)
    assert [b.revoked for b in again.budgets] == [b.scope == world.id_b for b in again.budgets]
    assert [(b.scope, b.spent_day_usd) for b in again.budgets] == [(b.scope, b.spent_day_usd) for b in reply.budgets]


async def test_an_agent_and_a_key_list_only_their_own_budgets(world: World) -> None:
    mine = await world.budgets(_bearer(world.key_a))
    assert [b.scope for b in mine.budgets] == [world.id_a]
    ops = await world.budgets(world.ops)
    assert [b.scope for b in ops.budgets] == ["ops"]  # its agent (no key of its own), never the tenant
    assert (await world.budgets(world.ops, kind=P.BUDGET_SCOPE_KIND_TENANT)).budgets == []
    other_agent = world.gw.svc.metadata(agent_id="other")
    # `other` has no agent budget; its key is listed for it (minted for it), not app's.
    assert [b.scope for b in (await world.budgets(other_agent)).budgets] == [world.id_b]
