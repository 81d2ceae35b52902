"""The Connect protocol on a service's HTTP listener: HTTP/JSON (curl), Connect streams and gRPC-Web.

`connectrpc` serves the protocol (the generated `agentmesh.v1.*_connect` ASGI applications: JSON or
binary Protobuf, unary or enveloped streams, and gRPC-Web from the same handler); this module hands
each application an adapter that calls the very handlers the gRPC server runs, through the same
edge (docs/design.md §11), so there is one implementation of every RPC:

1. `ConnectEdge` is a connectrpc metadata interceptor, so it runs before the request body is read:
   the host's chain of call interceptors (server span from `traceparent`, request id, deadline from
   `Connect-Timeout-Ms` / `grpc-timeout`, load shedding, authentication from `authorization: Bearer`
   or `x-agentmesh-identity`) enters on an `HttpServicerContext`, the HTTP call seen as a grpc.aio
   ServicerContext. A rejection ends the call there, as on the gRPC port.
2. `ConnectServicer` answers each RPC by re-encoding the decoded message and running the servicer's
   own grpc handler wrapped by `wrap_handler` (decode with REQUIRED checks, then the error boundary).
3. Every error is Connect error JSON (or the end-of-stream message, or gRPC-Web trailers) with the
   same details the gRPC status carries: ErrorInfo, RetryInfo, BadRequest and `agentmesh.v1.ErrorDetail`
   (each a `{"type", "value"}` entry, value the base64 Protobuf bytes). Errors the protocol library
   raises itself (bad JSON, an oversized body, the deadline) get an ErrorDetail too.

Which RPCs: every RPC of the services in `ALL_RPCS_SERVICES` (the dispatcher: the API a client uses),
and of the others only those annotated `idempotency_level = NO_SIDE_EFFECTS` (the read-only calls);
the rest answer `unimplemented` after authentication. Both lists come from the descriptors: an RPC
added to a proto is served once `make protos` regenerates the stubs, with no change here.

gRPC itself (HTTP/2 with trailers) stays on the gRPC port: uvicorn speaks HTTP/1.1 without trailers.
"""

from __future__ import annotations

import base64
import importlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextvars import ContextVar
from typing import Any

import grpc
import grpc.aio
from connectrpc.code import Code
from connectrpc.errors import ConnectError, ErrorDetail
from connectrpc.request import RequestContext
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import ServiceDescriptor
from google.rpc import status_pb2  # type: ignore[import-untyped]
from protobuf.wkt import Any as WireAny

from agentmesh import callctx
from agentmesh.errors import AgentmeshError, ErrorCode
from agentmesh.redacted import traceback_text
from agentmesh.rpc.interceptors import CallInterceptor, admit, wrap_handler
from agentmesh.rpc.ratelog import RateLimitedLog
from agentmesh.rpc.status import GRPC_STATUS, to_rpc_status

__all__ = [
    "ALL_RPCS_SERVICES",
    "ConnectEdge",
    "ConnectServicer",
    "ContentTypeGuard",
    "HttpServicerContext",
    "MethodTable",
    "connect_application",
    "served_methods",
]

log = logging.getLogger("agentmesh.rpc.connect")

ALL_RPCS_SERVICES = frozenset({"agentmesh.v1.DispatcherService"})
"""Services whose every RPC is served over HTTP; the others serve their NO_SIDE_EFFECTS RPCs only."""

_DETAILS_KEY = "grpc-status-details-bin"
_call_var: ContextVar[HttpServicerContext | None] = ContextVar("agentmesh_http_call", default=None)
# The error codes the protocol library raises on its own, as ours (anything else keeps its code).
_LIBRARY_CODES: Mapping[Code, ErrorCode] = {
    Code.INVALID_ARGUMENT: ErrorCode.INVALID_REQUEST,
    Code.RESOURCE_EXHAUSTED: ErrorCode.PAYLOAD_TOO_LARGE,
    Code.DEADLINE_EXCEEDED: ErrorCode.DEADLINE_EXCEEDED,
    Code.CANCELED: ErrorCode.CANCELLED,
    Code.UNKNOWN: ErrorCode.INTERNAL,
}


def connect_code(status: grpc.StatusCode) -> Code:
    """The Connect code of a gRPC status (the same names, but CANCELLED is spelled `canceled`)."""
    if status == grpc.StatusCode.CANCELLED:
        return Code.CANCELED
    return Code(str(status.name).lower())


def grpc_code(code: Code) -> grpc.StatusCode:
    """The gRPC status of a Connect code."""
    if code == Code.CANCELED:
        return grpc.StatusCode.CANCELLED
    return grpc.StatusCode[code.name]


def _wire_details(status: Any) -> list[ErrorDetail]:
    return [ErrorDetail(WireAny(type_url=packed.type_url, value=packed.value)) for packed in status.details]


def connect_error(err: AgentmeshError) -> ConnectError:
    """`err` as a ConnectError carrying the details its gRPC status would (`to_rpc_status`)."""
    status = to_rpc_status(err)
    return ConnectError(connect_code(GRPC_STATUS[err.code]), status.message, _wire_details(status))


class HttpAbort(grpc.aio.AbortError):
    """What `HttpServicerContext.abort_with_status` raises: the call ends with this status (an abort,
    to the edge's boundary and span as to grpc.aio's)."""

    def __init__(self, code: grpc.StatusCode, message: str, status: Any | None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status

    def connect_error(self) -> ConnectError:
        details = _wire_details(self.status) if self.status is not None else []
        return ConnectError(connect_code(self.code), self.message, details)


def _peer(client_address: str | None) -> str:
    """grpc's spelling of the peer ("ipv4:1.2.3.4:5", "ipv6:[::1]:5") from "host:port"."""
    if not client_address:
        return ""
    host, _, port = client_address.rpartition(":")
    return f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"


class HttpServicerContext:
    """One HTTP call as the grpc.aio ServicerContext the edge's interceptors and boundary use:
    metadata from the HTTP headers, the deadline from the protocol's timeout header, the peer, and
    abort/code/details. (The servicers themselves touch no context.)"""

    rpc_system = "connect_rpc"
    """The span's and the RPC metrics' `rpc.system` (agentmesh.rpc.telemetry)."""

    def __init__(self, ctx: RequestContext[Any, Any], method: str) -> None:
        self.ctx = ctx
        self.method = method
        self._metadata = tuple((key.lower(), value) for key, value in ctx.request_headers.allitems())
        self._code: grpc.StatusCode | None = None
        self._details: str | None = None

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def time_remaining(self) -> float | None:
        remaining_ms = self.ctx.timeout_ms
        return None if remaining_ms is None else max(remaining_ms / 1000.0, 0.0)

    def peer(self) -> str:
        return _peer(self.ctx.client_address)

    def code(self) -> grpc.StatusCode | None:
        return self._code

    def details(self) -> str | None:
        return self._details

    def set_code(self, code: grpc.StatusCode) -> None:
        self._code = code

    def set_details(self, details: str) -> None:
        self._details = details

    async def abort_with_status(self, status: grpc.Status) -> None:
        rich = None
        for key, value in status.trailing_metadata or ():
            if key == _DETAILS_KEY and isinstance(value, bytes):
                rich = status_pb2.Status.FromString(value)
        await self.abort(status.code, status.details or "", rich=rich)

    async def abort(
        self, code: grpc.StatusCode, details: str = "", trailing_metadata: Any = (), *, rich: Any = None
    ) -> None:
        self._code, self._details = code, details
        raise HttpAbort(code, details, rich)

    def ended_by(self, error: Exception | None) -> BaseException | None:
        """The call's end as the interceptors' `leave` sees it (an abort with its status), recording the code."""
        if error is None:
            self._code = self._code or grpc.StatusCode.OK
            return None
        if isinstance(error, ConnectError):
            self._code, self._details = grpc_code(error.code), error.message
            return HttpAbort(self._code, error.message, None)
        self._code, self._details = grpc.StatusCode.UNKNOWN, type(error).__name__
        return error


class ConnectEdge:
    """The gRPC edge's chain of call interceptors as a connectrpc metadata interceptor (module doc, 1.)."""

    def __init__(self, chain: CallInterceptor, answered: RateLimitedLog | None = None) -> None:
        self.chain = chain
        self.answered = answered or RateLimitedLog(log)

    async def on_start(self, ctx: RequestContext[Any, Any]) -> HttpServicerContext:
        call = HttpServicerContext(ctx, f"/{ctx.method.service_name}/{ctx.method.name}")
        _call_var.set(call)
        try:
            await admit(call.method, call, self.chain.enter, self.answered)  # type: ignore[arg-type]
        except HttpAbort as exc:
            raise exc.connect_error() from None
        finally:
            rid = callctx.current_request_id()
            if rid:
                ctx.response_headers["x-request-id"] = rid
        return call

    async def on_end(self, call: HttpServicerContext, ctx: RequestContext[Any, Any], error: Exception | None) -> None:
        mapped = _with_details(error, call.method) if error is not None else None
        self.chain.leave(call.method, call, call.ended_by(mapped))  # type: ignore[arg-type]
        if mapped is not None:
            raise mapped


def _with_details(error: Exception, method: str) -> ConnectError:
    """`error` as a ConnectError carrying an ErrorDetail (the library's own errors have none)."""
    if isinstance(error, ConnectError):
        if error.details or error.code not in _LIBRARY_CODES:
            return error
        code = _LIBRARY_CODES[error.code]
        message = error.message
        if code == ErrorCode.INTERNAL:
            message = f"internal error in {method} (request id {callctx.current_request_id() or 'none'})"
        return connect_error(AgentmeshError(code, message))
    rid = callctx.current_request_id() or "none"
    log.error("unexpected failure in %s over HTTP (request id %s)\n%s", method, rid, traceback_text(error))
    return connect_error(AgentmeshError(ErrorCode.INTERNAL, f"internal error in {method} (request id {rid})"))


def _key(name: str) -> str:
    """A method's name as the generated code's attribute and the proto's name both reduce to."""
    return name.replace("_", "").lower()


def served_methods(service: ServiceDescriptor) -> frozenset[str]:
    """The RPCs of `service` served over HTTP (module doc): all, or the NO_SIDE_EFFECTS ones."""
    if service.full_name in ALL_RPCS_SERVICES:
        return frozenset(m.name for m in service.methods)
    read_only = descriptor_pb2.MethodOptions.NO_SIDE_EFFECTS
    return frozenset(m.name for m in service.methods if m.GetOptions().idempotency_level == read_only)


class MethodTable:
    """Stands in for a grpc.aio server in `add_XServicer_to_server`, keeping the method handlers it
    registers ("/pkg.Service/Method" -> handler): the very handlers the gRPC server runs."""

    def __init__(self) -> None:
        self.handlers: dict[str, Any] = {}

    def add_generic_rpc_handlers(self, handlers: Iterable[Any]) -> None:
        """The generated code registers the same handlers both ways; the registered ones suffice."""

    def add_registered_method_handlers(self, service_name: str, method_handlers: Mapping[str, Any]) -> None:
        for name, handler in method_handlers.items():
            self.handlers[f"/{service_name}/{name}"] = handler


class ConnectServicer:
    """The service object of a generated `*ServiceASGIApplication` (module doc, 2.): each attribute the
    application asks for (`start_task`) is the matching RPC of the descriptor (`StartTask`)."""

    def __init__(self, service: ServiceDescriptor, handlers: Mapping[str, Any], answered: RateLimitedLog) -> None:
        self.service = service
        self._handlers = handlers
        self._served = served_methods(service)
        self._answered = answered
        self._names = {_key(m.name): m.name for m in service.methods}
        if len(self._names) != len(service.methods):
            raise ValueError(f"{service.full_name}: two RPC names differ only by case or underscores")

    def __getattr__(self, attribute: str) -> Callable[..., Any]:
        name = self.__dict__.get("_names", {}).get(_key(attribute))
        if name is None:
            raise AttributeError(attribute)
        method = f"/{self.service.full_name}/{name}"
        handler = self._handlers.get(method)
        if handler is None or name not in self._served:
            return _unimplemented(method, "it changes state: call it over gRPC" if handler else "no handler")
        wrapped = wrap_handler(handler, method, CallInterceptor(), self._answered)
        if wrapped.unary_unary is not None:
            return _unary(wrapped.unary_unary)
        if wrapped.unary_stream is not None:
            return _server_stream(wrapped.unary_stream)
        return _unimplemented(method, "client streams are not served over HTTP")


def _current_call() -> HttpServicerContext:
    call = _call_var.get()
    if call is None:  # pragma: no cover - ConnectEdge runs first on every request
        raise ConnectError(Code.INTERNAL, "the edge did not run")
    return call


def _unary(handler: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    async def call(request: Any, ctx: RequestContext[Any, Any]) -> Any:
        try:
            return await handler(request.SerializeToString(), _current_call())
        except HttpAbort as exc:
            raise exc.connect_error() from None

    return call


def _server_stream(handler: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    async def stream(request: Any, ctx: RequestContext[Any, Any]) -> AsyncIterator[Any]:
        try:
            async for item in handler(request.SerializeToString(), _current_call()):
                yield item
        except HttpAbort as exc:
            raise exc.connect_error() from None

    return stream


def _unimplemented(method: str, why: str) -> Callable[..., Any]:
    async def refuse(request: Any, ctx: RequestContext[Any, Any]) -> Any:
        raise ConnectError(Code.UNIMPLEMENTED, f"{method} is not served over HTTP ({why})")

    return refuse


def connect_application(
    service: ServiceDescriptor,
    handlers: Mapping[str, Any],
    edge: ConnectEdge,
    *,
    read_max_bytes: int,
) -> Any:
    """The generated ASGI application of `service` (agentmesh.v1.<file>_connect) over its grpc handlers."""
    stem = service.file.name.rsplit("/", 1)[-1].removesuffix(".proto")
    module = importlib.import_module(f"agentmesh.v1.{stem}_connect")
    application = getattr(module, f"{service.name}ASGIApplication")
    servicer = ConnectServicer(service, handlers, edge.answered)
    return application(servicer, interceptors=[edge], read_max_bytes=read_max_bytes)


_SUPPORTED_TYPES = frozenset(
    {
        "application/json",
        "application/proto",
        "application/connect+json",
        "application/connect+proto",
        "application/grpc-web",
        "application/grpc-web+proto",
        "application/grpc-web+json",
    }
)


def error_json(error: ConnectError) -> bytes:
    """A Connect error as the protocol's JSON (details: type and unpadded base64 value)."""
    body: dict[str, Any] = {"code": error.code.value, "message": error.message}
    if error.details:
        body["details"] = [
            {"type": d.type_name, "value": base64.b64encode(d.message_bytes).decode().rstrip("=")}
            for d in error.details
        ]
    return json.dumps(body, ensure_ascii=False).encode()


class ContentTypeGuard:
    """In front of a Connect application: a POST whose content type no codec reads is answered here,
    as Connect error JSON with its ErrorDetail (HTTP 415) instead of the library's empty 415, and gRPC
    proper (HTTP/2 with trailers, which this HTTP/1.1 listener cannot answer) is sent to the gRPC port."""

    def __init__(self, app: Any, grpc_port: Callable[[], int]) -> None:
        self.app = app
        self.grpc_port = grpc_port

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") == "http" and scope.get("method") == "POST":
            raw = dict(scope.get("headers") or ()).get(b"content-type", b"")
            content_type = raw.decode("latin-1").split(";", 1)[0].strip().lower()
            if content_type not in _SUPPORTED_TYPES:
                await self._refuse(send, content_type)
                return
        await self.app(scope, receive, send)

    async def _refuse(self, send: Any, content_type: str) -> None:
        if content_type.startswith("application/grpc"):
            message = (
                f"content type {content_type!r}: gRPC is served on the gRPC port ({self.grpc_port()}); "
                "this HTTP listener speaks Connect (application/json, application/connect+json) and gRPC-Web"
            )
        else:
            message = (
                f"content type {content_type or '(none)'!r} is not supported: send application/json (or "
                "application/proto) for a unary call, application/connect+json for a stream, or gRPC-Web"
            )
        body = error_json(connect_error(AgentmeshError(ErrorCode.INVALID_REQUEST, message)))
        headers = [(b"content-type", b"application/json"), (b"accept-post", b"application/json, application/proto")]
        await send({"type": "http.response.start", "status": 415, "headers": headers})
        await send({"type": "http.response.body", "body": body})
