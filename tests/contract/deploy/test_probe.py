"""`agentmesh probe` against real gRPC servers: exit 0 only when SERVING, a typed line otherwise."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import grpc.aio
import pytest
from grpc_health.v1 import health_pb2

from agentmesh import cli
from agentmesh.cli.probe import ProbeState, probe, run_probe
from agentmesh.rpc.host import ServiceHost, ServiceSpec
from agentmesh.v1 import tool_pb2, tool_pb2_grpc

TOOL_SERVICE = tool_pb2.DESCRIPTOR.services_by_name["ToolService"].full_name


async def _setup(host: ServiceHost) -> None:
    # The generated base servicer: the probe only needs the name registered with health.
    host.add_servicer(
        TOOL_SERVICE, tool_pb2_grpc.add_ToolServiceServicer_to_server, tool_pb2_grpc.ToolServiceServicer()
    )


TOOL_SPEC = ServiceSpec(name="tool", setup=_setup)


async def probe_async(target: str, service: str = "", timeout_s: float = 2.0) -> Any:
    # The probe is synchronous (it runs in a short-lived process); keep the event loop serving.
    return await asyncio.to_thread(probe, target, service, timeout_s)


@pytest.fixture
async def bare_server() -> AsyncIterator[str]:
    """A gRPC server with no health service at all."""
    server = grpc.aio.server()
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield f"127.0.0.1:{port}"
    await server.stop(0)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_serving_service_and_server(start_service: Any) -> None:
    svc = await start_service(TOOL_SPEC)
    for service in ("", TOOL_SERVICE):
        result = await probe_async(svc.target, service)
        assert result.state is ProbeState.SERVING and result.ok
    code, line = await asyncio.to_thread(run_probe, svc.target, TOOL_SERVICE)
    assert (code, line) == (0, f"SERVING: {svc.target} service {TOOL_SERVICE}")


async def test_not_serving_while_draining(start_service: Any) -> None:
    svc = await start_service(TOOL_SPEC)
    await svc.host.health.enter_graceful_shutdown()
    result = await probe_async(svc.target, TOOL_SERVICE)
    assert result.state is ProbeState.NOT_SERVING and not result.ok
    code, line = await asyncio.to_thread(run_probe, svc.target, TOOL_SERVICE)
    assert code == 1 and line.startswith(f"NOT_SERVING: {svc.target} service {TOOL_SERVICE}")


async def test_unknown_service_name(start_service: Any) -> None:
    svc = await start_service(TOOL_SPEC)
    result = await probe_async(svc.target, "agentmesh.v1.NoSuchService")
    assert result.state is ProbeState.SERVICE_UNKNOWN
    assert result.line().startswith("SERVICE_UNKNOWN: ")


async def test_status_unknown_is_not_serving(start_service: Any) -> None:
    svc = await start_service(TOOL_SPEC)
    await svc.host.health.set(TOOL_SERVICE, health_pb2.HealthCheckResponse.UNKNOWN)
    result = await probe_async(svc.target, TOOL_SERVICE)
    assert result.state is ProbeState.UNKNOWN and not result.ok


async def test_nothing_listening() -> None:
    result = await probe_async(f"127.0.0.1:{closed_port()}", timeout_s=5)
    assert result.state is ProbeState.UNREACHABLE
    assert result.detail, "the reason gRPC gave must be kept"


async def test_server_without_health_service(bare_server: str) -> None:
    result = await probe_async(bare_server)
    assert result.state is ProbeState.NO_HEALTH_SERVICE


async def test_silent_peer_times_out() -> None:
    # A listening socket that never speaks HTTP/2: the probe must give up within its timeout.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        target = f"127.0.0.1:{listener.getsockname()[1]}"
        result = await asyncio.wait_for(probe_async(target, timeout_s=0.5), timeout=30)
    assert result.state in (ProbeState.TIMEOUT, ProbeState.UNREACHABLE)
    assert not result.ok


def test_cli_exit_codes_and_typed_message(capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    config = tmp_path / "agentmesh.yaml"
    config.write_text("auth: {mode: disabled}\n", encoding="utf-8")
    target = f"127.0.0.1:{closed_port()}"
    assert cli.main(["--config", str(config), "probe", target, "--timeout", "3"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith(f"UNREACHABLE: {target}")
    with pytest.raises(SystemExit) as exc:
        cli.main(["--config", str(config), "probe", target, "--timeout", "0"])
    assert exc.value.code == 2  # a usage error, not a failed check
    assert "must be > 0 seconds" in capsys.readouterr().err


def test_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="> 0"):
        probe("127.0.0.1:1", timeout_s=0)
