"""The HTTP listener a service may open, and the routes it serves: the one place for both (docs/design.md §11).

Each service has at most one HTTP listener, on `services.<svc>.host` and `services.<svc>.http_port`
(0: none), opened and closed by its `ServiceHost` beside the gRPC server, on the same event loop
(uvicorn serving a Starlette app). Routes today:
- `GET /metrics`: the Prometheus exposition of this service's metrics (agentmesh.metrics), by
  prometheus_client's own ASGI app (text or OpenMetrics by the Accept header, gzip when asked).
- `POST|GET /agentmesh.v1.<Service>/<Method>`: the Connect protocol (HTTP/JSON, enveloped streams,
  gRPC-Web) over the same handlers and edge as the gRPC port (agentmesh.rpc.connect), when
  `server.connect` is on: every RPC of the dispatcher, the read-only ones of the others.
- a service's own routes (`ServiceHost.add_http_routes`): provider_svc's `/v1/chat/completions`,
  `/v1/models` and `/v1/messages` (provider_svc/compat), through the same chain (agentmesh.rpc.httpedge).
- `GET /console`, `GET /console/<file>`: the web console's static files and its config.json
  (agentmesh.rpc.console), on the dispatcher's listener when `console.enabled` and Connect are on.

Rules every route here follows, and a route added later (MCP over HTTP) must follow too:
- TLS is the gRPC port's: with `tls.enabled` the listener serves HTTPS with the same certificate
  and CA, requires a client certificate when `tls.require_client_cert` does, and takes replaced files
  at the next handshake (agentmesh.rpc.tls.http_server_context); without it none in the process (in a
  mesh the sidecar terminates mTLS for both ports).
- Authentication is the gRPC edge's: a route that reads or changes data runs the edge's chain
  (agentmesh.rpc.auth: `authorization: Bearer` or `x-agentmesh-identity`) before it reads the body.
  `/metrics` is open, like the gRPC health service: it is scraped by Prometheus, carries no task,
  request, session or call id, and no data of any tenant. So is `/console`: the same files for
  everyone, no secret; the console reads data only through the Connect routes, with its user's token.
- Browsers: CORS only for the origins in `server.cors_allowed_origins` (none by default).
- The listener lives as long as the gRPC server: it stays up through the drain (so the drain shows
  in the metrics) and is closed after the gRPC server stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator, Sequence
from typing import Any

import uvicorn
from prometheus_client import CollectorRegistry, make_asgi_app
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import BaseRoute, Route

from agentmesh.config import TlsSettings
from agentmesh.rpc.tls import http_server_context

__all__ = ["HttpListener", "connect_route", "console_routes", "cors_middleware", "http_routes", "metrics_route"]

log = logging.getLogger("agentmesh.rpc.http")

METRICS_PATH = "/metrics"
_STARTUP_TIMEOUT_S = 10.0


class _AsgiEndpoint:
    """An ASGI app as a Starlette route endpoint (Starlette treats a plain function as a request
    handler, any other callable as an ASGI app)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


def metrics_route(registry: CollectorRegistry) -> Route:
    """`GET /metrics`: the registry in the Prometheus exposition format."""
    return Route(METRICS_PATH, _AsgiEndpoint(make_asgi_app(registry)), methods=["GET"], name="metrics")


def connect_route(app: Any) -> Route:
    """`/<package.Service>/<Method>`: one generated Connect ASGI application (its `path` is the service's)."""
    return Route(f"{app.path}/{{method}}", _AsgiEndpoint(app), methods=["GET", "POST"], name=app.path.lstrip("/"))


def console_routes(app: Any) -> list[Route]:
    """`/console` (a redirect to `/console/`) and `/console/<file>`: the console's ASGI app (GET, HEAD)."""
    endpoint = _AsgiEndpoint(app)
    return [
        Route("/console", endpoint, methods=["GET", "HEAD"], name="console-root"),
        Route("/console/{file:path}", endpoint, methods=["GET", "HEAD"], name="console"),
    ]


def http_routes(
    metrics_registry: CollectorRegistry | None,
    connect_apps: Sequence[Any] = (),
    service_routes: Sequence[BaseRoute] = (),
    console: Any | None = None,
) -> list[BaseRoute]:
    """Every route a service's HTTP listener serves (empty: the listener is not opened). `service_routes`
    are a service's own HTTP APIs (`ServiceHost.add_http_routes`; provider_svc's OpenAI- and
    Anthropic-compatible endpoints), which run the edge's chain through `agentmesh.rpc.httpedge`;
    `console` is the web console's ASGI app (the dispatcher's listener)."""
    routes: list[BaseRoute] = []
    if metrics_registry is not None:
        routes.append(metrics_route(metrics_registry))
    routes.extend(connect_route(app) for app in connect_apps)
    routes.extend(service_routes)
    if console is not None:
        routes.extend(console_routes(console))
    return routes


# What a browser's Connect-ES or gRPC-Web client sends and must be allowed to read.
_CORS_REQUEST_HEADERS = [
    "authorization", "content-type", "connect-protocol-version", "connect-timeout-ms", "grpc-timeout",
    "x-grpc-web", "x-user-agent", "x-request-id", "x-agentmesh-identity", "traceparent", "tracestate", "baggage",
]  # fmt: skip
_CORS_EXPOSED_HEADERS = ["grpc-status", "grpc-message", "grpc-status-details-bin", "x-request-id"]


def cors_middleware(allowed_origins: Sequence[str]) -> list[Middleware]:
    """CORS for `allowed_origins` (exact origins, or "*"); none at all when the list is empty."""
    if not allowed_origins:
        return []
    return [
        Middleware(
            CORSMiddleware,
            allow_origins=list(allowed_origins),
            allow_methods=["GET", "POST"],
            allow_headers=_CORS_REQUEST_HEADERS,
            expose_headers=_CORS_EXPOSED_HEADERS,
            max_age=600,
        )
    ]


def _tls_options(tls: TlsSettings | None) -> dict[str, Any]:
    """uvicorn's TLS option for the gRPC port's TLS settings (none when TLS is off): a server context
    that reloads replaced files at the next handshake, as the gRPC port does (agentmesh.rpc.tls)."""
    if tls is None or not tls.enabled:
        return {}
    context = http_server_context(tls)  # ConfigError naming a bad file, before anything is bound
    return {"ssl_context_factory": lambda config, default: context}


class _EmbeddedServer(uvicorn.Server):
    """uvicorn on the service's own event loop: the ServiceHost owns SIGTERM and SIGINT (its drain), so
    the server installs no signal handlers of its own; it stops when the host stops it."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _bind(address: str) -> socket.socket:
    """A bound socket for "host:port" (port 0: any free one); OSError naming the address otherwise.

    Bound here rather than by uvicorn, which exits the process when a bind fails."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not port_text.isdigit():
        raise OSError(f"not a host:port address: {address!r}")
    host = host.strip("[]") or "0.0.0.0"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not 0: asyncio sets TCP_NODELAY only on sockets whose proto says TCP, and
    # without it a keep-alive response's last small write waits ~40 ms for the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, int(port_text)))
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot bind {address} (address in use?): {exc.strerror or exc}") from None
    return sock


class HttpListener:
    """One service's HTTP listener: `await start(address)`, `await stop()`."""

    def __init__(
        self,
        name: str,
        routes: list[BaseRoute],
        *,
        graceful_shutdown_s: float = 5.0,
        middleware: Sequence[Middleware] = (),
        tls: TlsSettings | None = None,
        protocol: Any = "auto",
    ) -> None:
        self.name = name
        self.protocol = protocol
        """uvicorn's HTTP protocol: a name or a class (agentmesh.rpc.httplimits.header_timeout_protocol)."""
        self.app = Starlette(routes=routes, middleware=list(middleware))
        self.graceful_shutdown_s = graceful_shutdown_s
        self.tls = tls
        self.port = 0
        self._server: _EmbeddedServer | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self, address: str) -> int:
        """Binds `address`, serves, and returns the port once the listener accepts connections."""
        tls_options = _tls_options(self.tls)
        sock = _bind(address)
        self.port = int(sock.getsockname()[1])
        config = uvicorn.Config(
            self.app,
            log_config=None,  # the service's JSON logging stays in charge
            access_log=False,  # a scrape every few seconds is not news
            lifespan="off",
            server_header=False,
            http=self.protocol,
            timeout_graceful_shutdown=max(1, round(self.graceful_shutdown_s)),
            **tls_options,
        )
        server = _EmbeddedServer(config)
        self._server = server
        self._task = asyncio.create_task(server.serve(sockets=[sock]), name=f"{self.name}-http")
        deadline = asyncio.get_running_loop().time() + _STARTUP_TIMEOUT_S
        while not server.started:
            if self._task.done():
                sock.close()
                self._task.result()  # raises what made it fail
                raise OSError(f"{self.name}: the HTTP listener on {address} stopped during start-up")
            if asyncio.get_running_loop().time() > deadline:
                await self.stop()
                raise OSError(f"{self.name}: the HTTP listener on {address} did not start")
            await asyncio.sleep(0.005)
        log.info("%s HTTP listener on port %d", self.name, self.port, extra={"http_port": self.port})
        return self.port

    async def stop(self) -> None:
        """Stops accepting, lets requests in progress finish (within the graceful timeout), closes. Idempotent."""
        server, task = self._server, self._task
        self._server = self._task = None
        if server is None or task is None:
            return
        server.should_exit = True
        try:
            await task
        except Exception:  # the listener failing on its way out must not fail the service's stop
            log.exception("%s HTTP listener failed while stopping", self.name)
