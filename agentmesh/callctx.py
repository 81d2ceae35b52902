"""What one incoming call knows about itself, and the plumbing that carries it to outgoing calls.

Server interceptors fill these context variables when a call starts (request id, deadline,
identity token); client interceptors read them so every downstream call carries the same request
id, the remaining deadline and the caller's identity token without any servicer code passing them.
"""

from __future__ import annotations

import inspect
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from typing import Any

import grpc
import grpc.aio

REQUEST_ID_HEADER = "x-request-id"
IDENTITY_HEADER = "x-agentmesh-identity"

request_id_var: ContextVar[str | None] = ContextVar("agentmesh_request_id", default=None)
deadline_var: ContextVar[float | None] = ContextVar("agentmesh_deadline", default=None)
"""Absolute time.monotonic() at which the incoming call's deadline passes."""
identity_token_var: ContextVar[str | None] = ContextVar("agentmesh_identity_token", default=None)
"""The raw identity token of the incoming call, forwarded unchanged to downstream calls."""


def new_request_id() -> str:
    """A fresh request id (minted once, at the edge)."""
    return uuid.uuid4().hex


def current_request_id() -> str | None:
    """The request id of the call being served, if any."""
    return request_id_var.get()


def remaining_time() -> float | None:
    """Seconds left before the incoming call's deadline, or None outside a call with a deadline."""
    deadline = deadline_var.get()
    if deadline is None:
        return None
    return deadline - time.monotonic()


def metadata_value(metadata: Any, key: str) -> str | None:
    """The first value of a metadata key, as text (metadata may be None or a tuple of pairs)."""
    if not metadata:
        return None
    for item in metadata:
        name, value = item[0], item[1]
        if name == key:
            return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return None


Enter = Callable[[str, grpc.aio.ServicerContext[Any, Any]], Awaitable[None]]
Leave = Callable[[str, grpc.aio.ServicerContext[Any, Any], BaseException | None], None]
"""leave(method, context, error): error is what ended the call (an abort included), None on success."""


class CallInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Runs `enter(method, context)` inside the handler's own task before the servicer method.

    grpc.aio calls `intercept_service` before the handler runs and without its ServicerContext,
    so context variables set there would not reach the servicer; wrapping the behaviour does.
    `enter` may abort the call (context.abort) to reject it.
    """

    async def enter(self, method: str, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        """Prepares the call; subclasses override."""

    def leave(self, method: str, context: grpc.aio.ServicerContext[Any, Any], error: BaseException | None) -> None:
        """Runs when the call ends, however it ends, if enter returned normally.

        `error` is the exception that ended the call (an abort raises one), None when it returned.
        """

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        return wrap_handler(handler, handler_call_details.method, self.enter, self.leave)


def wrap_handler(handler: Any, method: str, enter: Enter, leave: Leave | None = None) -> Any:
    """A copy of `handler` whose behaviour awaits `enter(method, context)` first and calls `leave` last."""
    if handler.unary_unary or handler.stream_unary:
        inner = handler.unary_unary or handler.stream_unary

        async def unary_response(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            await enter(method, context)
            error: BaseException | None = None
            try:
                return await inner(request, context)
            except BaseException as exc:
                error = exc
                raise
            finally:
                if leave is not None:
                    leave(method, context, error)

        factory = grpc.unary_unary_rpc_method_handler if handler.unary_unary else grpc.stream_unary_rpc_method_handler
        return factory(
            unary_response,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    inner_stream = handler.unary_stream or handler.stream_stream

    async def stream_response(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        await enter(method, context)
        error: BaseException | None = None
        try:
            result = inner_stream(request, context)
            if inspect.isasyncgen(result):
                async for item in result:
                    yield item
            else:
                # A servicer that writes with context.write() returns a coroutine instead.
                await result
        except BaseException as exc:
            error = exc
            raise
        finally:
            if leave is not None:
                leave(method, context, error)

    stream_factory = (
        grpc.unary_stream_rpc_method_handler if handler.unary_stream else grpc.stream_stream_rpc_method_handler
    )
    return stream_factory(
        stream_response,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


class ChainedCallInterceptor(CallInterceptor):
    """Several CallInterceptors run as one, in order: `leave` in reverse order, and on a rejected
    `enter` only for the interceptors whose `enter` had returned."""

    def __init__(self, interceptors: list[CallInterceptor]) -> None:
        self.interceptors = interceptors

    async def enter(self, method: str, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        entered = 0
        try:
            for interceptor in self.interceptors:
                await interceptor.enter(method, context)
                entered += 1
        except BaseException as exc:
            # A later one rejected the call (e.g. auth after the load limiter counted it).
            for interceptor in reversed(self.interceptors[:entered]):
                interceptor.leave(method, context, exc)
            raise

    def leave(self, method: str, context: grpc.aio.ServicerContext[Any, Any], error: BaseException | None) -> None:
        for interceptor in reversed(self.interceptors):
            interceptor.leave(method, context, error)


class _WrappedGenericHandler(grpc.GenericRpcHandler):  # type: ignore[type-arg]
    """A generic handler whose method handlers run inside `interceptor` (wrapped once per method)."""

    def __init__(self, inner: Any, interceptor: CallInterceptor) -> None:
        self._inner = inner
        self._interceptor = interceptor
        self._wrapped: dict[str, tuple[Any, Any]] = {}

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Any:
        handler = self._inner.service(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = wrap_handler(handler, method, self._interceptor.enter, self._interceptor.leave)
        if len(self._wrapped) < 1024:  # method names come from callers: bound the cache
            self._wrapped[method] = (handler, wrapped)
        return wrapped


def intercept_registrations(server: grpc.aio.Server, interceptor: CallInterceptor) -> None:
    """Makes every handler registered on `server` from now on run inside `interceptor`.

    The same behaviour as `grpc.aio.server(interceptors=[interceptor])`, but each handler is
    wrapped once, when it is registered, instead of on every call: grpc's interceptor path runs
    `intercept_service` and builds a new wrapped handler per call. A server has exactly two ways
    to register handlers (generic and registered-method), and both are routed through the wrap
    here, so nothing (health and reflection included) can be registered around it.
    """
    # Any: the grpc stubs do not know add_registered_method_handlers (grpcio >= 1.63).
    target: Any = server
    add_generic = target.add_generic_rpc_handlers
    add_registered = target.add_registered_method_handlers

    def add_generic_rpc_handlers(generic_rpc_handlers: Any) -> None:
        add_generic(tuple(_WrappedGenericHandler(h, interceptor) for h in generic_rpc_handlers))

    def add_registered_method_handlers(service_name: str, method_handlers: dict[str, Any]) -> None:
        add_registered(
            service_name,
            {
                name: wrap_handler(handler, f"/{service_name}/{name}", interceptor.enter, interceptor.leave)
                for name, handler in method_handlers.items()
            },
        )

    target.add_generic_rpc_handlers = add_generic_rpc_handlers
    target.add_registered_method_handlers = add_registered_method_handlers
