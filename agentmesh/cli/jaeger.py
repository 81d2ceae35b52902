"""Reading a request's traces from a Jaeger v2 query service (`telemetry.trace_query_url`) for `agentmesh trace`.

Jaeger v2's HTTP query API (`/api/v3`, the API_v3 gateway of jaeger-query):
- `GET /api/v3/services` -> `{"services": [...]}`;
- `GET /api/v3/traces?query.serviceName=S&query.startTimeMin=T&query.startTimeMax=T&query.attributes={json}`
  -> `{"result": {"resourceSpans": [...]}}`, every span of every matching trace, in the OTLP JSON
  encoding (ids in hex, int64 as strings, enums as numbers); 404 when none matches.

Every service that exported spans of the request holds one with `agentmesh.request_id`; the services are
searched in turn (the CLI's and the dispatcher's first) until one answers, which returns whole traces. A
task id is searched as `agentmesh.task_id` on the dispatcher's spans, then by the request ids those spans
carry. Spans come back as `trace_view.Span`, the form the span file gives.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
from collections.abc import Iterable
from typing import Any

import httpx

from agentmesh.semconv import ATTR_REQUEST_ID, ATTR_TASK_ID
from agentmesh.spans import Span

__all__ = ["JaegerError", "JaegerQuery", "spans_from_otlp_json"]

_KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
_STATUS = {0: "UNSET", 1: "OK", 2: "ERROR"}
_FIRST_SERVICES = ("agentmesh-cli", "dispatcher_svc", "tool_svc", "provider_svc", "context_svc")
_LOOKBACK = dt.timedelta(days=7)
_MAX_SERVICES = 50


class JaegerError(Exception):
    """The query service could not be asked (unreachable, or an answer that is not its API)."""


def _hex_id(value: Any, width: int) -> str:
    """A trace or span id as lowercase hex: Jaeger writes hex; the plain OTLP JSON mapping base64."""
    text = str(value or "")
    if len(text) == width and all(c in "0123456789abcdefABCDEF" for c in text):
        return text.lower()
    try:
        return base64.b64decode(text, validate=True).hex()
    except (binascii.Error, ValueError):
        return text


def _any_value(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in value:
            return value[key]
    if "intValue" in value:
        return int(value["intValue"])
    if "arrayValue" in value:
        return [_any_value(v) for v in (value["arrayValue"].get("values") or [])]
    if "kvlistValue" in value:
        return _attributes(value["kvlistValue"].get("values"))
    return None


def _attributes(items: Iterable[Any] | None) -> dict[str, Any]:
    return {item["key"]: _any_value(item.get("value")) for item in items or () if isinstance(item, dict)}


def _enum(value: Any, names: dict[int, str], prefix: str) -> str:
    if isinstance(value, int):
        return names.get(value, str(value))
    text = str(value or "")
    return text.removeprefix(prefix) or names[0]


def spans_from_otlp_json(data: Any) -> list[Span]:
    """The spans of a `{"result": {"resourceSpans": [...]}}` answer (or a bare TracesData)."""
    root = data.get("result", data) if isinstance(data, dict) else {}
    spans: list[Span] = []
    for resource_spans in root.get("resourceSpans") or ():
        resource = _attributes((resource_spans.get("resource") or {}).get("attributes"))
        service = str(resource.get("service.name") or "?")
        for scope_spans in resource_spans.get("scopeSpans") or ():
            for raw in scope_spans.get("spans") or ():
                status = raw.get("status") or {}
                parent = _hex_id(raw.get("parentSpanId"), 16) or None
                start = int(raw.get("startTimeUnixNano") or 0)
                spans.append(
                    Span(
                        trace_id=_hex_id(raw.get("traceId"), 32),
                        span_id=_hex_id(raw.get("spanId"), 16),
                        parent_span_id=parent,
                        name=str(raw.get("name") or "?"),
                        kind=_enum(raw.get("kind", 0), _KINDS, "SPAN_KIND_"),
                        service=service,
                        start=start,
                        end=int(raw.get("endTimeUnixNano") or start),
                        status=_enum(status.get("code", 0), _STATUS, "STATUS_CODE_"),
                        description=str(status.get("message") or ""),
                        attributes=_attributes(raw.get("attributes")),
                        links=[
                            {"trace_id": _hex_id(link.get("traceId"), 32), "span_id": _hex_id(link.get("spanId"), 16)}
                            for link in raw.get("links") or ()
                        ],
                    )
                )
    return spans


class JaegerQuery:
    """A Jaeger v2 query service at `base_url` (e.g. http://localhost:16686)."""

    def __init__(self, base_url: str, *, timeout_s: float = 10.0, client: httpx.Client | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.client = client or httpx.Client(timeout=timeout_s, trust_env=False)

    def close(self) -> None:
        self.client.close()

    def _get(self, path: str, params: dict[str, str] | None = None) -> Any:
        try:
            response = self.client.get(f"{self.base_url}{path}", params=params)
        except httpx.HTTPError as exc:
            raise JaegerError(f"{self.base_url}: {type(exc).__name__}: {exc}") from None
        if response.status_code == 404:
            return None
        if response.status_code >= 400:
            raise JaegerError(f"{self.base_url}{path}: HTTP {response.status_code}: {response.text[:200]}")
        try:
            return response.json()
        except ValueError:
            raise JaegerError(f"{self.base_url}{path}: the answer is not JSON (not a Jaeger v2 query API?)") from None

    def services(self) -> list[str]:
        data = self._get("/api/v3/services")
        found = data.get("services") if isinstance(data, dict) else None
        return [str(s) for s in found or ()]

    def find(self, service: str, attributes: dict[str, str], *, now: dt.datetime | None = None) -> list[Span]:
        """Every span of the traces in which `service` has a span with these attributes (none: [])."""
        end = now or dt.datetime.now(dt.UTC)
        params = {
            "query.serviceName": service,
            "query.startTimeMin": (end - _LOOKBACK).isoformat().replace("+00:00", "Z"),
            "query.startTimeMax": (end + dt.timedelta(minutes=1)).isoformat().replace("+00:00", "Z"),
            "query.attributes": json.dumps(attributes, separators=(",", ":")),
            "query.searchDepth": "20",
        }
        data = self._get("/api/v3/traces", params)
        return spans_from_otlp_json(data) if data is not None else []

    def _ordered_services(self) -> list[str]:
        known = self.services()
        return [s for s in _FIRST_SERVICES if s in known] + [s for s in known if s not in _FIRST_SERVICES][
            :_MAX_SERVICES
        ]

    def spans_of(self, request_id: str) -> list[Span]:
        """The spans of the traces of a request id, or else of a task id (its request ids' traces)."""
        services = self._ordered_services()
        for service in services:
            spans = self.find(service, {ATTR_REQUEST_ID: request_id})
            if spans:
                return spans
        if "dispatcher_svc" not in services:
            return []
        of_task = self.find("dispatcher_svc", {ATTR_TASK_ID: request_id})
        requests = sorted({str(s.attributes[ATTR_REQUEST_ID]) for s in of_task if s.attributes.get(ATTR_REQUEST_ID)})
        found = {(s.trace_id, s.span_id): s for s in of_task}
        for rid in requests:
            for service in services:
                spans = self.find(service, {ATTR_REQUEST_ID: rid})
                if spans:
                    found.update({(s.trace_id, s.span_id): s for s in spans})
                    break
        return list(found.values())
