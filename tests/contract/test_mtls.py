"""mTLS between services (issue 22, docs/design.md §9): real servers, certificates the test makes.

- a client presenting a certificate signed by the CA is served; one without a certificate, with a
  certificate of another CA, or in plaintext is refused;
- health and reflection answer in plaintext on the health port (what kubelet's probes use), and
  nothing else does there;
- replacing the certificate files is picked up without a restart, on both sides: a connection made
  after the swap is served the new server certificate, and the next call of a client presents its
  new certificate.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from cryptography import x509
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from agentmesh.authenticator import Authenticator
from agentmesh.cli.probe import run_probe
from agentmesh.config import Settings, TlsSettings
from agentmesh.rpc.channels import ServiceClients
from agentmesh.rpc.host import ServiceHost
from agentmesh.rpc.interceptors import CallInterceptor
from agentmesh.rpc.tls import TlsFiles, channel_credentials
from agentmesh.telemetry import setup_telemetry
from agentmesh.v1 import tool_pb2, tool_pb2_grpc
from tests.certs import make_ca, swap_leaf, write_leaf
from tests.conftest import RunningService
from tool_svc.server import SPEC as TOOL_SPEC

HEALTH = health_pb2.HealthCheckRequest


def _read(path: str) -> bytes:
    return Path(path).read_bytes()


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Any]:
    ca = make_ca()
    return {
        "ca": ca,
        "server": write_leaf(ca, "tool-svc", tmp_path / "server"),
        "client": write_leaf(ca, "dispatcher-svc", tmp_path / "client"),
        "dir": tmp_path,
    }


async def _tool_service(start_service: Callable[..., Awaitable[RunningService]], pki: dict[str, Any]) -> RunningService:
    return await start_service(TOOL_SPEC, {"tls": pki["server"]})


def _client_settings(svc: RunningService, make_settings: Callable[..., Settings], tls: dict[str, Any]) -> Settings:
    return make_settings({"tls": tls, "services": {"tool": {"host": "127.0.0.1", "port": svc.host.port}}})


async def test_a_client_with_a_certificate_is_served_and_others_are_refused(
    start_service: Callable[..., Awaitable[RunningService]], make_settings: Callable[..., Settings], pki: dict[str, Any]
) -> None:
    svc = await _tool_service(start_service, pki)
    settings = _client_settings(svc, make_settings, pki["client"])
    async with ServiceClients(settings) as clients:
        reply = await clients.tool().ListTools(tool_pb2.ListToolsRequest(), metadata=svc.metadata(), timeout=10)
    assert reply.tools, "a client with a certificate signed by the CA gets an answer"

    ca_pem = _read(pki["client"]["ca_file"])
    refused: dict[str, grpc.aio.Channel] = {
        "no client certificate": grpc.aio.secure_channel(svc.target, grpc.ssl_channel_credentials(ca_pem)),
        "plaintext": grpc.aio.insecure_channel(svc.target),
    }
    other = write_leaf(make_ca("another CA"), "intruder", pki["dir"] / "other")
    other_material = TlsFiles(TlsSettings.model_validate(other)).read()
    # Trusts our server (our CA) but presents a certificate our CA never signed.
    refused["certificate of another CA"] = grpc.aio.secure_channel(
        svc.target,
        grpc.ssl_channel_credentials(ca_pem, private_key=other_material.key, certificate_chain=other_material.cert),
    )
    for why, channel in refused.items():
        async with channel:
            stub = tool_pb2_grpc.ToolServiceStub(channel)  # type: ignore[no-untyped-call]
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.ListTools(tool_pb2.ListToolsRequest(), metadata=svc.metadata(), timeout=5)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE, why


async def test_health_and_reflection_answer_in_plaintext_on_the_health_port_and_nothing_else(
    start_service: Callable[..., Awaitable[RunningService]], pki: dict[str, Any], make_settings: Callable[..., Settings]
) -> None:
    svc = await _tool_service(start_service, pki)
    health_target = f"127.0.0.1:{svc.host.health_port}"
    assert svc.host.health_port not in (0, svc.host.port)
    async with grpc.aio.insecure_channel(health_target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "agentmesh.v1.ToolService"):
            reply = await health.Check(HEALTH(service=service), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        reflect = reflection_pb2_grpc.ServerReflectionStub(channel)
        names = [
            s.name
            async for r in reflect.ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")])
            )
            for s in r.list_services_response.service
        ]
        assert "grpc.health.v1.Health" in names and "agentmesh.v1.ToolService" not in names
        tools = tool_pb2_grpc.ToolServiceStub(channel)  # type: ignore[no-untyped-call]
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await tools.ListTools(tool_pb2.ListToolsRequest(), metadata=svc.metadata(), timeout=5)
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    # `agentmesh probe`: plaintext on the health port; with the certificates on the service port.
    assert (await asyncio.to_thread(run_probe, health_target))[0] == 0
    tls_settings = make_settings({"tls": pki["client"]})
    code, line = await asyncio.to_thread(run_probe, svc.target, "agentmesh.v1.ToolService", 5.0, tls_settings)
    assert code == 0, line
    code, line = await asyncio.to_thread(run_probe, svc.target, "", 2.0)
    assert code == 1 and "UNREACHABLE" in line, "plaintext on the TLS port is not an answer"


def _served_certificate_serial(port: int, client_tls: dict[str, Any]) -> int:
    """The serial of the certificate the server presents to a new connection (Python's ssl, ALPN h2)."""
    context = ssl.create_default_context(cafile=client_tls["ca_file"])
    context.load_cert_chain(client_tls["cert_file"], client_tls["key_file"])
    context.set_alpn_protocols(["h2"])
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return int(x509.load_der_x509_certificate(der).serial_number)


async def test_replaced_server_certificate_files_are_served_without_a_restart(
    start_service: Callable[..., Awaitable[RunningService]], make_settings: Callable[..., Settings], pki: dict[str, Any]
) -> None:
    svc = await _tool_service(start_service, pki)
    server = pki["server"]
    before = await asyncio.to_thread(_served_certificate_serial, svc.host.port, pki["client"])
    assert before == x509.load_pem_x509_certificate(_read(server["cert_file"])).serial_number
    new_serial = swap_leaf(pki["ca"], "tool-svc", Path(server["cert_file"]), Path(server["key_file"]))
    after = await asyncio.to_thread(_served_certificate_serial, svc.host.port, pki["client"])
    assert after == new_serial != before
    # And calls keep working through a new channel after the swap.
    async with ServiceClients(_client_settings(svc, make_settings, pki["client"])) as clients:
        await clients.tool().ListTools(tool_pb2.ListToolsRequest(), metadata=svc.metadata(), timeout=10)


class _PeerRecorder(CallInterceptor):
    """Records the common name of the client certificate of every call."""

    def __init__(self) -> None:
        self.names: list[str] = []

    async def enter(self, method: str, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        names = list(context.auth_context().get("x509_common_name") or [b"?"])
        self.names.append(names[0].decode())


@pytest.fixture
async def recording_host(
    make_settings: Callable[..., Settings], pki: dict[str, Any]
) -> AsyncIterator[tuple[ServiceHost, _PeerRecorder]]:
    settings = make_settings({"tls": pki["server"]})
    recorder = _PeerRecorder()
    host = ServiceHost(
        name="tool",
        settings=settings,
        telemetry=setup_telemetry("tool_svc", settings),
        authenticator=Authenticator(settings.auth, settings.environment),
        extra_interceptors=[recorder],
    )
    await host.start("127.0.0.1:0")
    yield host, recorder
    await host.stop(grace=0, drain_delay=0)
    await host.telemetry.aclose()


async def test_a_client_presents_its_replaced_certificate_on_the_next_call(
    recording_host: tuple[ServiceHost, _PeerRecorder], make_settings: Callable[..., Settings], pki: dict[str, Any]
) -> None:
    host, recorder = recording_host
    client_tls = {**pki["client"], "reload_check_s": 0.05}
    settings = make_settings({"tls": client_tls, "services": {"tool": {"host": "127.0.0.1", "port": host.port}}})
    async with ServiceClients(settings) as clients:

        async def check() -> None:
            await health_pb2_grpc.HealthStub(clients.channel("tool")).Check(HEALTH(), timeout=5)

        await check()
        await check()
        assert recorder.names == ["dispatcher-svc", "dispatcher-svc"]
        swap_leaf(pki["ca"], "dispatcher-svc-renewed", Path(client_tls["cert_file"]), Path(client_tls["key_file"]))
        await asyncio.sleep(0.1)
        await check()
        assert recorder.names[-1] == "dispatcher-svc-renewed", recorder.names


def test_unusable_tls_files_are_configuration_errors_naming_the_file(tmp_path: Path, pki: dict[str, Any]) -> None:
    from agentmesh.config import ConfigError

    good = pki["client"]
    cases = {
        "tls.ca_file": {**good, "ca_file": str(tmp_path / "missing.pem")},
        "tls.cert_file": {**good, "cert_file": good["key_file"]},
        "tls.key_file": {**good, "key_file": pki["server"]["key_file"]},  # a key of another certificate
    }
    for key, tls in cases.items():
        with pytest.raises(ConfigError, match=key):
            channel_credentials(TlsFiles(TlsSettings.model_validate(tls)).read())
