"""WatchTask through real gRPC follows a task that FAILED and was resumed by StartTask to its real end."""

from __future__ import annotations

import asyncio

from agentmesh.v1 import common_pb2, dispatcher_pb2, dispatcher_pb2_grpc
from tests.contract.dispatcher.conftest import MakeMesh, Mesh, answer, tool_call

D = dispatcher_pb2


class Flaky:
    """A model that breaks (the provider answers an error) until `broken` is cleared."""

    def __init__(self) -> None:
        self.broken = True

    def __call__(self, messages: list[common_pb2.Message], tools: list[str]) -> common_pb2.Message:
        results = [m for m in messages if m.role == common_pb2.ROLE_TOOL]
        if not results:
            return tool_call("calc", {"a": 20, "b": 22}, "c1")
        if self.broken:
            raise RuntimeError("the model backend broke")
        return answer(f"the answer is {results[-1].content}")


def stub(mesh: Mesh) -> dispatcher_pb2_grpc.DispatcherServiceStub:
    return dispatcher_pb2_grpc.DispatcherServiceStub(mesh.dispatcher.channel)  # type: ignore[no-untyped-call]


async def watch(mesh: Mesh, task_id: str, after: int = 0, deadline_s: float = 20) -> list[D.TaskEvent]:
    call = stub(mesh).WatchTask(
        D.WatchTaskRequest(task_id=task_id, after_sequence=after), metadata=mesh.md(), timeout=deadline_s
    )
    return [r.event async for r in call if r.event.sequence]


def statuses(events: list[D.TaskEvent]) -> list[str]:
    return [D.TaskStatus.Name(e.status) for e in events if e.kind == D.TASK_EVENT_KIND_STATUS]


async def failed_task(mesh: Mesh) -> tuple[str, list[D.TaskEvent]]:
    task = (await stub(mesh).StartTask(D.StartTaskRequest(agent_id="ops", goal="add"), metadata=mesh.md())).task
    events = await watch(mesh, task.task_id)
    assert events[-1].status == D.TASK_STATUS_FAILED
    return task.task_id, events


async def test_one_watch_from_zero_reads_fail_resume_succeed_to_the_end(make_mesh: MakeMesh) -> None:
    model = Flaky()
    mesh = await make_mesh(model, {"calc": lambda a: str(a["a"] + a["b"])})
    task_id, failed = await failed_task(mesh)
    model.broken = False
    resumed = await stub(mesh).StartTask(
        D.StartTaskRequest(agent_id="ops", goal="add", task_id=task_id), metadata=mesh.md()
    )
    assert resumed.task.task_id == task_id
    rest = await watch(mesh, task_id, after=failed[-1].sequence)
    assert rest[-1].status == D.TASK_STATUS_SUCCEEDED
    everything = await watch(mesh, task_id)
    assert [e.sequence for e in everything] == list(range(1, len(failed) + len(rest) + 1))
    assert [e.SerializeToString(deterministic=True) for e in everything] == [
        e.SerializeToString(deterministic=True) for e in failed + rest
    ]
    assert statuses(everything) == [
        "TASK_STATUS_PENDING", "TASK_STATUS_RUNNING", "TASK_STATUS_FAILED",
        "TASK_STATUS_PENDING", "TASK_STATUS_RUNNING", "TASK_STATUS_SUCCEEDED",
    ]  # fmt: skip
    task = (await stub(mesh).GetTask(D.GetTaskRequest(task_id=task_id), metadata=mesh.md())).task
    assert task.status == D.TASK_STATUS_SUCCEEDED and task.answer == "the answer is 42"
    assert task.last_sequence == everything[-1].sequence
    assert mesh.tools.runs["calc"] == 1  # the resumed run replayed the call, it did not repeat it


async def test_a_watch_of_a_failed_task_not_resumed_ends_at_once(make_mesh: MakeMesh) -> None:
    mesh = await make_mesh(Flaky(), {"calc": lambda a: str(a["a"] + a["b"])})
    task_id, failed = await failed_task(mesh)
    started = asyncio.get_running_loop().time()
    again = await watch(mesh, task_id, deadline_s=5)
    assert [e.sequence for e in again] == [e.sequence for e in failed]
    assert again[-1].status == D.TASK_STATUS_FAILED
    assert await watch(mesh, task_id, after=failed[-1].sequence, deadline_s=5) == []
    # Both ended by themselves, without waiting for a heartbeat's status check (0.2 s) or the deadline.
    assert asyncio.get_running_loop().time() - started < 2
