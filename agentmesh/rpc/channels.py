"""Channels from one agentmesh service to the others: deadlines, identity, request id, tracing, retries.

Every outgoing call on these channels carries, without servicer code passing anything:
- `x-request-id`: the incoming call's, or one minted here when there is none (an edge call);
- `x-agentmesh-identity`: the token given to the channel, else the incoming call's token;
- a deadline no later than the incoming call's (`min(explicit timeout, remaining time)`), the
  configured default for edge calls, and an immediate DEADLINE_EXCEEDED (nothing sent) when the
  incoming deadline has already passed;
- W3C trace context and baggage, and a CLIENT span per call when a Telemetry is given.

Retries (gRPC's own, from the service config) are enabled for UNAVAILABLE on idempotent methods
only: retrying ExecuteTool, AppendMessage, Generate or StartTask could run a side effect twice.

These channels only ever dial our own services. Third-party HTTP APIs (provider_svc) use httpx with
their own headers; nothing here patches httpx, global propagators or global instrumentation.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable
from typing import Any, Final, Literal

import grpc
import grpc.aio
from opentelemetry import baggage, propagate, trace
from opentelemetry import context as otel_context

from agentmesh import __version__, callctx
from agentmesh.config import ClientSettings, Settings
from agentmesh.metrics import Metrics
from agentmesh.rpc.fields import retry_safe_methods
from agentmesh.rpc.tls import ReloadingCredentials, TlsFiles, channel_credentials, tls_channel_options
from agentmesh.semconv import BAGGAGE_REQUEST_ID, ERROR_TYPE, is_valid_request_id, traced_method
from agentmesh.telemetry import Telemetry
from agentmesh.v1 import (
    common_pb2,
    context_pb2,
    context_pb2_grpc,
    dispatcher_pb2,
    dispatcher_pb2_grpc,
    provider_pb2,
    provider_pb2_grpc,
    tool_pb2,
    tool_pb2_grpc,
)

__all__ = [
    "IDEMPOTENT_METHODS",
    "SERVICE_NAMES",
    "CallContextClientInterceptor",
    "ServiceClients",
    "channel_options",
    "client_interceptors",
    "create_channel",
    "server_attributes",
    "service_config",
    "wire_rounding",
]

SERVICE_NAMES: Final = ("dispatcher", "context", "tool", "provider")

IDEMPOTENT_METHODS: Final[tuple[tuple[str, str], ...]] = (
    *retry_safe_methods(
        [
            common_pb2.DESCRIPTOR,
            context_pb2.DESCRIPTOR,
            dispatcher_pb2.DESCRIPTOR,
            provider_pb2.DESCRIPTOR,
            tool_pb2.DESCRIPTOR,
        ]
    ),
    ("grpc.health.v1.Health", "Check"),
)
"""(service, method) pairs safe to retry on UNAVAILABLE: the RPCs whose `idempotency_level` is
IDEMPOTENT or NO_SIDE_EFFECTS in the contracts, and the health check."""

# gRPC ignores retry policies with more attempts than this.
_GRPC_MAX_ATTEMPTS = 5


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


def _duration(seconds: float) -> str:
    """A protobuf JSON Duration ("0.1s", "2s")."""
    return f"{seconds:.9f}".rstrip("0").rstrip(".") + "s"


def service_config(settings: Settings, idempotent_methods: Iterable[tuple[str, str]] = IDEMPOTENT_METHODS) -> str:
    """The gRPC service config JSON: load balancing, and a retry policy on idempotent methods only."""
    client = settings.client
    config: dict[str, Any] = {"loadBalancingConfig": [{client.load_balancing: {}}]}
    attempts = min(client.retry_max_attempts, _GRPC_MAX_ATTEMPTS)
    names = [{"service": service, "method": method} for service, method in idempotent_methods]
    # A policy needs maxAttempts >= 2; with 1 configured attempt there is nothing to retry.
    if names and attempts >= 2:
        config["methodConfig"] = [
            {
                "name": names,
                "retryPolicy": {
                    "maxAttempts": attempts,
                    "initialBackoff": _duration(client.retry_initial_backoff_s),
                    "maxBackoff": _duration(max(client.retry_max_backoff_s, client.retry_initial_backoff_s)),
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"],
                },
            }
        ]
    return json.dumps(config, separators=(",", ":"))


_MAX_RECONNECT_BACKOFF_MS = 4000


def channel_options(
    settings: Settings, idempotent_methods: Iterable[tuple[str, str]] = IDEMPOTENT_METHODS
) -> list[tuple[str, Any]]:
    """Channel arguments: message limits, keepalive, retries via the service config."""
    server = settings.server
    return [
        ("grpc.max_send_message_length", server.max_message_bytes),
        ("grpc.max_receive_message_length", server.max_message_bytes),
        # Pings only while calls are active: they detect a dead peer during a long call (Generate,
        # WatchTask). No pings on idle connections: a server rejects those unless it permits them.
        # Servers must accept a ping per keepalive_time_s without data (server.py allows 5 s).
        ("grpc.keepalive_time_ms", int(server.keepalive_time_s * 1000)),
        ("grpc.keepalive_timeout_ms", int(server.keepalive_timeout_s * 1000)),
        ("grpc.keepalive_permit_without_calls", 0),
        # Reconnects to a restarted service within seconds: gRPC's default backoff grows to 120 s, so
        # after a long outage a caller (a run waiting it out, issue 49) would go on failing fast long
        # after the service was back.
        ("grpc.initial_reconnect_backoff_ms", 500),
        ("grpc.max_reconnect_backoff_ms", _MAX_RECONNECT_BACKOFF_MS),
        ("grpc.enable_retries", 1),
        ("grpc.service_config", service_config(settings, idempotent_methods)),
        # Our service config is the source of truth, not one a DNS TXT record might carry.
        ("grpc.service_config_disable_resolution", 1),
    ]


# --- interceptors ----------------------------------------------------------------------------------


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

    async def _call(
        self, continuation: Any, details: grpc.aio.ClientCallDetails, request: Any, *, unary_response: bool
    ) -> Any:
        new_details, rid = self.prepare(details)
        # Local to this call's task; the outgoing baggage carries the id, also for an edge call.
        callctx.request_id_var.set(rid)
        context = baggage.set_baggage(BAGGAGE_REQUEST_ID, rid)
        method = details.method.decode() if isinstance(details.method, bytes) else str(details.method)
        if not traced_method(method) or (self._tracer is None and self._metrics is None):
            propagate.inject(new_details.metadata, context=context)
            return await continuation(new_details, request)
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
                span.set_status(trace.Status(trace.StatusCode.ERROR, f"{code}: {details or ''}"))
            span.end()

    def fail(self, exc: BaseException) -> None:
        """The call failed before grpc gave it a status (e.g. cancelled while being sent)."""
        if self.metrics is not None:
            code = grpc.StatusCode.CANCELLED if isinstance(exc, asyncio.CancelledError) else grpc.StatusCode.UNKNOWN
            self.metrics.rpc_client_call(self.service, self.method, code.value[0], time.perf_counter() - self.started)
        if self.span is not None:
            self.span.record_exception(exc)
            self.span.set_attribute(ERROR_TYPE, type(exc).__qualname__)
            self.span.set_status(trace.Status(trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
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


def create_channel(
    target: str,
    settings: Settings,
    *,
    telemetry: Telemetry | None = None,
    identity_token: str | None = None,
    credentials: grpc.ChannelCredentials | None = None,
    idempotent_methods: Iterable[tuple[str, str]] = IDEMPOTENT_METHODS,
) -> grpc.aio.Channel:
    """A channel to one of our services: mTLS with `credentials`, else with the files of `tls` when it is
    enabled (read once: `ServiceClients` reloads them), else plaintext (in a mesh, mTLS is the sidecar's
    job). Create it inside the event loop that will use it."""
    options = channel_options(settings, idempotent_methods)
    interceptors = client_interceptors(settings, telemetry=telemetry, identity_token=identity_token, target=target)
    if credentials is None and settings.tls.enabled:
        credentials = channel_credentials(TlsFiles(settings.tls).read())
    if credentials is not None:
        options = [*options, *tls_channel_options(settings.tls)]
        return grpc.aio.secure_channel(target, credentials, options=options, interceptors=interceptors)
    return grpc.aio.insecure_channel(target, options=options, interceptors=interceptors)


class ServiceClients:
    """One lazily created channel per agentmesh service, with typed stubs.

    Usage: `clients = ServiceClients(settings, telemetry=tel)`, `await clients.tool().ListTools(req)`,
    `await clients.close()` on shutdown (or `async with ServiceClients(...) as clients`).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        telemetry: Telemetry | None = None,
        identity_token: str | None = None,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        self._settings = settings
        self._telemetry = telemetry
        self._identity_token = identity_token
        self._credentials = credentials
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[str, Any] = {}
        # mTLS from files that may be replaced while we run (agentmesh.rpc.tls).
        self._tls = ReloadingCredentials(settings.tls) if credentials is None and settings.tls.enabled else None
        self._retired: set[asyncio.Task[None]] = set()

    def channel(self, service: str) -> grpc.aio.Channel:
        """The channel to `dispatcher`, `context`, `tool` or `provider`, created on first use (again
        after the TLS files changed, so the next call presents the new certificate)."""
        if service not in SERVICE_NAMES:
            raise KeyError(f"unknown service {service!r}")
        if self._tls is not None and self._tls.refresh():
            self._retire_channels()
        channel = self._channels.get(service)
        if channel is None:
            channel = create_channel(
                self._settings.services.endpoint(service).dial_target,
                self._settings,
                telemetry=self._telemetry,
                identity_token=self._identity_token,
                credentials=self._tls.credentials if self._tls is not None else self._credentials,
            )
            self._channels[service] = channel
        return channel

    def _retire_channels(self) -> None:
        """Drops the channels made with the old certificate; each closes once its calls are done."""
        old, self._channels, self._stubs = list(self._channels.values()), {}, {}
        grace = self._settings.client.default_timeout_s
        for channel in old:
            task = asyncio.get_running_loop().create_task(channel.close(grace))
            self._retired.add(task)
            task.add_done_callback(self._retired.discard)

    def _stub(self, service: str, factory: Any) -> Any:
        if self._tls is not None and self._tls.refresh():
            self._retire_channels()
        stub = self._stubs.get(service)
        if stub is None:
            stub = factory(self.channel(service))
            self._stubs[service] = stub
        return stub

    def dispatcher(self) -> dispatcher_pb2_grpc.DispatcherServiceStub:
        stub: dispatcher_pb2_grpc.DispatcherServiceStub = self._stub(
            "dispatcher", dispatcher_pb2_grpc.DispatcherServiceStub
        )
        return stub

    def context(self) -> context_pb2_grpc.ContextServiceStub:
        stub: context_pb2_grpc.ContextServiceStub = self._stub("context", context_pb2_grpc.ContextServiceStub)
        return stub

    def tool(self) -> tool_pb2_grpc.ToolServiceStub:
        stub: tool_pb2_grpc.ToolServiceStub = self._stub("tool", tool_pb2_grpc.ToolServiceStub)
        return stub

    def provider(self) -> provider_pb2_grpc.ProviderServiceStub:
        stub: provider_pb2_grpc.ProviderServiceStub = self._stub("provider", provider_pb2_grpc.ProviderServiceStub)
        return stub

    async def close(self, grace: float | None = None) -> None:
        """Closes every channel opened so far (in-flight calls get `grace` seconds)."""
        channels, self._channels, self._stubs = list(self._channels.values()), {}, {}
        for channel in channels:
            await channel.close(grace)
        for task in list(self._retired):
            task.cancel()

    async def __aenter__(self) -> ServiceClients:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
