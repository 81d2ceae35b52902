"""Metrics recorded in memory for domain tests: a real SDK MeterProvider with the SDK's InMemoryMetricReader."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from agentmesh.metrics import Metrics

__all__ = ["Recorded", "recorded_metrics"]


class Recorded:
    """What a `Metrics` recorded, read through the SDK as an exporter would see it."""

    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.provider = MeterProvider(metric_readers=[self.reader])
        self.metrics = Metrics(self.provider)

    def points(self, name: str) -> list[tuple[dict[str, Any], Any]]:
        """(attributes, point) of every data point of instrument `name` now (cumulative)."""
        data = self.reader.get_metrics_data()
        found = []
        for resource_metrics in data.resource_metrics if data else ():
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    if metric.name == name:
                        found += [(dict(p.attributes or {}), p) for p in metric.data.data_points]
        return found

    def value(self, name: str, **attributes: Any) -> float:
        """The sum of the values (counters, gauges) or counts (histograms) of the points matching `attributes`."""
        total = 0.0
        for found, point in self.points(name):
            if attributes.items() <= found.items():
                total += point.count if hasattr(point, "count") else point.value
        return total


def recorded_metrics() -> Recorded:
    return Recorded()
