"""Capability routing on the real services (issue 44): the dispatcher reads provider_svc's ListModels with
its own token, skips the carrier whose model cannot be called, and the task runs on the other."""

from __future__ import annotations

from pathlib import Path

from agentmesh.authenticator import Authenticator
from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.v1 import dispatcher_pb2, dispatcher_pb2_grpc
from tests.contract.stack import Stack

D = dispatcher_pb2

AGENTS = {
    "agents": [
        # The smaller id, but its model's backend has no API key: unavailable in ListModels.
        {"id": "calc-a", "model": "cloud/gpt-x", "capabilities": ["math"], "permissions": ["*:*:*"]},
        {"id": "calc-b", "model": "scripted/smoke", "tools": ["calculator"], "capabilities": ["math"],
         "permissions": ["*:*:*"], "max_steps": 4},
    ],
    "providers": {
        "default_model": "scripted/smoke",
        "backends": [
            {"name": "scripted", "type": "scripted",
             "models": [{"name": "smoke", "policy": "tests.contract.stack:policy"}]},
            {"name": "cloud", "type": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key": "",
             "models": [{"name": "gpt-x"}]},
        ],
    },
}  # fmt: skip


async def test_a_capability_runs_on_the_carrier_whose_model_is_available(redis_url: str, tmp_path: Path) -> None:
    async with Stack(redis_url, tmp_path, AGENTS) as stack:
        assert stack.channel is not None
        token = Authenticator(stack.hosts["dispatcher"][0].settings.auth, "dev").mint(
            subject="alice", roles=("operator",)
        )
        stub = dispatcher_pb2_grpc.DispatcherServiceStub(stack.channel)  # type: ignore[no-untyped-call]
        start = D.StartTaskRequest(capability="math", goal="compute 6*7 please")
        call = stub.RunTask(D.RunTaskRequest(start=start), metadata=((IDENTITY_HEADER, token),), timeout=60)
        events = [reply.event async for reply in call if reply.event.sequence]
    assert events[-1].status == D.TASK_STATUS_SUCCEEDED, events[-1]
    created = events[0]
    assert created.attributes["agent_id"] == "calc-b"
    assert created.attributes["capability"] == "math"
    assert created.attributes["routed_models"] == "checked"
    assert created.attributes["routed_healthy"] == "1"
