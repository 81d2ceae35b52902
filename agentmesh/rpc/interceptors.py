"""The one server interceptor every agentmesh server runs, and the call interceptors it chains.

`EdgeInterceptor` is a plain `grpc.aio.ServerInterceptor` (grpc's public API). For every method
handler it returns a copy that behaves the same for all four services, unary and streaming alike
(docs/design.md §11):

1. the chained `CallInterceptor`s run first, inside the handler's own task: the server span,
   request id and deadline, load shedding, authentication. A rejected call ends here, before its
   request bytes are decoded or logged: grpc hands us the raw bytes (no request deserializer), and
2. only then are the bytes decoded; undecodable bytes, and REQUIRED fields (google.api.field_behavior)
   left unset, are INVALID_ARGUMENT with an ErrorDetail naming them;
3. the servicer runs inside the error boundary: an AgentmeshError becomes its rich status, an
   abort passes through, and anything unexpected is logged once with its traceback and answered
   INTERNAL with a generic message carrying the request id (never the exception's text);
4. every response carries the call's request id: `x-request-id` in its initial metadata (sent with the
   first response message, or the error), and a failed call's also in its trailers and ErrorDetail.

Every AgentmeshError the edge answers (a rejected token or role, undecodable bytes, what the
servicer raised) is logged as one short line without a traceback: at INFO when it is the caller's
fault (INVALID_ARGUMENT, NOT_FOUND, UNAUTHENTICATED, ...), at WARNING otherwise (UNAVAILABLE, ...),
rate-limited per (method, code) so a flood of bad calls costs a few lines (`RateLimitedLog`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from typing import Any, NoReturn, TypeAlias

import grpc
import grpc.aio
from google.protobuf.message import DecodeError, Message
from opentelemetry import trace

from agentmesh import callctx
from agentmesh.errors import AgentmeshError, ErrorCode, InvalidRequestError, Violation, echo
from agentmesh.redacted import record_exception, traceback_text
from agentmesh.rpc.fields import missing_required
from agentmesh.rpc.ratelog import RateLimitedLog
from agentmesh.rpc.status import GRPC_STATUS, abort, send_request_id

__all__ = [
    "CallInterceptor",
    "ChainedCallInterceptor",
    "EdgeInterceptor",
    "admit",
    "unexpected_error",
    "wrap_handler",
]

log = logging.getLogger("agentmesh.rpc")

Context = grpc.aio.ServicerContext[Any, Any]
# Method names come from callers: bound the handler cache.
_MAX_CACHED_METHODS = 1024
_unexpected_var: ContextVar[BaseException | None] = ContextVar("agentmesh_unexpected_error", default=None)
# Statuses that mean the caller must change something (or wait): logged at INFO, not WARNING.
_S = grpc.StatusCode
_CALLER_FAULTS = frozenset(
    {
        _S.INVALID_ARGUMENT,
        _S.OUT_OF_RANGE,
        _S.NOT_FOUND,
        _S.ALREADY_EXISTS,
        _S.FAILED_PRECONDITION,
        _S.ABORTED,
        _S.PERMISSION_DENIED,
        _S.UNAUTHENTICATED,
        _S.RESOURCE_EXHAUSTED,
        _S.CANCELLED,
    }
)
# What the edge logs of an error's message (it may echo the caller's input).
_LOGGED_MESSAGE_CHARS = 160


def unexpected_error() -> BaseException | None:
    """The unexpected exception the boundary answered INTERNAL for in this call, if any (for spans)."""
    return _unexpected_var.get()


class CallInterceptor:
    """Runs `enter(method, context)` inside the handler's own task before the request is decoded.

    grpc.aio calls `intercept_service` before the handler runs and without its ServicerContext,
    so context variables set there would not reach the servicer; running inside the handler does.
    `enter` may abort the call (context.abort) to reject it.
    """

    async def enter(self, method: str, context: Context) -> None:
        """Prepares the call; subclasses override."""

    def leave(self, method: str, context: Context, error: BaseException | None) -> None:
        """Runs when the call ends, however it ends, if enter returned normally.

        `error` is the exception that ended the call (an abort raises one), None when it returned.
        """


class ChainedCallInterceptor(CallInterceptor):
    """Several CallInterceptors run as one, in order: `leave` in reverse order, and on a rejected
    `enter` only for the interceptors whose `enter` had returned."""

    def __init__(self, interceptors: list[CallInterceptor]) -> None:
        self.interceptors = interceptors

    async def enter(self, method: str, context: Context) -> None:
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

    def leave(self, method: str, context: Context, error: BaseException | None) -> None:
        for interceptor in reversed(self.interceptors):
            interceptor.leave(method, context, error)


def _message_name(deserializer: Any, method: str) -> str:
    message_class = getattr(deserializer, "__self__", None)
    descriptor = getattr(message_class, "DESCRIPTOR", None)
    return str(getattr(descriptor, "full_name", "")) or f"request of {method}"


def _decoder(deserializer: Any, method: str) -> Callable[[Any], Any]:
    """Decodes request bytes with the handler's own deserializer; bad bytes are INVALID_ARGUMENT."""
    if deserializer is None:
        return lambda raw: raw
    name = _message_name(deserializer, method)

    def decode(raw: Any) -> Any:
        try:
            request = deserializer(raw)
        except (DecodeError, RecursionError, ValueError) as exc:
            # Only the parser's reason: the bytes themselves are the caller's and may be anything.
            raise InvalidRequestError("request", f"not a valid {name}: {str(exc)[:200]}") from None
        if isinstance(request, Message):
            missing = missing_required(request)
            if missing:
                raise AgentmeshError(
                    ErrorCode.INVALID_REQUEST,
                    f"{name}: required field{'s' if len(missing) > 1 else ''} not set: {', '.join(missing)}",
                    violations=[Violation(path=path, rule="required", hint=f"{path} is required") for path in missing],
                )
        return request

    return decode


def _log_answered(answered: RateLimitedLog, method: str, err: AgentmeshError) -> None:
    """One short line for an error the edge answers: no traceback, rate-limited per (method, code)."""
    level = logging.INFO if GRPC_STATUS[err.code] in _CALLER_FAULTS else logging.WARNING
    answered.log(
        (method, err.code), level, "%s answered %s: %s", method, err.code.name, echo(err.message, _LOGGED_MESSAGE_CHARS)
    )


async def _boundary(method: str, context: Context, exc: BaseException, answered: RateLimitedLog) -> NoReturn:
    """Ends the call for an exception that escaped the servicer (re-raises what is not ours to map)."""
    if isinstance(exc, grpc.aio.AbortError | asyncio.CancelledError) or not isinstance(exc, Exception):
        raise exc
    if isinstance(exc, AgentmeshError):
        _log_answered(answered, method, exc)
        await abort(context, exc)
    rid = callctx.current_request_id() or "none"
    # Once, here: the traceback goes to the log and the span, never to the caller; masked, as the
    # exception's text may quote an upstream's answer or a tool's output (agentmesh.redacted).
    log.error("unexpected failure in %s (request id %s)\n%s", method, rid, traceback_text(exc))
    _unexpected_var.set(exc)
    record_exception(trace.get_current_span(), exc)
    await abort(context, AgentmeshError(ErrorCode.INTERNAL, f"internal error in {method} (request id {rid})"))


# grpc-stubs types handlers for the sync server; grpc.aio's take coroutines, hence Any below.
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
_ANSWERED = RateLimitedLog(log)


def wrap_handler(
    handler: Handler, method: str, interceptor: CallInterceptor, answered: RateLimitedLog | None = None
) -> Handler:
    """A copy of `handler` that runs `interceptor`, then decodes, then the servicer in the boundary.

    `answered` logs the errors the edge answers (default: one log shared by every wrapped handler).
    """
    decode = _decoder(handler.request_deserializer, method)
    enter, leave = interceptor.enter, interceptor.leave
    answered = answered or _ANSWERED

    if handler.unary_unary or handler.stream_unary:
        inner: Any = handler.unary_unary or handler.stream_unary
        streaming_request = handler.stream_unary is not None

        async def unary_response(request: Any, context: Context) -> Any:
            await _admit(method, context, enter, answered)
            error: BaseException | None = None
            try:
                response = await inner(_decoded(request, decode, streaming_request), context)
                if callctx.echo_var.get():  # our own clients decline it: a write less per call (issue 45)
                    await send_request_id(context)  # the initial metadata goes out with the response
                return response
            except BaseException as exc:
                error = await _mapped(method, context, exc, answered)
                raise error from None
            finally:
                leave(method, context, error)

        factory = grpc.unary_unary_rpc_method_handler if handler.unary_unary else grpc.stream_unary_rpc_method_handler
        return factory(unary_response, request_deserializer=None, response_serializer=handler.response_serializer)

    inner_stream: Any = handler.unary_stream or handler.stream_stream
    streaming_request = handler.stream_stream is not None

    async def stream_response(request: Any, context: Context) -> AsyncIterator[Any]:
        await _admit(method, context, enter, answered)
        error: BaseException | None = None
        try:
            result = inner_stream(_decoded(request, decode, streaming_request), context)
            if inspect.isasyncgen(result):
                async for item in result:
                    await send_request_id(context)  # before the first message (once)
                    yield item
            else:
                # A servicer that writes with context.write() returns a coroutine instead.
                await send_request_id(context)
                await result
            await send_request_id(context)  # a stream that ended without a message
        except BaseException as exc:
            error = await _mapped(method, context, exc, answered)
            raise error from None
        finally:
            leave(method, context, error)

    stream_factory = (
        grpc.unary_stream_rpc_method_handler if handler.unary_stream else grpc.stream_stream_rpc_method_handler
    )
    return stream_factory(stream_response, request_deserializer=None, response_serializer=handler.response_serializer)


async def _admit(
    method: str, context: Context, enter: Callable[[str, Context], Awaitable[None]], answered: RateLimitedLog
) -> None:
    """Runs the chain's `enter`; a rejection (or a failure of the chain itself) ends the call here.

    A CallInterceptor rejects a call by raising an AgentmeshError (logged as the boundary logs any)."""
    try:
        await enter(method, context)
    except BaseException as exc:
        await _boundary(method, context, exc, answered)


async def admit(
    method: str, context: Context, enter: Callable[[str, Context], Awaitable[None]], answered: RateLimitedLog
) -> None:
    """`enter` of a chain as the edge runs it, for an edge that calls it apart from the handler (the
    HTTP listener's Connect edge, agentmesh.rpc.connect): a rejection is answered through the boundary."""
    await _admit(method, context, enter, answered)


async def _mapped(method: str, context: Context, exc: BaseException, answered: RateLimitedLog) -> BaseException:
    """What ends the call for `exc`: the abort the boundary made of it, or `exc` itself."""
    try:
        await _boundary(method, context, exc, answered)
    except BaseException as mapped:
        return mapped
    raise AssertionError("the boundary always raises")  # pragma: no cover


def _decoded(request: Any, decode: Callable[[Any], Any], streaming: bool) -> Any:
    return _decode_stream(request, decode) if streaming else decode(request)


async def _decode_stream(requests: AsyncIterator[Any], decode: Callable[[Any], Any]) -> AsyncIterator[Any]:
    async for raw in requests:
        yield decode(raw)


class EdgeInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """The server interceptor of every agentmesh server (see the module doc).

    A handler is wrapped once per method and reused while grpc hands out the same handler object:
    building the wrapper per call would cost every call a few closures for nothing.
    """

    def __init__(self, interceptor: CallInterceptor) -> None:
        self.interceptor = interceptor
        self._wrapped: dict[str, tuple[Handler, Handler]] = {}
        # One per server: the errors it answered, a few lines per (method, code) per window.
        self.answered = RateLimitedLog(log)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler:
        handler = await continuation(handler_call_details)
        if handler is None:  # an unknown method: grpc answers UNIMPLEMENTED
            return handler
        method = handler_call_details.method
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = wrap_handler(handler, method, self.interceptor, self.answered)
        if len(self._wrapped) < _MAX_CACHED_METHODS:
            self._wrapped[method] = (handler, wrapped)
        return wrapped
