"""deploy/grafana/agentmesh.json: a Grafana dashboard whose queries read agentmesh's metrics by the names
agentmesh.metrics documents (a real scrape checks them too: tests/e2e/dispatcher/test_observability.py)."""

from __future__ import annotations

import json

import pytest

from agentmesh.metrics import METRIC_NAMES
from tests.unit.deploy.manifests import DASHBOARD, dashboard_queries, promql_metric_names

HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")


def exposed_names() -> set[str]:
    """Every sample name the Prometheus endpoint can serve, from METRIC_NAMES."""
    names = set()
    for otel, family in METRIC_NAMES.items():
        if otel.endswith("duration"):
            names |= {family + suffix for suffix in HISTOGRAM_SUFFIXES}
        else:
            names.add(family)
    return names


def test_the_dashboard_is_a_grafana_dashboard_on_a_prometheus_datasource() -> None:
    data = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert data["uid"] and data["title"] and data["schemaVersion"] >= 36
    variables = {v["name"]: v for v in data["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    panels = [p for p in data["panels"] if p["type"] != "row"]
    assert len(panels) >= 15
    ids = [p["id"] for p in data["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], f"{panel['title']}: no query"


def test_every_query_reads_metrics_agentmesh_serves() -> None:
    served = exposed_names()
    used: set[str] = set()
    for query in dashboard_queries():
        names = promql_metric_names(query)
        assert names, f"no metric in {query}"
        assert names <= served, f"{query}: {sorted(names - served)} are not served"
        used |= names
    # The list: RPCs, tasks, steps, tool outcomes, tokens and cost, queue, breakers, Redis.
    for family in ("rpc_server", "agentmesh_tasks_total", "agentmesh_task_steps", "agentmesh_tool_calls",
                   "agentmesh_gen_ai_tokens", "agentmesh_gen_ai_cost", "agentmesh_queue_depth",
                   "agentmesh_queue_lag", "agentmesh_tool_breakers", "db_client_operation"):  # fmt: skip
        assert any(name.startswith(family) for name in used), family


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('sum by (le) (rate(a_bucket{x="y{z}"}[5m]))', {"a_bucket"}),
        ("histogram_quantile(0.99, sum without (pod) (rate(b_bucket[$__rate_interval])))", {"b_bucket"}),
        ('c_total{status=~"A|B"} / on (job) group_left d_total offset 5m', {"c_total", "d_total"}),
        ("label_values(e_count, service_name)", {"e_count"}),
        ("max(f) > bool 0 and g unless h", {"f", "g", "h"}),
    ],
)
def test_the_query_reader_finds_metric_names(expr: str, names: set[str]) -> None:
    assert promql_metric_names(expr) == names
