"""provider_svc's gRPC mapping of the spend, budget and embedding messages (split out of server.py).

Only protobuf to domain values and back, like server.py; the servicer there calls these.
"""

from __future__ import annotations

import datetime as dt

from google.protobuf import timestamp_pb2

from agentmesh.chat import Usage
from agentmesh.errors import InvalidRequestError
from agentmesh.rpc import codec
from agentmesh.v1 import provider_pb2
from provider_svc.embedding import Embedded
from provider_svc.spend import GROUPS, KINDS, BudgetPage, BudgetView, GroupSum, SpendFilter

__all__ = ["SCOPE_KINDS", "SPEND_GROUPS", "budgets_pb", "day_of", "embedded_pb", "group_pb", "spend_filter"]


def day_of(ts: timestamp_pb2.Timestamp, field: str) -> dt.date:
    return dt.datetime.fromtimestamp(codec.seconds(ts, field), dt.UTC).date()


SPEND_GROUPS = {provider_pb2.SPEND_GROUP_UNSPECIFIED: "day"} | {
    provider_pb2.SpendGroup.Value(f"SPEND_GROUP_{g.upper()}"): g for g in GROUPS
}
SCOPE_KINDS = {provider_pb2.BUDGET_SCOPE_KIND_UNSPECIFIED: ""} | {
    provider_pb2.BudgetScopeKind.Value(f"BUDGET_SCOPE_KIND_{k.upper()}"): k for k in KINDS
}


def spend_filter(pb: provider_pb2.GetSpendSummaryRequest) -> SpendFilter:
    """The domain filter of a GetSpendSummaryRequest (an unknown group_by is INVALID_REQUEST)."""
    group = SPEND_GROUPS.get(pb.group_by)
    if group is None:
        raise InvalidRequestError("group_by", f"unknown dimension {pb.group_by}")
    return SpendFilter(
        group=group,  # type: ignore[arg-type]
        agent_id=pb.agent_id,
        api_key_id=pb.api_key_id,
        model=pb.model,
        start=day_of(pb.start_time, "start_time") if pb.HasField("start_time") else None,
        end=day_of(pb.end_time, "end_time") if pb.HasField("end_time") else None,
    )


def group_pb(g: GroupSum) -> provider_pb2.SpendGroupRow:
    return provider_pb2.SpendGroupRow(
        key=g.key,
        calls=g.calls,
        usage=codec.usage_to_pb(Usage(g.input_tokens, g.output_tokens)),
        cost_usd=g.cost_usd,
        total_latency=codec.duration(max(g.total_latency_s, 0.0)),
    )


def _budget_pb(b: BudgetView) -> provider_pb2.Budget:
    pb = provider_pb2.Budget(
        kind=f"BUDGET_SCOPE_KIND_{b.kind.upper()}",
        scope=b.scope,
        name=b.name,
        agent_id=b.agent_id,
        spent_day_usd=b.spent_day_usd,
        spent_month_usd=b.spent_month_usd,
        reserved_usd=b.reserved_usd,
        revoked=b.revoked,
    )
    limits = b.limits
    if limits.budget_usd_day is not None:
        pb.budget_usd_day = limits.budget_usd_day
    if limits.budget_usd_month is not None:
        pb.budget_usd_month = limits.budget_usd_month
    if limits.rpm is not None:
        pb.rpm = limits.rpm
    if limits.tpm is not None:
        pb.tpm = limits.tpm
    if b.expires_ms:
        pb.expire_time.FromMilliseconds(b.expires_ms)
    return pb


def budgets_pb(page: BudgetPage) -> provider_pb2.ListBudgetsResponse:
    return provider_pb2.ListBudgetsResponse(
        budgets=[_budget_pb(b) for b in page.budgets],
        next_page_token=page.next_page_token,
        day=page.day,
        month=page.month,
    )


def embedded_pb(embedded: Embedded) -> provider_pb2.EmbedResponse:
    """The EmbedResponse of an Embed call's answer."""
    return provider_pb2.EmbedResponse(
        embeddings=[
            provider_pb2.Embedding(values=row.tolist(), index=i, cached=cached)
            for i, (row, cached) in enumerate(zip(embedded.vectors, embedded.cached, strict=True))
        ],
        model=embedded.model,
        dimensions=int(embedded.vectors.shape[1]),
        usage=codec.usage_to_pb(embedded.usage),
        cost_usd=embedded.cost_usd,
        latency=codec.duration(max(embedded.latency_s, 0.0)),
    )
