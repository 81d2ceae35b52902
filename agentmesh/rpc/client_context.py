"""What every outgoing call to one of our services carries (agentmesh.rpc.channels): the call-context
interceptor (request id, identity, deadline, trace context, CLIENT span, call metrics), one object per
kind of call.

grpc.aio runs a client interceptor in a task of its own: 10-50 us of client CPU per call more than doing
the same in the caller's task (issue 45, a ListTools call through each, alternating). We keep the task: in
the caller's task, cancelling the caller cancels the RPC, and a cancelled agent task would tear down a tool
call already under way upstream (tests/e2e/dispatcher/test_workflow_policies.py, the FATAL branch).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Literal

import grpc
import grpc.aio
from opentelemetry import baggage, propagate, trace
from opentelemetry import context as otel_context

from agentmesh import __version__, callctx
from agentmesh.config import ClientSettings, Settings
from agentmesh.metrics import Metrics
from agentmesh.redacted import exception_description, record_exception, set_error_status
from agentmesh.semconv import BAGGAGE_REQUEST_ID, ERROR_TYPE, is_valid_request_id, traced_method
from agentmesh.telemetry import Telemetry

__all__ = [
    "CallContextClientInterceptor",
    "client_interceptors",
    "server_attributes",
    "wire_rounding",
]


def wire_rounding(timeout_s: float) -> float:
    """How much later a callee may see a deadline than the caller set it (an upper bound).

    gRPC sends a deadline as a relative `grpc-timeout` in a coarse unit rounded up: measured on
    grpcio 1.85, a callee sees up to ~1 ms more below 1 s, ~10 ms more from 1 to 10 s, ~100 ms more
    from 10 to 100 s. Uncorrected, each hop would push the deadline later by that much.
    """
    unit = 0.001
    limit = 1.0
    while timeout_s >= limit:
        unit *= 10
        limit *= 10
    return unit


class CallContextClientInterceptor:
    """Adds request id, identity token, deadline and trace context to outgoing calls (shared by the
    four kinds), and with a tracer provider records each call as a CLIENT span.

    Runs in the call's own interceptor task (grpc.aio copies the caller's context into it), so the
    context variables of the incoming call are visible, and what it sets stays local to this call.

    The span is ours rather than the OTel grpc instrumentation's client interceptor: the same
    semantic-convention attributes (rpc.system/service/method, rpc.grpc.status_code, error status
    on any non-OK code; server.address/server.port from the channel's target), without a second
    interceptor layer, metadata copy and context switch on every call the dispatcher makes. With
    `metrics` each call is also measured (`rpc.client.call.duration`).

    `default_timeout_s=None` sends a call made without a deadline outside any incoming call with none
    (the CLI's event stream, which lasts as long as its task); the services keep the configured default.
    """

    def __init__(
        self,
        settings: ClientSettings,
        identity_token: str | None = None,
        tracer_provider: trace.TracerProvider | None = None,
        *,
        target: str = "",
        metrics: Metrics | None = None,
        default_timeout_s: float | Literal["configured"] | None = "configured",
    ) -> None:
        self._default_timeout_s = settings.default_timeout_s if default_timeout_s == "configured" else default_timeout_s
        self._identity_token = identity_token
        self._tracer = tracer_provider.get_tracer("agentmesh.client", __version__) if tracer_provider else None
        self._server_attributes = server_attributes(target)
        self._metrics = metrics if metrics is not None and metrics.enabled else None

    def prepare(self, details: grpc.aio.ClientCallDetails) -> tuple[grpc.aio.ClientCallDetails, str]:
        """The call details to send, and the call's request id. Raises DEADLINE_EXCEEDED if late."""
        # A copy: the caller's metadata is kept, and never mutated.
        metadata = grpc.aio.Metadata(*tuple(details.metadata or ()))

        rid = callctx.metadata_value(metadata, callctx.REQUEST_ID_HEADER)
        if not rid or not is_valid_request_id(rid):
            rid = callctx.request_id_var.get()
        if not rid:
            upstream = baggage.get_baggage(BAGGAGE_REQUEST_ID)
            rid = str(upstream) if upstream else None
        if not rid:
            # An edge call (CLI, test, a task resumed outside any call): mint it once, here.
            rid = callctx.new_request_id()
        if callctx.REQUEST_ID_HEADER in metadata:
            metadata.delete_all(callctx.REQUEST_ID_HEADER)  # KeyError when absent
        metadata.add(callctx.REQUEST_ID_HEADER, rid)
        if callctx.ECHO_HEADER not in metadata:
            metadata.add(callctx.ECHO_HEADER, "0")  # we know the id we send: no echo on success

        if callctx.IDENTITY_HEADER not in metadata:
            token = self._identity_token or callctx.identity_token_var.get()
            if token:
                metadata.add(callctx.IDENTITY_HEADER, token)

        remaining = callctx.remaining_time()
        timeout: float | None
        if remaining is not None and (details.timeout is None or remaining <= details.timeout):
            # Propagated: shave one wire unit so the callee's deadline is never later than ours.
            timeout = remaining - wire_rounding(remaining)
            source = "the incoming call's deadline"
        elif details.timeout is not None:
            timeout, source = details.timeout, "the timeout given"
        else:
            timeout, source = self._default_timeout_s, "the default timeout"
        if timeout is not None and timeout <= 0:
            # Sending would only load the callee with work nobody waits for.
            raise grpc.aio.AioRpcError(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                grpc.aio.Metadata(),
                grpc.aio.Metadata(),
                details=f"deadline exceeded before the call was sent ({source} has passed)",
                debug_error_string=None,
            )
        new_details = grpc.aio.ClientCallDetails(
            details.method, timeout, metadata, details.credentials, details.wait_for_ready
        )
        return new_details, rid

    def _begin(
        self, details: grpc.aio.ClientCallDetails
    ) -> tuple[grpc.aio.ClientCallDetails, str, otel_context.Context, _Measured | None]:
        """The call details to send (trace context injected), its request id, the OTel context to
        attach while it runs, and its span and measurement (None when neither is wanted)."""
        new_details, rid = self.prepare(details)
        context = baggage.set_baggage(BAGGAGE_REQUEST_ID, rid)
        method = details.method.decode() if isinstance(details.method, bytes) else str(details.method)
        if not traced_method(method) or (self._tracer is None and self._metrics is None):
            propagate.inject(new_details.metadata, context=context)
            return new_details, rid, context, None
        service, _, name = method.lstrip("/").partition("/")
        measured = _Measured(service, name, time.perf_counter(), self._metrics)
        if self._tracer is not None:
            measured.span = self._tracer.start_span(
                method.lstrip("/"),  # `package.Service/Method`, as the RPC conventions name it
                context=context,
                kind=trace.SpanKind.CLIENT,
                attributes={
                    "rpc.system": "grpc",
                    "rpc.service": service,
                    "rpc.method": name,
                    **self._server_attributes,
                },
            )
            context = trace.set_span_in_context(measured.span, context)
        # traceparent + baggage (the configured propagators) go into the copied metadata.
        propagate.inject(new_details.metadata, context=context)
        return new_details, rid, context, measured

    async def _call(
        self, continuation: Any, details: grpc.aio.ClientCallDetails, request: Any, *, unary_response: bool
    ) -> Any:
        new_details, rid, context, measured = self._begin(details)
        # Local to this call's task; the outgoing baggage carries the id, also for an edge call.
        callctx.request_id_var.set(rid)
        if measured is None:
            return await continuation(new_details, request)
        token = otel_context.attach(context)
        try:
            call = await continuation(new_details, request)
            if unary_response:
                # The interceptor task outlives the call here anyway (grpc.aio awaits it for the
                # response), so the status is known before the span ends.
                measured.end(await call.code(), await call.details())
            else:
                call.add_done_callback(measured.end_stream)
            return call
        except grpc.aio.AioRpcError as exc:
            measured.end(exc.code(), exc.details())
            raise
        except BaseException as exc:
            measured.fail(exc)
            raise
        finally:
            otel_context.detach(token)


class _Measured:
    """One outgoing call's CLIENT span (if traced) and duration measurement (if metered)."""

    __slots__ = ("method", "metrics", "service", "span", "started")

    def __init__(self, service: str, method: str, started: float, metrics: Metrics | None) -> None:
        self.service = service
        self.method = method
        self.started = started
        self.metrics = metrics
        self.span: trace.Span | None = None

    def end(self, code: grpc.StatusCode, details: str | None) -> None:
        if self.metrics is not None:
            self.metrics.rpc_client_call(self.service, self.method, code.value[0], time.perf_counter() - self.started)
        span = self.span
        if span is not None:
            span.set_attribute("rpc.grpc.status_code", code.value[0])
            if code != grpc.StatusCode.OK:
                span.set_attribute(ERROR_TYPE, code.name)
                set_error_status(span, f"{code}: {details or ''}")  # the peer's details: masked
            span.end()

    def fail(self, exc: BaseException) -> None:
        """The call failed before grpc gave it a status (e.g. cancelled while being sent)."""
        if self.metrics is not None:
            code = grpc.StatusCode.CANCELLED if isinstance(exc, asyncio.CancelledError) else grpc.StatusCode.UNKNOWN
            self.metrics.rpc_client_call(self.service, self.method, code.value[0], time.perf_counter() - self.started)
        if self.span is not None:
            record_exception(self.span, exc)
            self.span.set_attribute(ERROR_TYPE, type(exc).__qualname__)
            set_error_status(self.span, exception_description(exc))
            self.span.end()

    def end_stream(self, call: Any) -> None:
        """Done-callback of a streaming call: its status is read with awaits, so in a task (the call is
        over, they answer at once); the task is kept referenced until it ran."""

        async def finish() -> None:
            try:
                code, details = await call.code(), await call.details()
            except BaseException:  # a cancelled call
                code, details = grpc.StatusCode.CANCELLED, "cancelled"
            self.end(code, details)

        task = asyncio.get_running_loop().create_task(finish())
        _stream_span_tasks.add(task)
        task.add_done_callback(_stream_span_tasks.discard)


_stream_span_tasks: set[asyncio.Task[None]] = set()


def server_attributes(target: str) -> dict[str, Any]:
    """`server.address` and `server.port` (an int) of the first address of a gRPC target
    (`host:port`, `dns:///host:port`, `dns://resolver/host:port`, `ipv4:a:p,b:q`, `ipv6:[::1]:p`);
    none for a unix socket or a target without a port."""
    rest = target.strip()
    if not rest or rest.startswith(("unix:", "unix-abstract:", "vsock:")):
        return {}
    scheme, sep, after = rest.partition(":")
    if sep and scheme in ("dns", "ipv4", "ipv6", "passthrough"):
        rest = after
        if rest.startswith("//"):
            # dns://[authority]/host:port: the authority is the DNS server, not the peer.
            rest = rest[2:].partition("/")[2]
    rest = rest.split(",")[0]
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit() or not host:
        return {"server.address": rest.strip("[]")} if rest and not sep else {}
    return {"server.address": host.strip("[]"), "server.port": int(port)}


class _UnaryUnary(CallContextClientInterceptor, grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[type-arg]
    async def intercept_unary_unary(
        self, continuation: Any, client_call_details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        return await self._call(continuation, client_call_details, request, unary_response=True)


class _UnaryStream(CallContextClientInterceptor, grpc.aio.UnaryStreamClientInterceptor):  # type: ignore[type-arg]
    async def intercept_unary_stream(
        self, continuation: Any, client_call_details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        return await self._call(continuation, client_call_details, request, unary_response=False)


class _StreamUnary(CallContextClientInterceptor, grpc.aio.StreamUnaryClientInterceptor):  # type: ignore[type-arg]
    async def intercept_stream_unary(
        self, continuation: Any, client_call_details: grpc.aio.ClientCallDetails, request_iterator: Any
    ) -> Any:
        return await self._call(continuation, client_call_details, request_iterator, unary_response=True)


class _StreamStream(CallContextClientInterceptor, grpc.aio.StreamStreamClientInterceptor):  # type: ignore[type-arg]
    async def intercept_stream_stream(
        self, continuation: Any, client_call_details: grpc.aio.ClientCallDetails, request_iterator: Any
    ) -> Any:
        return await self._call(continuation, client_call_details, request_iterator, unary_response=False)


def client_interceptors(
    settings: Settings,
    *,
    telemetry: Telemetry | None = None,
    identity_token: str | None = None,
    target: str = "",
    default_timeout_s: float | Literal["configured"] | None = "configured",
) -> list[Any]:
    """Our call-context interceptor, one object per kind (grpc.aio files each interceptor under
    ONE kind, the first base class it matches); with telemetry they also make the CLIENT spans
    (`server.address`/`server.port` from `target`) and measure the calls."""
    provider = telemetry.tracer_provider if telemetry is not None else None
    metrics = telemetry.metrics if telemetry is not None else None
    return [
        cls(
            settings.client,
            identity_token,
            provider,
            target=target,
            metrics=metrics,
            default_timeout_s=default_timeout_s,
        )
        for cls in (_UnaryUnary, _UnaryStream, _StreamUnary, _StreamStream)
    ]
