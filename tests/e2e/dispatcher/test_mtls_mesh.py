"""The four services as processes talking over mTLS (issue 22): a task runs to SUCCEEDED with every hop
encrypted and every client certificate checked; a client without a certificate is refused; the
plaintext health ports answer the probes, and `agentmesh probe` with `--ca/--cert/--key` answers too."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import grpc
import grpc.aio
import pytest

from agentmesh.cli.demo_ops import OpsApi
from agentmesh.v1 import dispatcher_pb2, dispatcher_pb2_grpc
from tests.certs import make_ca, write_leaf
from tests.e2e.conftest import REPO
from tests.e2e.dispatcher.conftest import Mesh
from tests.e2e.dispatcher.test_crash_safety import NOTIFIER, STEPS

pytestmark = pytest.mark.e2e
D = dispatcher_pb2


def _read(path: str) -> bytes:
    return Path(path).read_bytes()


def _credentials(tls: dict[str, str]) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        Path(tls["ca_file"]).read_bytes(), Path(tls["key_file"]).read_bytes(), Path(tls["cert_file"]).read_bytes()
    )


async def test_a_task_runs_over_mtls_and_a_client_without_a_certificate_is_refused(
    mesh_env: Mesh, ops_api: OpsApi, tmp_path: Path
) -> None:
    ca = make_ca()
    # One certificate for the services (each is server and client), one for the operator's CLI.
    services_tls = write_leaf(ca, "agentmesh-svc", tmp_path / "pki")
    operator_tls = write_leaf(ca, "operator", tmp_path / "pki")
    mesh_env.env["AGENTMESH_TLS"] = json.dumps(services_tls)
    mesh_env.env["AGENTMESH_AGENTS"] = json.dumps([NOTIFIER])
    for name in ("context", "tool", "provider", "dispatcher"):
        mesh_env.start(name)

    target = mesh_env.target("dispatcher")
    async with grpc.aio.secure_channel(target, _credentials(operator_tls)) as channel:
        stub = dispatcher_pb2_grpc.DispatcherServiceStub(channel)  # type: ignore[no-untyped-call]
        request = D.RunTaskRequest(start=D.StartTaskRequest(agent_id="notifier", goal="announce the three steps"))
        events = [r.event async for r in stub.RunTask(request, metadata=mesh_env.operator_metadata(), timeout=60)]
    final = [e for e in events if e.sequence][-1]
    assert final.status == D.TASK_STATUS_SUCCEEDED, [e.message for e in events]
    assert len(ops_api.state.bodies("/notify")) == STEPS

    ca_only = grpc.ssl_channel_credentials(_read(operator_tls["ca_file"]))
    for channel in (grpc.aio.secure_channel(target, ca_only), grpc.aio.insecure_channel(target)):
        async with channel:
            stub = dispatcher_pb2_grpc.DispatcherServiceStub(channel)  # type: ignore[no-untyped-call]
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.ListAgents(D.ListAgentsRequest(), metadata=mesh_env.operator_metadata(), timeout=5)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE

    env = {k: v for k, v in mesh_env.env.items() if k != "AGENTMESH_TLS"}
    probes = {
        "health port, plaintext": [f"127.0.0.1:{mesh_env.ports['tool'] + 1000}"],
        "service port, certificates": [
            mesh_env.target("tool"), "--service", "agentmesh.v1.ToolService",
            "--ca", operator_tls["ca_file"], "--cert", operator_tls["cert_file"], "--key", operator_tls["key_file"],
        ],
    }  # fmt: skip
    for what, args in probes.items():
        result = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "agentmesh.cli", "probe", *args],
            env=env, cwd=REPO, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert result.returncode == 0 and "SERVING" in result.stdout, (what, result.stdout, result.stderr)
