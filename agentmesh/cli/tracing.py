"""One trace and one request id per CLI command (docs/design.md §8).

`command_trace` opens the command's root span (`agentmesh run`, `agentmesh settle`, ...) and mints the
command's request id; `cli_channel` dials a service with agentmesh's call interceptors, so every call
the command makes (RunTask, a reconnecting WatchTask, ResolveApproval, the closing GetTask) carries
that request id and the root span's trace context, and gets a CLIENT span. Spans go where the
services' go: over OTLP when the OTEL_* variables say so, else into the span file the services write
(`telemetry.span_file`), when that file exists: a CLI run from elsewhere leaves no file behind.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import grpc.aio
from opentelemetry import trace

from agentmesh import callctx
from agentmesh.config import ConfigError, Settings
from agentmesh.rpc.channels import client_interceptors
from agentmesh.rpc.telemetry import OTLP
from agentmesh.rpc.tls import aio_channel
from agentmesh.semconv import ATTR_REQUEST_ID
from agentmesh.telemetry import Telemetry, setup_telemetry

__all__ = ["CLI_SERVICE_NAME", "CommandTrace", "cli_channel", "command_trace"]

CLI_SERVICE_NAME = "agentmesh-cli"


@dataclass
class CommandTrace:
    """The command's telemetry, request id and root span."""

    telemetry: Telemetry | None
    request_id: str
    span: trace.Span


@contextlib.contextmanager
def command_trace(settings: Settings, command: str) -> Iterator[CommandTrace]:
    """The root span `agentmesh <command>` around the command, current (with the request id in
    `callctx`) for everything it runs, `asyncio.run` included; exported when the command ends."""
    telemetry: Telemetry | None
    try:
        telemetry = setup_telemetry(
            CLI_SERVICE_NAME, settings, configure_logs=False, otlp=OTLP, metrics=False, create_span_file=False
        )
    except ConfigError as exc:  # a bad OTEL_* variable must not stop an operator's command
        print(f"agentmesh: tracing off: {exc}", file=sys.stderr)
        telemetry = None
    tracer = telemetry.tracer("agentmesh.cli") if telemetry is not None else trace.NoOpTracer()
    request_id = callctx.new_request_id()
    reset = callctx.request_id_var.set(request_id)
    try:
        with tracer.start_as_current_span(f"agentmesh {command}", attributes={ATTR_REQUEST_ID: request_id}) as span:
            yield CommandTrace(telemetry, request_id, span)
    finally:
        callctx.request_id_var.reset(reset)
        if telemetry is not None:
            telemetry.shutdown()


def cli_channel(target: str, settings: Settings, command: CommandTrace) -> grpc.aio.Channel:
    """A channel whose calls carry the command's request id and trace context (identity and deadline
    stay the caller's: a call given no timeout has none, an event stream lasts as long as its task)."""
    interceptors = client_interceptors(settings, telemetry=command.telemetry, target=target, default_timeout_s=None)
    # Over mTLS when `tls.enabled` (the config's, or the command's --ca/--cert/--key).
    return aio_channel(target, settings, interceptors=interceptors)
