"""Spend alerts: where a crossed budget threshold is reported (docs/design.md §6).

`quotas.py` decides that a threshold fired (in the same Lua script that settles the spend, so it fires
once per scope, budget, period and threshold whatever the number of replicas) and counts it in
`agentmesh_gen_ai_budget_alerts_total`; this sink then
- appends `budget.alert` to the audit stream (subject `provider_svc`, target the scope `key:<id>`,
  `agent:<id>` or `tenant:<t>`, outcome the threshold `80%`, detail the period and the amounts);
- POSTs the alert as JSON to `gateway.alerts.webhook_url` when one is set (it must be on
  `tools.http_allowlist`, checked when the configuration loads; redirects are not followed), once,
  within `webhook_timeout_s`. A failed delivery is logged, never retried: the audit entry stays.

Domain code only: no grpc, no stubs.
"""

from __future__ import annotations

import datetime as dt
import logging

import httpx

from agentmesh.audit import AuditLog
from agentmesh.config import SpendAlertSettings
from agentmesh.errors import AgentmeshError
from agentmesh.urlallow import safe_url
from provider_svc.quotas import Alert

__all__ = ["SpendAlerts", "alert_json"]

log = logging.getLogger("provider_svc.alerts")


def alert_json(alert: Alert) -> dict[str, object]:
    """The webhook's body."""
    return {
        "type": "agentmesh.budget.alert",
        "scope": alert.scope.label,
        "scope_kind": alert.scope.kind,
        "scope_name": alert.scope.name,
        "period": alert.period,
        "period_id": alert.period_id,
        "threshold_percent": alert.threshold,
        "spent_usd": round(alert.spent_usd, 9),
        "budget_usd": round(alert.budget_usd, 9),
        "time": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


class SpendAlerts:
    """Delivers alerts to the audit stream and the optional webhook."""

    def __init__(self, audit: AuditLog | None, settings: SpendAlertSettings) -> None:
        self.audit = audit
        self.settings = settings
        self.delivered = 0
        self._client = (
            httpx.AsyncClient(timeout=settings.webhook_timeout_s, follow_redirects=False)
            if settings.webhook_url
            else None
        )

    async def __call__(self, alert: Alert) -> None:
        if self.audit is not None:
            try:
                await self.audit.record(
                    subject="provider_svc",
                    action="budget.alert",
                    target=alert.scope.label,
                    outcome=f"{alert.threshold}%",
                    detail=f"{alert.period} {alert.period_id}: spent ${alert.spent_usd:.6f} of ${alert.budget_usd:.6f}",
                )
            except AgentmeshError as err:
                log.warning("budget.alert of %s not audited: %s", alert.scope.label, err)
        if self._client is not None:
            url = self.settings.webhook_url
            try:
                response = await self._client.post(url, json=alert_json(alert))
                if response.status_code >= 300:
                    log.warning("spend alert webhook %s answered HTTP %d", safe_url(url), response.status_code)
                else:
                    self.delivered += 1
            except httpx.HTTPError as exc:
                log.warning("spend alert webhook %s failed: %s", safe_url(url), type(exc).__name__)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
