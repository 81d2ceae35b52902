"""Session-id squat (issue 39), through the four services: any agent token could CreateSession(X), and a
later StartTask(task_id=X) was accepted, then FAILED when its run met the squatted session. Now that
StartTask is refused at once, FAILED_PRECONDITION naming the field task_id; another id runs."""

from __future__ import annotations

from pathlib import Path

import grpc
import grpc.aio
import pytest

from agentmesh.authenticator import Authenticator
from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.rpc.status import from_rpc_error
from agentmesh.v1 import context_pb2, context_pb2_grpc, dispatcher_pb2, dispatcher_pb2_grpc
from tests.contract.stack import AGENT, Stack

D = dispatcher_pb2


async def test_a_squatted_session_id_is_refused_as_a_task_id(redis_url: str, tmp_path: Path) -> None:
    async with Stack(redis_url, tmp_path) as stack:
        assert stack.channel is not None
        auth = Authenticator(stack.hosts["dispatcher"][0].settings.auth, "dev")
        mallory = ((IDENTITY_HEADER, auth.mint(subject="mallory", roles=("agent",), agent_id=AGENT)),)
        alice = ((IDENTITY_HEADER, auth.mint(subject="alice", roles=("operator",))),)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.hosts['context'][0].port}") as channel:
            context = context_pb2_grpc.ContextServiceStub(channel)  # type: ignore[no-untyped-call]
            squat = context_pb2.CreateSessionRequest(session_id="deploy-42", agent_id=AGENT, goal="squat")
            await context.CreateSession(squat, metadata=mallory)

        stub = dispatcher_pb2_grpc.DispatcherServiceStub(stack.channel)  # type: ignore[no-untyped-call]
        start = D.StartTaskRequest(agent_id=AGENT, goal="compute 2 + 2", task_id="deploy-42")
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.StartTask(start, metadata=alice, timeout=10)
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        err = from_rpc_error(info.value)
        assert err.metadata["field"] == "task_id" and "deploy-42" in err.message
        get = D.GetTaskRequest(task_id="deploy-42")
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await stub.GetTask(get, metadata=alice, timeout=10)
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND  # nothing was created

        events = await stack.run("compute 2 + 2", task_id="deploy-43")
        assert [e.status for e in events if e.sequence][-1] == D.TASK_STATUS_SUCCEEDED
