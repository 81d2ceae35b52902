"""An error echoes at most a short prefix of the caller's input (issue 21): a huge value still gets
its own status (NOT_FOUND, not an oversized trailer's RESOURCE_EXHAUSTED), with a small trailer."""

from __future__ import annotations

from typing import Any

import grpc
import grpc.aio
import pytest

from agentmesh.errors import ErrorCode
from agentmesh.rpc.status import from_rpc_error
from agentmesh.v1 import dispatcher_pb2, dispatcher_pb2_grpc
from tests.contract.dispatcher.conftest import MakeMesh, answer

D = dispatcher_pb2
HUGE = "🙂" * 10_000


def _small_and_typed(error: grpc.aio.AioRpcError, status: grpc.StatusCode, code: ErrorCode, field: str) -> None:
    assert error.code() == status, (error.code(), (error.details() or "")[:200])
    trailers: Any = error.trailing_metadata() or ()
    details = [v for k, v in trailers if k == "grpc-status-details-bin"]
    assert len(details) == 1 and len(details[0]) < 1024, [len(d) for d in details]
    assert len((error.details() or "").encode()) < 512
    err = from_rpc_error(error)
    assert err.code is code
    assert err.violations and err.violations[0].path == field
    assert "details_truncated" not in err.metadata


async def test_a_huge_unknown_agent_id_is_not_found_with_a_small_trailer(make_mesh: MakeMesh) -> None:
    mesh = await make_mesh(lambda messages, tools: answer("done"))
    stub = dispatcher_pb2_grpc.DispatcherServiceStub(mesh.dispatcher.channel)  # type: ignore[no-untyped-call]
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.StartTask(D.StartTaskRequest(agent_id=HUGE, goal="x"), metadata=mesh.md())
    _small_and_typed(info.value, grpc.StatusCode.NOT_FOUND, ErrorCode.NOT_FOUND, "agent_id")
    # A prefix of the input is still echoed, so the caller recognises it.
    err = from_rpc_error(info.value)
    assert "🙂🙂🙂" in err.message and "…" in err.message
    # The streaming variant answers the same.
    with pytest.raises(grpc.aio.AioRpcError) as info:
        async for _ in stub.RunTask(
            D.RunTaskRequest(start=D.StartTaskRequest(agent_id=HUGE, goal="x")), metadata=mesh.md()
        ):
            pass
    _small_and_typed(info.value, grpc.StatusCode.NOT_FOUND, ErrorCode.NOT_FOUND, "agent_id")


async def test_a_huge_bad_task_id_is_invalid_argument_with_a_small_trailer(make_mesh: MakeMesh) -> None:
    mesh = await make_mesh(lambda messages, tools: answer("done"))
    stub = dispatcher_pb2_grpc.DispatcherServiceStub(mesh.dispatcher.channel)  # type: ignore[no-untyped-call]
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.GetTask(D.GetTaskRequest(task_id=HUGE), metadata=mesh.md())
    _small_and_typed(info.value, grpc.StatusCode.INVALID_ARGUMENT, ErrorCode.INVALID_REQUEST, "task_id")
