"""ListTasks and ListApprovals through the real DispatcherService (issue 27): paging while tasks are
created, who sees which tasks, bad page tokens, the waiting tasks oldest first."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from agentmesh.rpc.status import from_rpc_error
from agentmesh.v1 import common_pb2, dispatcher_pb2, dispatcher_pb2_grpc
from dispatcher_svc.listing import TaskFilter
from dispatcher_svc.pagetoken import PageCursor, PageTokens
from tests.conftest import TEST_AUTH_KEY
from tests.contract.dispatcher.conftest import MakeMesh, Mesh, answer, tool_call

D = dispatcher_pb2


def stub(mesh: Mesh) -> dispatcher_pb2_grpc.DispatcherServiceStub:
    return dispatcher_pb2_grpc.DispatcherServiceStub(mesh.dispatcher.channel)  # type: ignore[no-untyped-call]


def agent_md(mesh: Mesh, agent_id: str) -> Any:
    return mesh.dispatcher.metadata(("agent",), subject=agent_id, agent_id=agent_id, permissions=["dev:agent.ops:run"])


async def start(mesh: Mesh, n: int, md: Any, prefix: str) -> list[str]:
    s = stub(mesh)
    ids: list[str] = []
    for batch in range(0, n, 25):
        replies = await asyncio.gather(
            *(
                s.StartTask(D.StartTaskRequest(agent_id="ops", goal="g", task_id=f"{prefix}-{i:04d}"), metadata=md)
                for i in range(batch, min(n, batch + 25))
            )
        )
        ids += [r.task.task_id for r in replies]
    return ids


async def list_all(mesh: Mesh, request: D.ListTasksRequest, md: Any) -> list[str]:
    seen: list[str] = []
    while True:
        reply = await stub(mesh).ListTasks(request, metadata=md)
        seen += [t.task_id for t in reply.tasks]
        if not reply.next_page_token:
            return seen
        request.page_token = reply.next_page_token


async def invalid(call: Any, reason: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    assert from_rpc_error(caught.value).metadata.get("reason") == reason


async def test_paging_through_250_tasks_while_50_more_are_created_has_no_duplicate_or_gap(
    make_mesh: MakeMesh,
) -> None:
    # Few runs at a time: the listing is under test, not 300 runs competing for a loaded machine's CPU
    # (under CI load the test's teardown once outlived its timeout).
    mesh = await make_mesh(lambda m, t: answer("ok"), dispatcher={"max_concurrent_tasks": 4})
    md = mesh.md()
    first = await start(mesh, 250, md, "old")
    s = stub(mesh)
    request = D.ListTasksRequest(page_size=9)
    seen: list[str] = []
    keys: list[tuple[int, str]] = []
    pages = created = 0
    while True:
        # Two tasks are created while each of the first 25 pages is read.
        more = start(mesh, 2, md, f"new{pages:02d}") if created < 50 else asyncio.sleep(0)
        reply, _ = await asyncio.gather(s.ListTasks(request, metadata=md), more)
        created += 2
        pages += 1
        seen += [t.task_id for t in reply.tasks]
        keys += [(t.create_time.ToMilliseconds(), t.task_id) for t in reply.tasks]
        assert len(reply.tasks) <= 9
        if not reply.next_page_token:
            break
        request.page_token = reply.next_page_token
    assert len(seen) == len(set(seen)), "a task was listed twice"
    assert set(first) <= set(seen), f"missing: {sorted(set(first) - set(seen))[:5]}"
    assert pages >= 250 // 9
    assert keys == sorted(keys, reverse=True)  # newest first; ties by id
    # All 300 now, newest first, in the largest pages.
    everything = await list_all(mesh, D.ListTasksRequest(page_size=1000), md)
    assert len(everything) == 300 and len(set(everything)) == 300


async def test_an_agent_token_lists_only_its_own_tasks_and_an_operator_all(make_mesh: MakeMesh) -> None:
    mesh = await make_mesh(lambda m, t: answer("ok"))
    mine = await start(mesh, 3, agent_md(mesh, "billing"), "billing")
    theirs = await start(mesh, 2, mesh.md(), "alice")
    assert sorted(await list_all(mesh, D.ListTasksRequest(), agent_md(mesh, "billing"))) == sorted(mine)
    assert await list_all(mesh, D.ListTasksRequest(), agent_md(mesh, "audit")) == []
    everyone = await list_all(mesh, D.ListTasksRequest(page_size=2), mesh.md())
    assert sorted(everyone) == sorted(mine + theirs)
    # Another operator sees them all too; filters narrow.
    other = mesh.md(subject="bob")
    assert sorted(await list_all(mesh, D.ListTasksRequest(created_by="alice"), other)) == sorted(theirs)
    assert await list_all(mesh, D.ListTasksRequest(root_task_id=mine[0]), other) == [mine[0]]
    assert await list_all(mesh, D.ListTasksRequest(agent_id="nobody"), other) == []
    # A filter by another creator does not widen an agent's view.
    assert await list_all(mesh, D.ListTasksRequest(created_by="alice"), agent_md(mesh, "billing")) == []


async def test_bad_page_tokens_and_sizes_are_invalid_argument(make_mesh: MakeMesh) -> None:
    mesh = await make_mesh(lambda m, t: answer("ok"))
    md = mesh.md()
    await start(mesh, 3, md, "t")
    s = stub(mesh)
    reply = await s.ListTasks(D.ListTasksRequest(page_size=1), metadata=md)
    token = reply.next_page_token
    assert token
    await invalid(s.ListTasks(D.ListTasksRequest(page_token="garbage"), metadata=md), "page_token.malformed")
    body, _, mac = token.partition(".")
    flipped = body[:-2] + ("A" if body[-2] != "A" else "B") + body[-1]
    await invalid(s.ListTasks(D.ListTasksRequest(page_token=f"{flipped}.{mac}"), metadata=md), "page_token.signature")
    await invalid(s.ListTasks(D.ListTasksRequest(page_token=token, agent_id="ops"), metadata=md), "page_token.filter")
    expired = PageTokens(TEST_AUTH_KEY, "tasks", ttl_s=-60).issue(PageCursor(1, "x"), TaskFilter().digest())
    await invalid(s.ListTasks(D.ListTasksRequest(page_token=expired), metadata=md), "page_token.expired")
    # A token of ListTasks is not one of ListApprovals.
    await invalid(s.ListApprovals(D.ListApprovalsRequest(page_token=token), metadata=md), "page_token.malformed")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await s.ListTasks(D.ListTasksRequest(page_size=-1), metadata=md)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # page_size may change between pages (AIP-158), and > 100 reads as 100.
    rest = await s.ListTasks(D.ListTasksRequest(page_size=500, page_token=token), metadata=md)
    assert len(rest.tasks) == 2 and not rest.next_page_token


def restart_policy(messages: list[common_pb2.Message], tools: list[str]) -> common_pb2.Message:
    if not [m for m in messages if m.role == common_pb2.ROLE_TOOL]:
        return tool_call("restart", {"service": "payment-svc"}, "c1")
    return answer("done")


async def parked(mesh: Mesh, task_id: str) -> None:
    for _ in range(500):
        task = (await stub(mesh).GetTask(D.GetTaskRequest(task_id=task_id), metadata=mesh.md())).task
        if task.status == D.TASK_STATUS_WAITING_APPROVAL:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the task never parked")


async def test_list_approvals_oldest_first_with_the_visibility_of_list_tasks(make_mesh: MakeMesh) -> None:
    mesh = await make_mesh(restart_policy, {"restart": lambda a: "restarted"}, needs_approval={"restart"})
    s = stub(mesh)
    order: list[str] = []
    for i, md in enumerate((mesh.md(), agent_md(mesh, "billing"), mesh.md())):
        task_id = f"wait-{2 - i}"  # ids in the opposite order to the parking order
        await s.StartTask(D.StartTaskRequest(agent_id="ops", goal="restart", task_id=task_id), metadata=md)
        await parked(mesh, task_id)
        order.append(task_id)
        await asyncio.sleep(0.005)  # distinct wait times
    reply = await s.ListApprovals(D.ListApprovalsRequest(), metadata=mesh.md(subject="bob"))
    assert [a.task_id for a in reply.approvals] == order
    first = reply.approvals[0]
    assert first.kind == D.TASK_APPROVAL_KIND_APPROVAL and first.agent_id == "ops"
    assert first.pending_approval.plan.name == "restart" and first.created_by == "alice"
    paged: list[str] = []
    request = D.ListApprovalsRequest(page_size=1)
    while True:
        page = await s.ListApprovals(request, metadata=mesh.md())
        paged += [a.task_id for a in page.approvals]
        if not page.next_page_token:
            break
        request.page_token = page.next_page_token
    assert paged == order
    billing = await s.ListApprovals(D.ListApprovalsRequest(), metadata=agent_md(mesh, "billing"))
    assert [a.task_id for a in billing.approvals] == [order[1]]
    settlements = D.ListApprovalsRequest(kind=D.TASK_APPROVAL_KIND_SETTLEMENT)
    assert not (await s.ListApprovals(settlements, metadata=mesh.md())).approvals
