"""The grpc.aio bootstrap every service shares: the edge, limits, health, reflection, drain.

A service's `__main__` calls `run_service(spec)`; tests build a `ServiceHost` directly on an
ephemeral port. The host owns what is the same for every service so a servicer only maps protobuf
to domain calls:
- the edge (`agentmesh.rpc.interceptors.EdgeInterceptor`) around every handler of every service:
  span, request id, load shedding and authentication before the request is decoded, then the
  error boundary (docs/design.md §11);
- health per service name (and "" for the whole server), flipped to NOT_SERVING on shutdown;
- readiness vs liveness: "" is liveness (the process answers; SERVING until shutdown, whatever
  Redis does), each service's full name is readiness: a watcher PINGs Redis every
  `server.readiness_interval_s` and holds those names NOT_SERVING while Redis does not answer,
  SERVING again once it does (deploy/k8s: readinessProbe names the service, livenessProbe none);
- reflection, so grpcurl and polyglot tools can discover the API;
- 32 MiB message limits and keepalive from configuration;
- load shedding: beyond `max_concurrent_rpcs` calls answer RESOURCE_EXHAUSTED + RetryInfo at once;
- the service's HTTP listener (`services.<svc>.http_port`, agentmesh.rpc.http: `/metrics` and the
  Connect protocol over the same handlers and edge chain, agentmesh.rpc.connect), opened after the
  gRPC server and closed after it, so a drain shows in the metrics;
- SIGTERM/SIGINT: NOT_SERVING first, then in-flight calls get `grace_period_s` to finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio
from google.protobuf import descriptor_pool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio  # type: ignore[attr-defined]
from grpc_reflection.v1alpha import reflection
from starlette.middleware import Middleware

from agentmesh.apikeys import ApiKeys, KeyAuthenticator
from agentmesh.audit import AuditLog
from agentmesh.authenticator import Authenticator
from agentmesh.config import ConfigError, Settings, load_settings
from agentmesh.errors import AgentmeshError, OverloadedError, UnavailableError
from agentmesh.metrics import Metrics
from agentmesh.process import die_with_supervisor
from agentmesh.rpc.auth import AuthInterceptor, RefusalAudit
from agentmesh.rpc.connect import ConnectEdge, ContentTypeGuard, MethodTable, connect_application
from agentmesh.rpc.console import ConsoleApp
from agentmesh.rpc.http import HttpListener, cors_middleware, http_routes
from agentmesh.rpc.httpedge import HttpEdge
from agentmesh.rpc.httplimits import BodyDeadline, HttpConcurrencyLimit, header_timeout_protocol
from agentmesh.rpc.interceptors import CallInterceptor, ChainedCallInterceptor, EdgeInterceptor
from agentmesh.rpc.status import abort
from agentmesh.rpc.telemetry import OTLP, server_interceptors
from agentmesh.rpc.tls import server_credentials
from agentmesh.store import Store, StoreMisconfiguredError
from agentmesh.telemetry import Telemetry, setup_telemetry

log = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]

_descriptor_pool = descriptor_pool.Default()
DISPATCHER_SERVICE = "agentmesh.v1.DispatcherService"
HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
# Probes must always get through, even when the server sheds load.
_UNLIMITED_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")


class ConcurrencyLimitInterceptor(CallInterceptor):
    """Sheds load with RESOURCE_EXHAUSTED + RetryInfo instead of queueing without limit.

    grpc's own `maximum_concurrent_rpcs` answers without details; this one says when to retry, and
    exempts health checks so an overloaded replica is not also marked dead.
    """

    def __init__(self, limit: int, retry_after_s: float = 0.5) -> None:
        self.limit = limit
        self.retry_after_s = retry_after_s
        self.in_flight = 0

    async def enter(self, method: str, context: Context) -> None:
        if method.startswith(_UNLIMITED_PREFIXES):
            return
        if self.in_flight >= self.limit:
            await abort(
                context,
                OverloadedError(
                    f"server is at its limit of {self.limit} concurrent calls; retry later",
                    retry_after=self.retry_after_s,
                ),
            )
        self.in_flight += 1

    def leave(self, method: str, context: Context, error: BaseException | None) -> None:
        if not method.startswith(_UNLIMITED_PREFIXES):
            self.in_flight -= 1


@dataclass
class ServiceHost:
    """One grpc.aio server with agentmesh's standard plumbing."""

    name: str
    settings: Settings
    telemetry: Telemetry
    authenticator: Authenticator
    method_roles: Mapping[str, frozenset[str]] = field(default_factory=dict)
    extra_interceptors: Sequence[CallInterceptor] = ()
    store: Store | None = None
    """The Redis store, connected and checked by run_service; tests may leave it unset."""
    server: grpc.aio.Server = field(init=False)
    health: health_aio.HealthServicer = field(init=False)
    limiter: ConcurrencyLimitInterceptor = field(init=False)
    auth: AuthInterceptor = field(init=False)
    port: int = field(init=False, default=0)
    health_port: int = field(init=False, default=0)
    """With TLS on: the plaintext port serving only health and reflection (0 otherwise)."""
    health_server: grpc.aio.Server | None = field(init=False, default=None)
    http: HttpListener | None = field(init=False, default=None)
    """The HTTP listener once started (None: `http_port` 0, or nothing to serve)."""
    chain: ChainedCallInterceptor = field(init=False)
    http_limiter: HttpConcurrencyLimit = field(init=False)
    """The HTTP listener's concurrency limits, apart from gRPC's `limiter`."""
    http_chain: ChainedCallInterceptor = field(init=False)
    """The HTTP listener's chain: as `chain`, but authentication first, then `http_limiter`."""
    """The edge's call interceptors: run by the gRPC server and by the HTTP listener's Connect edge."""
    methods: MethodTable = field(init=False, default_factory=MethodTable)
    """The servicers' method handlers, by full method name (what the Connect edge calls)."""
    service_routes: list[Any] = field(init=False, default_factory=list)
    """A service's own HTTP routes (`add_http_routes`), served by the HTTP listener beside Connect."""
    _service_names: list[str] = field(init=False, default_factory=list)
    _stopping: asyncio.Event | None = field(init=False, default=None)
    ready: bool = field(init=False, default=True)
    """Whether Redis answered the last readiness PING (the service names' health follows it)."""
    _readiness: asyncio.Task[None] | None = field(init=False, default=None)
    _draining: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        server_settings = self.settings.server
        self.limiter = ConcurrencyLimitInterceptor(server_settings.max_concurrent_rpcs)
        # Calls refused for their role go to the audit stream (docs/design.md §9), when there is one.
        refusals = RefusalAudit(AuditLog(self.store, self.settings.audit)) if self.store is not None else None
        if self.store is not None and self.authenticator.api_keys is None:
            # `agentmesh keys` as bearer tokens (§9)
            self.authenticator.api_keys = KeyAuthenticator(ApiKeys(self.store), self.settings.auth.api_key_cache_s)
        self.auth = AuthInterceptor(self.authenticator, self.method_roles, refusals=refusals)
        chain = self.chain = ChainedCallInterceptor(
            [
                *server_interceptors(self.telemetry),
                self.limiter,
                self.auth,
                *self.extra_interceptors,
            ]
        )
        # The HTTP listener's chain: its own limiter, after authentication (agentmesh/rpc/httplimits.py).
        self.http_limiter = HttpConcurrencyLimit(
            server_settings.http_max_concurrent, server_settings.http_max_per_identity
        )
        self.http_chain = ChainedCallInterceptor(
            [*server_interceptors(self.telemetry), self.auth, self.http_limiter, *self.extra_interceptors]
        )
        options = [
            ("grpc.max_send_message_length", server_settings.max_message_bytes),
            ("grpc.max_receive_message_length", server_settings.max_message_bytes),
            ("grpc.keepalive_time_ms", int(server_settings.keepalive_time_s * 1000)),
            ("grpc.keepalive_timeout_ms", int(server_settings.keepalive_timeout_s * 1000)),
            ("grpc.keepalive_permit_without_calls", 1),
            # Clients in a mesh ping; accept pings as often as our own keepalive interval.
            ("grpc.http2.min_ping_interval_without_data_ms", 5000),
            ("grpc.http2.max_pings_without_data", 0),
            # grpc sets SO_REUSEPORT by default on Linux: a second copy started on a busy port would bind it
            # too and silently take half the connections. Without it the second start fails naming the port.
            ("grpc.so_reuseport", 0),
        ]
        # grpc's own limit stays as a backstop above ours (health checks are not counted by ours).
        # Every handler (health and reflection included) runs inside the one edge interceptor.
        self.server = grpc.aio.server(
            interceptors=[EdgeInterceptor(chain)],
            options=options,
            maximum_concurrent_rpcs=server_settings.max_concurrent_rpcs + 16,
        )
        self.health = health_aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        if self.settings.tls.enabled or self.settings.server.health_port:
            # Probes cannot present a client certificate: health and reflection only, in plaintext, on a
            # port of their own, answered by the same servicer (one readiness) through the same edge.
            # Also without TLS when a port is configured, so manifests probe one port either way.
            self.health_server = grpc.aio.server(
                interceptors=[EdgeInterceptor(ChainedCallInterceptor([*server_interceptors(self.telemetry)]))],
                options=options,
            )
            health_pb2_grpc.add_HealthServicer_to_server(self.health, self.health_server)

    @property
    def metrics(self) -> Metrics:
        """The service's instruments, for its domain objects (no-op ones when metrics are off)."""
        return self.telemetry.metrics

    @property
    def http_port(self) -> int:
        """The HTTP listener's port, 0 when there is none."""
        return self.http.port if self.http is not None else 0

    def add_servicer(
        self, full_service_name: str, add_to_server: Callable[[Any, grpc.aio.Server], None], servicer: Any
    ) -> None:
        """Registers a servicer (`add_XServicer_to_server`) under its full proto service name."""
        add_to_server(servicer, self.server)
        add_to_server(servicer, self.methods)  # type: ignore[arg-type]  # the same handlers, for the HTTP listener's Connect edge
        self._service_names.append(full_service_name)

    def http_edge(self) -> HttpEdge:
        """The edge's chain for a service's own HTTP routes (`agentmesh.rpc.httpedge`): run by each route
        before it reads its body."""
        return HttpEdge(self.http_chain)

    def add_http_routes(self, routes: Sequence[Any]) -> None:
        """Adds a service's own HTTP routes (Starlette routes) to its HTTP listener (`http_edge` for them)."""
        self.service_routes.extend(routes)

    async def start(self, address: str | None = None, http_address: str | None = None) -> int:
        """Binds (default: the service's configured addresses), starts, marks every service SERVING.

        `http_address` ("host:port", port 0 for any) overrides `services.<svc>.http_port` for the HTTP
        listener, which opens only when it has a route to serve (`/metrics` needs metrics on)."""
        endpoint = self.settings.services.endpoint(self.name)
        bind = address or endpoint.bind_address
        reflection.enable_server_reflection(
            [*self._service_names, HEALTH_SERVICE, reflection.SERVICE_NAME], self.server
        )
        tls = self.settings.tls
        self.port = _bind(
            self.name, bind, lambda: self.server.add_secure_port(bind, server_credentials(tls)) if tls.enabled else
            self.server.add_insecure_port(bind),
        )  # fmt: skip
        if self.health_server is not None:
            health_bind = self._health_bind(bind)
            reflection.enable_server_reflection([HEALTH_SERVICE, reflection.SERVICE_NAME], self.health_server)
            self.health_port = _bind(self.name, health_bind, lambda: self._health_insecure_port(health_bind))
            await self.health_server.start()
        await self.server.start()
        http_bind = http_address or endpoint.http_bind_address
        connect_apps = self._connect_apps() if http_bind else []
        routes = http_routes(
            self.telemetry.meter.registry,
            connect_apps,
            self.service_routes,
            self._console() if connect_apps else None,
        )
        if http_bind and routes:
            listener = HttpListener(
                self.name,
                routes,
                graceful_shutdown_s=self.settings.server.grace_period_s,
                middleware=[
                    Middleware(
                        BodyDeadline,
                        grace_s=self.settings.server.http_body_grace_s,
                        min_rate=self.settings.server.http_min_body_rate,
                    ),
                    *cors_middleware(self.settings.server.cors_allowed_origins),
                ],
                tls=self.settings.tls,
                protocol=header_timeout_protocol(self.settings.server.http_header_timeout_s),
            )
            try:
                await listener.start(http_bind)
            except OSError as exc:
                await self.server.stop(None)
                raise OSError(f"{self.name}: HTTP listener: {exc}") from None
            except ConfigError:  # a TLS file the listener cannot use
                await self.server.stop(None)
                raise
            self.http = listener
        elif http_bind:
            log.info("%s: no HTTP route to serve (metrics and server.connect are off): no HTTP listener", self.name)
        for service in ["", *self._service_names]:
            await self.health.set(service, health_pb2.HealthCheckResponse.SERVING)
        if self.store is not None and self._readiness is None:
            self._readiness = asyncio.create_task(self._watch_readiness(self.store), name=f"{self.name}-readiness")
        log.info(
            "%s serving on port %d%s", self.name, self.port,
            f" (mTLS; health in plaintext on {self.health_port})" if self.health_server is not None else "",
            extra={"port": self.port},
        )  # fmt: skip
        return self.port

    def _connect_apps(self) -> list[Any]:
        """The Connect applications of the registered services (none when `server.connect` is off)."""
        if not self.settings.server.connect:
            return []
        edge = ConnectEdge(self.http_chain)
        apps = []
        for name in self._service_names:
            if not name.startswith("agentmesh.v1."):  # a test's own servicer: no generated Connect code
                continue
            service = _descriptor_pool.FindServiceByName(name)
            app = connect_application(
                service, self.methods.handlers, edge, read_max_bytes=self.settings.server.max_message_bytes
            )
            apps.append(_Guarded(ContentTypeGuard(app, lambda: self.port), app.path))
        return apps

    def _console(self) -> ConsoleApp | None:
        """The web console, on the dispatcher's listener (the Connect edge it calls is there)."""
        if not self.settings.console.enabled or DISPATCHER_SERVICE not in self._service_names:
            return None
        return ConsoleApp(self.settings)

    def _health_insecure_port(self, address: str) -> int:
        assert self.health_server is not None
        return self.health_server.add_insecure_port(address)

    def _health_bind(self, bind: str) -> str:
        """The health port's address: `server.health_port`, else the service port + 1000 (0 stays 0)."""
        host, _, port_text = bind.rpartition(":")
        configured = self.settings.server.health_port
        port = int(port_text) if port_text.isdigit() else 0
        health = configured or (port + 1000 if port else 0)
        return f"{host}:{health}"

    async def _watch_readiness(self, store: Store) -> None:
        """PINGs Redis every `server.readiness_interval_s`; the service names follow the answer.

        The ping's timeout is the interval (at least 1 s), at most `redis.socket_timeout_s`, so a
        frozen Redis reads as down without the watcher ever falling behind by more than that.
        """
        interval = self.settings.server.readiness_interval_s
        timeout = min(max(interval, 1.0), self.settings.redis.socket_timeout_s)
        while not self._draining:
            await asyncio.sleep(interval)
            try:
                await store.ping(timeout_s=timeout)
                ready, reason = True, ""
            except AgentmeshError as exc:  # UnavailableError; StoreMisconfiguredError (credentials)
                ready, reason = False, exc.message
            except Exception as exc:  # never let the watcher die and freeze the last status
                ready, reason = False, f"{type(exc).__name__}: {exc}"
            if ready != self.ready and not self._draining:
                await self._set_readiness(ready, reason)

    async def _set_readiness(self, ready: bool, reason: str = "") -> None:
        self.ready = ready
        status = health_pb2.HealthCheckResponse.SERVING if ready else health_pb2.HealthCheckResponse.NOT_SERVING
        # "" is liveness and keeps its status: a Redis outage is not cured by restarting this process.
        for service in self._service_names:
            await self.health.set(service, status)
        if ready:
            log.warning("%s ready again: redis answers", self.name)
        else:
            log.warning("%s not ready: %s", self.name, reason, extra={"reason": reason})

    async def _stop_readiness(self) -> None:
        self._draining = True
        task, self._readiness = self._readiness, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def stop(self, grace: float | None = None, drain_delay: float | None = None) -> None:
        """NOT_SERVING first so balancers stop sending, then drain in-flight calls within grace.

        Between the two, the server keeps accepting calls for `drain_delay_s`: a balancer that has
        not yet seen NOT_SERVING still gets answers, and health checks report NOT_SERVING rather
        than a refused connection.
        """
        grace_s = self.settings.server.grace_period_s if grace is None else grace
        delay_s = self.settings.server.drain_delay_s if drain_delay is None else drain_delay
        log.info("%s draining (delay %.1fs, grace %.1fs)", self.name, delay_s, grace_s)
        # The readiness watcher stops first: nothing may set SERVING again during the drain.
        await self._stop_readiness()
        await self.health.enter_graceful_shutdown()
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        await self.server.stop(grace_s)
        if self.health_server is not None:
            await self.health_server.stop(0)
        await self._stop_http()
        if self.auth.refusals is not None:
            await self.auth.refusals.aclose()
        log.info("%s stopped", self.name)

    async def _stop_http(self) -> None:
        listener, self.http = self.http, None
        if listener is not None:
            await listener.stop()

    async def serve_until_signal(self) -> None:
        """Serves until SIGTERM or SIGINT, then stops gracefully."""
        loop = asyncio.get_running_loop()
        stopping = asyncio.Event()
        self._stopping = stopping
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopping.set)
        waiter = asyncio.create_task(self.server.wait_for_termination())
        signalled = asyncio.create_task(stopping.wait())
        done, _ = await asyncio.wait({waiter, signalled}, return_when=asyncio.FIRST_COMPLETED)
        if signalled in done:
            await self.stop()
        await self._stop_readiness()  # also when the server ended without a signal
        await self._stop_http()
        for task in (waiter, signalled):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


@dataclass(frozen=True)
class _Guarded:
    """A guarded Connect application with the `path` its route is mounted at."""

    app: Any
    path: str

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


def _bind(name: str, address: str, add_port: Callable[[], int]) -> int:
    try:
        port = add_port()
    except RuntimeError:  # grpc's way of saying the address is taken or invalid (its text adds nothing)
        port_text = address.rpartition(":")[2]
        raise OSError(
            f"{name}: cannot bind {address}: port {port_text} is in use (another copy running?) "
            "or the address is not this machine's"
        ) from None
    if port == 0:
        raise OSError(f"{name}: cannot bind {address}")
    return port


Setup = Callable[[ServiceHost], Awaitable[Callable[[], Awaitable[None]] | None]]
"""Registers a service's servicers on the host; may return an async cleanup to run after stop."""


@dataclass(frozen=True)
class ServiceSpec:
    """What distinguishes one service process from another."""

    name: str
    """Configuration key and log name: dispatcher, context, tool or provider."""
    setup: Setup
    method_roles: Mapping[str, frozenset[str]] = field(default_factory=dict)


async def _serve(spec: ServiceSpec, settings: Settings) -> None:
    telemetry = setup_telemetry(f"{spec.name}_svc", settings, otlp=OTLP)
    store: Store | None = None
    try:
        # Refuse to start on an unreachable or evicting Redis rather than fail on the first call.
        store = await Store.connect(settings.redis, settings.environment, metrics=telemetry.metrics)
        host = ServiceHost(
            name=spec.name,
            settings=settings,
            telemetry=telemetry,
            authenticator=Authenticator(settings.auth, settings.environment),
            method_roles=spec.method_roles,
            store=store,
        )
        cleanup = await spec.setup(host)
        freeze_startup_heap()
        await host.start()
        try:
            await host.serve_until_signal()
        finally:
            if cleanup is not None:
                await cleanup()
    finally:
        if store is not None:
            await store.close()
        await telemetry.aclose()


def freeze_startup_heap() -> None:
    """Moves every object alive now (modules, classes, descriptors, configuration: ~130k objects) out of
    the cyclic GC's reach (`gc.freeze`), after one collection of start-up garbage.

    They live as long as the process, yet each full collection walked them all: ~0.1 s of CPU in each
    service every few hundred tasks (issue 45). Only a service process does this (`run_service`), before
    it accepts calls; a test process that builds a ServiceHost keeps its usual GC."""
    gc.collect()
    gc.freeze()


def run_service(spec: ServiceSpec, argv: Sequence[str] | None = None) -> int:
    """Entry point of `python -m <svc> [config.yaml [overlay.yaml ...]]`: exit 2 with a clear message on
    bad configuration."""
    die_with_supervisor()
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        # The files (arguments, else $AGENTMESH_CONFIG, else ./agentmesh.yaml) add to the packaged defaults.
        settings = load_settings(args or None, defaults=True)
    except ConfigError as exc:
        print(f"{spec.name}_svc: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(_serve(spec, settings))
    except (ConfigError, StoreMisconfiguredError) as exc:
        print(f"{spec.name}_svc: {exc}", file=sys.stderr)
        return 2
    except (UnavailableError, OSError) as exc:
        print(f"{spec.name}_svc: {exc}", file=sys.stderr)
        return 1
    return 0
