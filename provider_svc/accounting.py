"""A generation's accounting: its cost at the model's prices, the usage ledger's row and the metrics.

The ledger (`usage.py`) sums in memory and writes behind, so no Redis round trip is on the reply's
path; an agent id the ledger cannot make a key of is refused before the upstream call (`check_agent`),
never after a paid reply. Calls without an agent are recorded as `anonymous`.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentmesh.metrics import Metrics
from provider_svc.models.base import Attempt, CallContext, ModelResponse
from provider_svc.routing import Router
from provider_svc.usage import Prices, UsageLedger, cost_usd

__all__ = ["ANONYMOUS_AGENT", "Accounting", "Generation"]

ANONYMOUS_AGENT = "anonymous"


@dataclass(frozen=True, slots=True)
class Generation:
    """A successful generation with its accounting."""

    response: ModelResponse
    cost_usd: float
    attempts: tuple[Attempt, ...]


class Accounting:
    """Prices, records and counts each reply (see the module docstring)."""

    def __init__(self, router: Router, ledger: UsageLedger | None, metrics: Metrics) -> None:
        self.router = router
        self.ledger = ledger
        self.metrics = metrics

    def prices(self, name: str) -> Prices:
        resolved = self.router.resolve(name)
        listed = resolved.settings
        if listed is None:
            return Prices()
        return Prices(listed.input_price_per_mtok, listed.output_price_per_mtok)

    def check_agent(self, ctx: CallContext) -> None:
        if self.ledger is not None:
            # Before the upstream call: a usage key this agent id cannot make must not fail a paid reply.
            self.ledger.store.keys.usage(ctx.agent_id or ANONYMOUS_AGENT, "2000-01-01")

    def account(self, response: ModelResponse, ctx: CallContext, task_tag: str) -> Generation:
        cost = cost_usd(response.usage, self.prices(response.model))
        agent = ctx.agent_id or ANONYMOUS_AGENT
        if self.ledger is not None:
            # Summed in memory and written behind (usage.py): no Redis round trip on the reply's path.
            self.ledger.add(
                agent,
                response.model,
                response.usage,
                cost,
                response.latency_s,
                task_tag=task_tag,
                api_key_id=ctx.key_id,
            )
        provider, _, model = response.model.partition("/")
        label = ctx.metric_agent if ctx.metric_agent is not None else agent
        self.metrics.model_usage(
            label, provider, model, response.usage.input_tokens, response.usage.output_tokens, cost
        )
        return Generation(response=response, cost_usd=cost, attempts=tuple(ctx.attempts))
