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
from collections.abc import Iterable
from typing import Any, Final

import grpc
import grpc.aio

from agentmesh.config import Settings
from agentmesh.rpc.client_context import (
    CallContextClientInterceptor,
    client_interceptors,
    server_attributes,
    wire_rounding,
)
from agentmesh.rpc.fields import retry_safe_methods
from agentmesh.rpc.tls import ReloadingCredentials, TlsFiles, channel_credentials, tls_channel_options
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
    Every call goes through the channel's interceptors (the call context, in grpc.aio's interceptor task).
    Issue 45 tried unary-unary calls in the caller's own task (a `DirectChannel`, 10-50 us of client CPU
    a call) and dropped it: cancelling the caller then cancelled the RPC itself, so a cancelled task tore
    down a tool call already under way upstream (tests/e2e/dispatcher/test_workflow_policies.py).
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
            target = self._settings.services.endpoint(service).dial_target
            channel = create_channel(
                target,
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
