"""The upstream request a reply answers, returned to a caller that keeps it (GenerateRequest.include_request).

Secrets are masked by the one redactor (`agentmesh.redact`), string by string inside the parsed body
(numbers kept verbatim, `_http.loads_raw`), so the text stays valid JSON and is byte for byte the body
as sent wherever nothing was masked. The redactor costs about a microsecond per character, and the steps
of a task resend almost the same messages each time, so every distinct string's result is remembered in
a bounded cache: a step pays for its new text only. A large body is masked in a worker thread (the cache
is shared under a lock), so it does not hold the event loop; a small one (`INLINE_BYTES`) on the loop.

Domain code: no grpc, no protobuf (docs/design.md §1, §6).
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from dataclasses import dataclass

from agentmesh.redact import redact_field, redact_value
from provider_svc.models._http import dumps_raw, loads_raw
from provider_svc.models.base import SentRequest

__all__ = ["RecordedRequest", "RequestRecorder"]

INLINE_BYTES = 4096
"""A body up to this size is masked on the event loop (a few milliseconds at most, uncached): handing it
to a worker thread cost a third of provider_svc's CPU in bench_peer's profile (issue 45)."""

_MIN_CACHED_CHARS = 8
"""Shorter strings are masked anew: a cache entry would cost more than the work."""


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """A request as sent, secrets masked."""

    format: str
    """SentRequest.format: "openai.chat.completions" or "anthropic.messages"."""
    body_json: str
    redacted: bool
    """Whether anything was masked."""


class RequestRecorder:
    """Masks the secrets of sent requests, remembering each distinct string's result (LRU, bounded by
    `max_entries` strings and `max_chars` characters held)."""

    def __init__(self, *, max_entries: int = 8192, max_chars: int = 16_000_000) -> None:
        self.max_entries = max_entries
        self.max_chars = max_chars
        self._cache: OrderedDict[str, tuple[str, bool]] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    async def record(self, sent: SentRequest) -> RecordedRequest:
        """The request, secrets masked: a small body here, a larger one in a worker thread."""
        body = sent.body()
        if len(body) <= INLINE_BYTES:
            return self._record(sent.format, body)
        return await asyncio.to_thread(self._record, sent.format, body)

    def record_now(self, sent: SentRequest) -> RecordedRequest:
        return self._record(sent.format, sent.body())

    def _record(self, format: str, body: bytes) -> RecordedRequest:
        value, changed = redact_value(loads_raw(body), self._text)
        text = dumps_raw(value) if changed else body.decode("utf-8")
        return RecordedRequest(format=format, body_json=text, redacted=changed)

    def _text(self, text: str) -> tuple[str, bool]:
        if len(text) < _MIN_CACHED_CHARS or len(text) > self.max_chars // 4:
            return redact_field(text)
        with self._lock:
            found = self._cache.get(text)
            if found is not None:
                self._cache.move_to_end(text)
                self.hits += 1
                return found
        result = redact_field(text)  # outside the lock: the slow part
        with self._lock:
            self.misses += 1
            if text not in self._cache:
                self._cache[text] = result
                self._chars += len(text) + len(result[0])
                while self._cache and (len(self._cache) > self.max_entries or self._chars > self.max_chars):
                    old, (masked, _) = self._cache.popitem(last=False)
                    self._chars -= len(old) + len(masked)
        return result

    @property
    def entries(self) -> int:
        return len(self._cache)
