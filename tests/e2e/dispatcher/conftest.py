"""Multi-process fixtures: the four services as separate processes on one real Redis, the demo's
fake ops API (the tools' HTTP upstream, counting side effects), and an OTLP/gRPC trace receiver
built on opentelemetry-proto's TraceService (what Jaeger listens with)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from agentmesh.authenticator import Authenticator
from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.cli.demo_ops import OPS_URL_ENV, OpsApi, write_service_log
from agentmesh.cli.supervisor import health_status
from agentmesh.config import AuthSettings
from agentmesh.dev.localredis import LocalRedis
from agentmesh.semconv import ATTR_REQUEST_ID
from tests.e2e.conftest import AUTH_KEY, WITH_DEMO, free_ports, service_json, spawn

SERVICE_ORDER = ("context", "tool", "provider", "dispatcher")


class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    """A minimal OTLP/gRPC trace receiver."""

    def __init__(self) -> None:
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []

    async def Export(self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any) -> Any:
        self.requests.append(request)
        return trace_service_pb2.ExportTraceServiceResponse()

    def spans(self) -> list[dict[str, Any]]:
        found = []
        for request in self.requests:
            for resource_spans in request.resource_spans:
                resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        attrs = {a.key: a.value.string_value for a in span.attributes}
                        found.append(
                            {
                                "service": resource.get("service.name"),
                                "name": span.name,
                                "trace_id": span.trace_id.hex(),
                                "request_id": attrs.get(ATTR_REQUEST_ID),
                            }
                        )
        return found


@pytest.fixture
async def collector() -> AsyncIterator[tuple[Collector, int]]:
    servicer = Collector()
    server = grpc.aio.server()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield servicer, port
    await server.stop(None)


@pytest.fixture
def ops_api() -> Iterator[OpsApi]:
    with OpsApi() as api:
        yield api


@dataclass
class Mesh:
    """The services of one test, as processes."""

    env: dict[str, str]
    ports: dict[str, int]
    tmp: Path
    http_ports: dict[str, int] = field(default_factory=dict)
    """Each service's HTTP listener (its /metrics)."""
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def target(self, name: str) -> str:
        return f"127.0.0.1:{self.ports[name]}"

    def start(
        self, name: str, *, label: str = "", port: int | None = None, **extra_env: str
    ) -> subprocess.Popen[bytes]:
        """Starts `<name>_svc` (optionally as another replica on its own port) and waits until SERVING."""
        env = dict(self.env)
        env.update(extra_env)
        label = label or name
        if port is not None:
            services = json.loads(env["AGENTMESH_SERVICES"])
            services[name] = {"host": "127.0.0.1", "port": port, "http_port": 0}
            env["AGENTMESH_SERVICES"] = json.dumps(services)
        process = spawn(["-m", f"{name}_svc"], env, self.tmp / f"{label}.log")
        self.processes[label] = process
        target = f"127.0.0.1:{port or self.ports[name]}"
        if "AGENTMESH_TLS" in env:  # mTLS: probes use the plaintext health port (service port + 1000)
            target = f"127.0.0.1:{(port or self.ports[name]) + 1000}"
        deadline = time.monotonic() + 60
        while health_status(target, timeout_s=1.0) != "SERVING":
            if process.poll() is not None:
                raise RuntimeError(f"{label} exited with {process.returncode}: {self.log(label)[-2000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{label} not SERVING within 60s: {self.log(label)[-2000:]}")
            time.sleep(0.05)
        return process

    def log(self, label: str) -> str:
        return (self.tmp / f"{label}.log").read_text(errors="replace")

    def operator_metadata(self, subject: str = "alice") -> tuple[tuple[str, str], ...]:
        token = Authenticator(AuthSettings(key=AUTH_KEY), "dev").mint(subject=subject, roles=("operator",))
        return ((IDENTITY_HEADER, token),)

    def agent_metadata(self, agent_id: str, permissions: list[str], task_id: str = "") -> tuple[tuple[str, str], ...]:
        """An agent's token; with `task_id`, that task's (as the dispatcher mints it)."""
        token = Authenticator(AuthSettings(key=AUTH_KEY), "dev").mint(
            subject=agent_id, roles=("agent",), agent_id=agent_id, permissions=permissions, task_id=task_id
        )
        return ((IDENTITY_HEADER, token),)

    def stop(self, label: str, sig: int = signal.SIGTERM, timeout_s: float = 20) -> int:
        process = self.processes[label]
        if process.poll() is None:
            process.send_signal(sig)
        try:
            return process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()

    def stop_all(self) -> None:
        for label in reversed(list(self.processes)):
            self.stop(label)


@pytest.fixture
async def mesh_env(
    process_env: dict[str, str],
    tmp_path: Path,
    ops_api: OpsApi,
    collector: tuple[Collector, int],
    e2e_redis: LocalRedis,
) -> AsyncIterator[Mesh]:
    """Environment for the services with the demo overlay: a dedicated Redis, free gRPC and HTTP ports,
    the demo log, the ops API, OTLP."""
    redis = e2e_redis
    every = free_ports([*SERVICE_ORDER, *(f"{name}-http" for name in SERVICE_ORDER)])
    ports = {name: every[name] for name in SERVICE_ORDER}
    http_ports = {name: every[f"{name}-http"] for name in SERVICE_ORDER}
    logs_dir = tmp_path / "logs"
    write_service_log(logs_dir)
    env = dict(process_env)
    env.update(
        {
            "AGENTMESH_REDIS_URL": redis.url,
            "AGENTMESH_CONFIG": WITH_DEMO,
            "AGENTMESH_SERVICES": service_json(ports, http_ports),
            "AGENTMESH_TOOLS_LOGS_DIR": str(logs_dir),
            "AGENTMESH_TELEMETRY_LOG_LEVEL": "INFO",
            "AGENTMESH_SERVER_DRAIN_DELAY_S": "0",
            "AGENTMESH_SERVER_GRACE_PERIOD_S": "2",
            OPS_URL_ENV: ops_api.url,
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector[1]}",
            "OTEL_BSP_SCHEDULE_DELAY": "200",
        }
    )
    mesh = Mesh(env=env, ports=ports, tmp=tmp_path, http_ports=http_ports)
    try:
        yield mesh
    finally:
        await asyncio.to_thread(mesh.stop_all)


def kill9(process: subprocess.Popen[bytes]) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=10)
