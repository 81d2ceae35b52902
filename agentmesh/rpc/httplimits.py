"""The HTTP listener's own limits (docs/design.md §11, §15; issue 39).

A slow HTTP client must never cost the gRPC port anything: 300 `POST`s sending one byte every 5 s used
to fill the one concurrency count both ports shared, and the dispatcher's gRPC calls were shed. So:

- `HttpConcurrencyLimit`: a call interceptor on the HTTP edge only (Connect and a service's own routes),
  placed after authentication, so an unauthenticated caller is refused before it holds a slot (and
  before its body is read: the edge runs before any route reads it). At most `server.http_max_concurrent`
  HTTP calls in all and `server.http_max_per_identity` per identity token (subject and agent; an API
  key's calls are bounded by its quotas instead); beyond either the call is RESOURCE_EXHAUSTED
  (OVERLOADED, RetryInfo) at once.
  A token with no grant and no operator role (`is_ungranted`: what the red team used) is refused
  PERMISSION_DENIED there too, before it holds a slot.
- `BodyDeadline`: an ASGI middleware around the listener: the body must arrive at
  `server.http_min_body_rate` bytes per second after a grace of `server.http_body_grace_s` (a body read
  past that is cut: 408 and the connection closed), so a slot is never held by a trickle.
- `header_timeout_protocol`: the request line and headers must be in within `server.http_header_timeout_s`
  (uvicorn's h11 protocol with a timer), else the connection is closed: no route has run, no slot held.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import grpc.aio
import h11
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from uvicorn.protocols.http.h11_impl import H11Protocol

from agentmesh.errors import OverloadedError, PermissionDeniedError
from agentmesh.identity_value import Identity, current_identity
from agentmesh.rpc.interceptors import CallInterceptor
from agentmesh.rpc.status import abort

__all__ = ["BodyDeadline", "BodyTooSlowError", "HttpConcurrencyLimit", "header_timeout_protocol"]

Context = grpc.aio.ServicerContext[Any, Any]


def _who() -> str:
    """The identity a per-identity share is kept for; "" for none (no token, or an API key: a key's
    concurrency is what its quotas allow, `agentmesh keys`, and the model gateway's clients send many
    calls at once with one key)."""
    identity = current_identity()
    if identity is None or identity.api_key_id:
        return ""
    return f"{identity.subject}|{identity.agent_id}"


def is_ungranted(identity: Identity | None) -> bool:
    """A token that can do nothing: no role beyond `agent`, no grant, not a task's, not an API key."""
    if identity is None:
        return False  # auth disabled or an open method: nothing to judge
    return (
        not identity.permissions
        and not identity.task_id
        and not identity.api_key_id
        and not identity.has_any_role(("operator", "admin"))
    )


class HttpConcurrencyLimit(CallInterceptor):
    """HTTP calls in flight, in all and per identity (module doc); never counts a gRPC call."""

    def __init__(self, limit: int, per_identity: int, retry_after_s: float = 0.5) -> None:
        self.limit = limit
        self.per_identity = per_identity
        self.retry_after_s = retry_after_s
        self.in_flight = 0
        self.by_identity: Counter[str] = Counter()
        self._held: dict[int, str] = {}

    async def enter(self, method: str, context: Context) -> None:
        if is_ungranted(current_identity()):
            # Refused before it holds a slot or sends its body: there is nothing such a token may do.
            await abort(
                context,
                PermissionDeniedError(
                    "grant:any", "the token holds no grant and no operator role: nothing here is open to it"
                ),
            )
        who = _who()
        if self.in_flight >= self.limit:
            await abort(
                context,
                OverloadedError(
                    f"the HTTP listener is at its limit of {self.limit} concurrent calls; retry later",
                    retry_after=self.retry_after_s,
                ),
            )
        if who and self.by_identity[who] >= self.per_identity:
            await abort(
                context,
                OverloadedError(
                    f"this identity has {self.per_identity} HTTP calls in flight, the most allowed; retry later",
                    retry_after=self.retry_after_s,
                ),
            )
        self.in_flight += 1
        self.by_identity[who] += 1
        self._held[id(context)] = who

    def leave(self, method: str, context: Context, error: BaseException | None) -> None:
        who = self._held.pop(id(context), None)
        if who is None:
            return
        self.in_flight -= 1
        self.by_identity[who] -= 1
        if self.by_identity[who] <= 0:
            del self.by_identity[who]


class BodyTooSlowError(ConnectError):
    """The request body did not arrive at the minimum rate: a Connect DEADLINE_EXCEEDED to the Connect
    routes (which answer it in their format), 408 from `BodyDeadline` to any other route."""

    def __init__(self, message: str) -> None:
        super().__init__(Code.DEADLINE_EXCEEDED, message)


class BodyDeadline:
    """ASGI middleware: a request body must keep up with `min_rate` bytes/s after `grace_s` (module doc)."""

    def __init__(self, app: Any, *, grace_s: float, min_rate: float) -> None:
        self.app = app
        self.grace_s = grace_s
        self.min_rate = min_rate

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        start = time.monotonic()
        received = 0
        state = {"started": False, "cut": False, "done": False}

        async def timed_receive() -> Any:
            nonlocal received
            if state["done"]:  # the body is in: waiting for a disconnect (a stream's end) is not bounded here
                return await receive()
            # The next byte is due when the bytes so far no longer cover the time since the grace ended.
            due = start + self.grace_s + (received + 1) / self.min_rate
            # asyncio.timeout, not wait_for: wait_for runs receive() in a task of its own and may lose a
            # cancellation that arrives as receive() completes (connectrpc cancels its disconnect watch).
            try:
                async with asyncio.timeout(max(0.0, due - time.monotonic())):
                    message = await receive()
            except TimeoutError:
                state["cut"] = True
                raise BodyTooSlowError(
                    f"the request body arrived slower than {self.min_rate:g} bytes/s ({received} bytes read)"
                ) from None
            if message.get("type") == "http.request":
                received += len(message.get("body", b""))
                state["done"] = not message.get("more_body", False)
            else:
                state["done"] = True
            return message

        async def closing_send(message: Any) -> None:
            if message.get("type") == "http.response.start":
                state["started"] = True
                if state["cut"]:  # the rest of the body is never read: the connection cannot be reused
                    message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
            await send(message)

        try:
            await self.app(scope, timed_receive, closing_send)
        except BodyTooSlowError as exc:
            if state["started"]:
                raise
            await closing_send(
                {
                    "type": "http.response.start",
                    "status": 408,
                    "headers": [(b"content-type", b"text/plain; charset=utf-8")],
                }
            )
            await send({"type": "http.response.body", "body": str(exc).encode()})


def header_timeout_protocol(timeout_s: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a header read timeout (slowloris): a request whose line and headers
    are not in within `timeout_s` of their first byte (or of the connection) has its connection closed.
    uvicorn has only the keep-alive idle timeout."""

    class HeaderTimeoutProtocol(H11Protocol):
        _headers_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def _arm(self) -> None:
            if self._headers_timer is None:
                self._headers_timer = self.loop.call_later(timeout_s, self._too_slow)

        def _disarm(self) -> None:
            if self._headers_timer is not None:
                self._headers_timer.cancel()
                self._headers_timer = None

        def _too_slow(self) -> None:
            self._headers_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

        def data_received(self, data: bytes) -> None:
            if self.conn.their_state is h11.IDLE:
                self._arm()  # a request begins: its headers are due within timeout_s
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return HeaderTimeoutProtocol
