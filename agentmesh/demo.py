"""`make demo`: start everything from a fresh clone, show it serving and answering, stop everything.

What it shows grows with the services: today, the four services come up on their ports with a
local Redis, each answers health and reflection, and the identity check refuses an anonymous
call and accepts a signed one.
"""

from __future__ import annotations

from pathlib import Path

import grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.config import Settings
from agentmesh.supervisor import SERVICES, Supervisor, health_status
from agentmesh.v1 import dispatcher_pb2, dispatcher_pb2_grpc


def list_services(target: str, timeout_s: float = 5.0) -> list[str]:
    """The services a server announces through the reflection API."""
    with grpc.insecure_channel(target) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        replies = stub.ServerReflectionInfo(iter([request]), timeout=timeout_s)
        return [svc.name for reply in replies for svc in reply.list_services_response.service]


def _call_list_agents(target: str, token: str | None) -> str:
    metadata = [(IDENTITY_HEADER, token)] if token else []
    with grpc.insecure_channel(target) as channel:
        stub = dispatcher_pb2_grpc.DispatcherServiceStub(channel)  # type: ignore[no-untyped-call]
        try:
            reply = stub.ListAgents(dispatcher_pb2.ListAgentsRequest(), metadata=tuple(metadata), timeout=5)
        except grpc.RpcError as exc:
            code = exc.code().name if isinstance(exc, grpc.Call) else "UNKNOWN"
            details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
            return f"{code}: {details}"
        return f"OK: {len(reply.agents)} agents"


def run_demo(settings: Settings, config: Path | None) -> int:
    """Runs the demo; 0 when every step behaved as shown."""
    from agentmesh.auth import Authenticator

    # The services' JSON logs would drown the demo's output; warnings and errors still show.
    supervisor = Supervisor(settings, config_file=config, extra_env={"AGENTMESH_TELEMETRY_LOG_LEVEL": "WARNING"})
    ok = True
    try:
        print("== starting redis + four services")
        supervisor.start(ready_timeout_s=60)
        print(f"redis            {supervisor.redis_url}")
        for name in SERVICES:
            target = supervisor.target(name)
            status = health_status(target)
            announced = [s for s in list_services(target) if s.startswith("agentmesh.")]
            ok &= status == "SERVING" and len(announced) == 1
            print(f"{name + '_svc':<16} {target:<18} {status:<12} reflection: {', '.join(announced)}")
        dispatcher = supervisor.target("dispatcher")
        print("== identity: an anonymous call, then a signed one")
        anonymous = _call_list_agents(dispatcher, None)
        print(f"no token      -> {anonymous}")
        token = Authenticator(settings.auth, settings.environment).mint(
            subject="demo-operator", roles=frozenset({"operator"})
        )
        signed = _call_list_agents(dispatcher, token)
        print(f"signed token  -> {signed}")
        ok &= anonymous.startswith("UNAUTHENTICATED") and not signed.startswith("UNAUTHENTICATED")
    finally:
        print("== stopping")
        codes = supervisor.stop()
        print("stopped: " + ", ".join(f"{name}_svc={code}" for name, code in codes.items()))
        ok &= all(code == 0 for code in codes.values())
    print("demo OK" if ok else "demo FAILED")
    return 0 if ok else 1
