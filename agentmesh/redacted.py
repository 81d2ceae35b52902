"""Telemetry without secrets: exception texts, span statuses and events, and log lines passed through
the one redactor (agentmesh.redact) where they leave a service (docs/design.md §9, "Where redaction
happens").

An exception's message is whatever its raiser put in it: an upstream's error body, a tool's output, a
DSN with its password. The RPC edge writes it to the SERVER and CLIENT spans and to the log; the OTel
SDK writes it to a span when an exception escapes `start_as_current_span`. So:
- `exception_description`, `traceback_text`, `record_exception` and `set_error_status` are what the
  edge and the services call: the texts masked before they are written;
- `RedactingSpanExporter` wraps every exporter `setup_telemetry` builds: whatever status description or
  event text a span still carries (a library's own `record_exception`, a description a site wrote
  raw) is masked before the span leaves the process, on the batch processor's thread, for spans with
  an error status or events only (a clean span is passed through untouched);
- `redact_free_text` is applied by the JSON log formatter to every line's message and traceback.

agentmesh.redact is imported on first use: it loads detect-secrets and compiles gitleaks' rules
(~1.5 s), which a CLI that never fails should not pay.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping, Sequence
from functools import cache, lru_cache
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import Status, StatusCode
from opentelemetry.util.types import AttributeValue

__all__ = [
    "RedactingSpanExporter",
    "exception_description",
    "record_exception",
    "redact_free_text",
    "set_error_status",
    "traceback_text",
]

# An exception's description on a span status is clipped after masking (the mask never splits a secret).
_DESCRIPTION_CHARS = 500


@cache
def _redact() -> Any:
    from agentmesh.redact import redact_text

    return redact_text


_CACHED_TEXT_CHARS = 256
"""Texts up to this long have their masked form remembered (`_masked_short`); longer ones are masked anew."""


def redact_free_text(text: str, *, whole_text: bool = True) -> str:
    """`text` (a message, an exception's text, a traceback) with every secret masked (`whole_text`:
    agentmesh.redact.find_secrets)."""
    if not text:
        return text
    if len(text) <= _CACHED_TEXT_CHARS:
        return _masked_short(text, whole_text)
    masked: str = _redact()(text, whole_text=whole_text)[0]
    return masked


@lru_cache(maxsize=2048)
def _masked_short(text: str, whole_text: bool) -> str:
    """`redact_free_text` of a short text, remembered: masking is a pure function of the text, and a
    dispatcher masks the same event messages (`step 1`, a fixed status line) for every task, ~0.1 ms of
    detectors each (issue 45). Bounded: 2048 texts of at most `_CACHED_TEXT_CHARS` characters."""
    masked: str = _redact()(text, whole_text=whole_text)[0]
    return masked


def exception_description(exc: BaseException, limit: int = _DESCRIPTION_CHARS) -> str:
    """`Type: message` of `exc`, masked, then clipped to `limit` characters."""
    message = str(exc)
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return redact_free_text(text)[:limit]


def traceback_text(exc: BaseException) -> str:
    """The formatted traceback of `exc` (with its chained causes), masked: messages and source lines."""
    return redact_free_text("".join(traceback.format_exception(exc)).rstrip("\n"))


def record_exception(span: trace.Span, exc: BaseException) -> None:
    """`span.record_exception(exc)` with the message and stack trace masked."""
    span.record_exception(
        exc,
        attributes={"exception.message": redact_free_text(str(exc)), "exception.stacktrace": traceback_text(exc)},
    )


def set_error_status(span: trace.Span, description: str) -> None:
    """The span's status ERROR with `description` masked."""
    span.set_status(Status(StatusCode.ERROR, redact_free_text(description)))


# An exception event's texts are prose; the other events' string attributes are values (codes, ids,
# which stand alone: agentmesh.redact.redact_field's rule).
_PROSE = frozenset({"exception.message", "exception.stacktrace"})


def _masked_attributes(attrs: Mapping[str, AttributeValue] | None) -> dict[str, AttributeValue] | None:
    """The attributes with each string value masked; None when none changed."""
    if not attrs:
        return None
    out: dict[str, AttributeValue] = {}
    changed = False
    for key, value in attrs.items():
        if isinstance(value, str) and value:
            masked = redact_free_text(value, whole_text=key in _PROSE)
            changed = changed or masked != value
            out[key] = masked
        else:
            out[key] = value
    return out if changed else None


def redacted_span(span: ReadableSpan) -> ReadableSpan:
    """`span` with its status description and its events' string attributes masked; the same object
    when nothing in them was a secret (or the span has neither)."""
    status = span.status
    description = status.description
    new_status = status
    if description:
        masked = redact_free_text(description)
        if masked != description:
            new_status = Status(status.status_code, masked)
    events: list[Event] = []
    events_changed = False
    for event in span.events:
        attrs = _masked_attributes(event.attributes)
        if attrs is None:
            events.append(event)
            continue
        events_changed = True
        events.append(Event(event.name, attrs, event.timestamp))
    if new_status is status and not events_changed:
        return span
    return ReadableSpan(
        name=span.name,
        context=span.get_span_context(),
        parent=span.parent,
        resource=span.resource,
        attributes=span.attributes,
        events=events,
        links=span.links,
        kind=span.kind,
        status=new_status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


class RedactingSpanExporter(SpanExporter):
    """Masks the free text of each span (status description, event attributes) before `inner` exports
    it: the guard behind every site that writes an exception to a span."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self.inner.export([redacted_span(s) for s in spans])

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)
