"""What the HTTP adapters share: one pooled httpx client per backend, timeouts capped by the caller's
deadline, transport failures as typed errors, SSE reading, and JSON that keeps numbers verbatim.

Only the headers built here go upstream: the adapter's auth header, content type, a fixed
User-Agent, the backend's configured static headers, and the call's trace context: every request is
sent in a CLIENT span of its own and carries its `traceparent` and the `x-request-id`
(agentmesh.httptrace), so a model server's logs and traces join ours. Nothing else of the incoming call
(baggage, the identity token) is forwarded, and nothing instruments httpx globally.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from httpx_sse import EventSource, ServerSentEvent, SSEError
from opentelemetry import trace

from agentmesh import __version__
from agentmesh.errors import AgentmeshError, ErrorCode
from agentmesh.httptrace import TracedTransport
from agentmesh.redact import redact_str
from provider_svc.exceptions import UpstreamError, error_from_status, malformed
from provider_svc.models.base import CallContext

__all__ = ["USER_AGENT", "HttpBackend", "HttpTimeouts", "RawNumber", "dumps_raw", "environment_proxy", "loads_raw"]

USER_AGENT = f"agentmesh/{__version__}"
# Key-like tokens an upstream may echo back in an error ("Incorrect API key provided: sk-...").
_KEYLIKE = re.compile(r"\b(?:sk|pk|key|rk)-[A-Za-z0-9_*.\-]{6,}")
_MIN_SECRET = 8


@dataclass(frozen=True, slots=True)
class HttpTimeouts:
    connect_s: float = 5.0
    read_s: float = 60.0
    total_s: float = 120.0


class RawNumber:
    """A JSON number kept as its original text (floats would otherwise be re-formatted)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RawNumber) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return self.text


def loads_raw(text: str | bytes) -> Any:
    """json.loads keeping every number's text: ints are exact anyway, floats become RawNumber."""
    return json.loads(text, parse_float=RawNumber)


def dumps_raw(value: Any) -> str:
    """Compact JSON text of a structure from `loads_raw` (RawNumber written verbatim)."""
    parts: list[str] = []
    _dump_into(value, parts)
    return "".join(parts)


def _dump_into(value: Any, out: list[str]) -> None:
    if isinstance(value, RawNumber):
        out.append(value.text)
    elif isinstance(value, dict):
        out.append("{")
        for i, (key, item) in enumerate(value.items()):
            if i:
                out.append(",")
            out.append(json.dumps(str(key), ensure_ascii=False))
            out.append(":")
            _dump_into(item, out)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _dump_into(item, out)
        out.append("]")
    else:
        out.append(json.dumps(value, ensure_ascii=False))


def environment_proxy(url: str) -> str | None:
    """The proxy HTTPS_PROXY / HTTP_PROXY / ALL_PROXY name for `url`, unless NO_PROXY exempts its host."""
    parts = urllib.parse.urlsplit(url)
    if urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    proxies = urllib.request.getproxies()
    return proxies.get(parts.scheme) or proxies.get("all") or None


class HttpBackend:
    """One pooled async HTTP client per configured backend; adapters of its models share it."""

    def __init__(
        self,
        name: str,
        base_url: str,
        *,
        auth_headers: Mapping[str, str],
        static_headers: Mapping[str, str] | None = None,
        timeouts: HttpTimeouts = HttpTimeouts(),
        max_connections: int = 64,
        transport: httpx.AsyncBaseTransport | None = None,
        tracer: trace.Tracer | None = None,
    ) -> None:
        self.name = name
        self.timeouts = timeouts
        # Every header value we send could be a credential: none may surface in an error text.
        self._secrets = sorted(
            {v for v in [*auth_headers.values(), *(static_headers or {}).values()] if len(v) >= _MIN_SECRET},
            key=len,
            reverse=True,
        )
        headers = {"user-agent": USER_AGENT, **(static_headers or {}), **auth_headers}
        self._json_headers = httpx.Headers({**headers, "content-type": "application/json"})
        self._sse_headers = httpx.Headers({**self._json_headers, "accept": "text/event-stream"})
        self._base_url = base_url.rstrip("/") + "/"
        self._urls: dict[str, httpx.URL] = {}
        # httpx's transport, not its Client: an API call needs no cookie jar, redirect following
        # (a redirect could carry our key to another host), auth flow or URL merging, and those
        # cost ~0.3 ms of CPU per call here (measured against AsyncClient.post on the same fake).
        self.proxy = environment_proxy(self._base_url)
        """The forward proxy the environment sets for this backend (as httpx.AsyncClient honours)."""
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        # httpx's own transport (httpcore's pool, keep-alive, TLS; HTTP CONNECT and SOCKS proxies).
        inner = transport or httpx.AsyncHTTPTransport(limits=limits, proxy=self.proxy)
        # Each request in its CLIENT span, with traceparent and x-request-id (agentmesh.httptrace).
        self._transport: httpx.AsyncBaseTransport = TracedTransport(inner, tracer)

    async def aclose(self) -> None:
        await self._transport.aclose()

    def _request(self, path: str, body: bytes, headers: httpx.Headers, budget: float) -> httpx.Request:
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = httpx.URL(self._base_url + path.lstrip("/"))
        # Host and Content-Length set here and the body handed over as a stream: httpx.Request
        # would otherwise re-derive both from `content=` on every call (a third of its cost).
        sent = headers.copy()
        sent["host"] = url.netloc.decode("ascii")
        sent["content-length"] = str(len(body))
        return httpx.Request(
            "POST", url, stream=httpx.ByteStream(body), headers=sent, extensions={"timeout": self._timeout(budget)}
        )

    def scrub(self, text: str) -> str:
        """`text` without our credentials, and through the one redactor (agentmesh.redact): an
        upstream's error body may carry any secret, ours or someone else's."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
            bare = secret[7:] if secret.lower().startswith("bearer ") else ""
            if len(bare) >= _MIN_SECRET:
                text = text.replace(bare, "***")
        return redact_str(_KEYLIKE.sub("***", text))

    def scrubbed(self, err: AgentmeshError) -> AgentmeshError:
        """`err` with its message scrubbed (it may quote the upstream)."""
        err.message = self.scrub(err.message)
        err.args = (err.code, err.message)
        return err

    def _upstream_error(self, status: int, content: bytes, headers: Mapping[str, str]) -> AgentmeshError:
        return self.scrubbed(error_from_status(self.name, status, content, headers))

    def _budget(self, ctx: CallContext) -> tuple[float, bool]:
        """(seconds this call may take, whether the caller's deadline is what binds)."""
        remaining = ctx.remaining()
        if remaining is not None and remaining <= self.timeouts.total_s:
            if remaining <= 0:
                raise AgentmeshError(
                    ErrorCode.DEADLINE_EXCEEDED, "the caller's deadline passed before the upstream call"
                )
            return remaining, True
        return self.timeouts.total_s, False

    def _timeout(self, budget: float) -> dict[str, float]:
        """The per-request timeouts (the transport's `timeout` extension)."""
        connect = min(self.timeouts.connect_s, budget)
        read = min(self.timeouts.read_s, budget)
        return {"connect": connect, "read": read, "write": read, "pool": connect}

    def _timed_out(self, by_deadline: bool, budget: float) -> AgentmeshError:
        if by_deadline:
            return AgentmeshError(
                ErrorCode.DEADLINE_EXCEEDED,
                f"{self.name} did not answer within the caller's deadline ({budget:.2f}s)",
                metadata={"provider": self.name},
            )
        return UpstreamError(
            ErrorCode.UPSTREAM_TIMEOUT,
            f"{self.name} did not answer in time ({budget:.2f}s)",
            provider=self.name,
            retryable=True,
        )

    def _transport_error(self, exc: httpx.HTTPError, by_deadline: bool, budget: float) -> AgentmeshError:
        if isinstance(exc, httpx.TimeoutException):
            # httpx's own timeouts are ours (read_s, connect_s) unless the deadline capped them.
            capped = budget <= (
                self.timeouts.connect_s if isinstance(exc, httpx.ConnectTimeout) else self.timeouts.read_s
            )
            return self._timed_out(by_deadline and capped, budget if capped else self.timeouts.read_s)
        # The exception text names the URL at most (never headers): kept short for the error.
        return UpstreamError(
            ErrorCode.UPSTREAM_UNAVAILABLE,
            self.scrub(f"{self.name} unreachable: {type(exc).__name__}: {str(exc)[:200]}"),
            provider=self.name,
            retryable=True,
        )

    async def post_json(self, path: str, body: bytes, ctx: CallContext) -> tuple[int, Any, float]:
        """POSTs a JSON body; (status, parsed body with verbatim numbers, latency). Raises typed errors."""
        budget, by_deadline = self._budget(ctx)
        started = time.monotonic()
        try:
            async with asyncio.timeout(budget):
                response = await self._transport.handle_async_request(
                    self._request(path, body, self._json_headers, budget)
                )
                try:
                    await response.aread()
                finally:
                    await response.aclose()
        except TimeoutError:
            raise self._timed_out(by_deadline, budget) from None
        except httpx.HTTPError as exc:
            raise self._transport_error(exc, by_deadline, budget) from None
        latency = time.monotonic() - started
        if response.status_code >= 300:
            raise self._upstream_error(response.status_code, response.content, response.headers)
        try:
            data = loads_raw(response.content)
        except ValueError:
            raise malformed(self.name, "body is not JSON", response.status_code) from None
        if not isinstance(data, dict):
            raise malformed(self.name, "body is not a JSON object", response.status_code)
        return response.status_code, data, latency

    @asynccontextmanager
    async def stream_sse(
        self, path: str, body: bytes, ctx: CallContext
    ) -> AsyncIterator[AsyncIterator[ServerSentEvent]]:
        """POSTs a JSON body and yields its SSE events; per-read timeout and total budget enforced."""
        budget, by_deadline = self._budget(ctx)
        end = time.monotonic() + budget
        request = self._request(path, body, self._sse_headers, budget)
        try:
            response = await self._transport.handle_async_request(request)
        except httpx.HTTPError as exc:
            raise self._transport_error(exc, by_deadline, budget) from None
        try:
            if response.status_code >= 300:
                try:
                    content = await response.aread()
                except httpx.HTTPError:
                    content = b""
                raise self._upstream_error(response.status_code, content, response.headers)

            async def events() -> AsyncIterator[ServerSentEvent]:
                try:
                    async for event in EventSource(response).aiter_sse():
                        if time.monotonic() > end:
                            raise self._timed_out(by_deadline, budget)
                        yield event
                except SSEError as exc:
                    raise malformed(self.name, f"not an event stream: {exc}", response.status_code) from None
                except httpx.HTTPError as exc:
                    raise self._transport_error(exc, by_deadline, budget) from None

            yield events()
        finally:
            await response.aclose()


def event_json(provider: str, event: ServerSentEvent) -> Any:
    """The JSON data of one SSE event (numbers verbatim); a malformed-response error otherwise."""
    try:
        return loads_raw(event.data)
    except ValueError:
        raise malformed(provider, f"stream event {event.event or 'message'} is not JSON") from None
