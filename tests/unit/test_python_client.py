"""agentmesh_client (clients/python) without a network: its errors read exactly what the servers'
status packing (agentmesh.rpc.status) writes, and a Run resumes broken streams with no gap or repeat.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import grpc
import pytest

from agentmesh.errors import (
    AgentmeshError,
    ErrorCode,
    InvalidRequestError,
    NotFoundError,
    PermissionDeniedError,
    Violation,
)
from agentmesh.rpc.status import to_detail, to_rpc_status
from agentmesh_client import Client, StatusChanged, TaskStatus, errors
from agentmesh_client._v1 import common_pb2
from agentmesh_client._v1 import dispatcher_pb2 as D
from agentmesh_client.events import ApprovalRequired, Incident, ToolResult, UnknownEvent, to_event


class FakeRpcError(grpc.RpcError):
    """What a stub raises: a call's code, details and trailers."""

    def __init__(self, code: grpc.StatusCode, details: str = "", trailers: tuple[Any, ...] = ()) -> None:
        self._code, self._details, self._trailers = code, details, trailers

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple[Any, ...]:
        return self._trailers


def raised_by_server(err: AgentmeshError) -> FakeRpcError:
    status = to_rpc_status(err)
    return FakeRpcError(grpc.StatusCode(next(c for c in grpc.StatusCode if c.value[0] == status.code)), status.message,
                        (("grpc-status-details-bin", status.SerializeToString()),))  # fmt: skip


@pytest.mark.parametrize(
    ("err", "kind"),
    [
        (NotFoundError("agent x is not configured"), errors.NotFound),
        (PermissionDeniedError("dev:agent.x:run"), errors.PermissionDenied),
        (InvalidRequestError("goal", "must not be empty"), errors.InvalidArgument),
        (AgentmeshError(ErrorCode.RATE_LIMITED, "slow down", retry_after=2.5), errors.ResourceExhausted),
        (AgentmeshError(ErrorCode.BUDGET_EXHAUSTED, "out of tokens"), errors.FailedPrecondition),
        (AgentmeshError(ErrorCode.UNAUTHENTICATED, "bad token"), errors.Unauthenticated),
    ],
)
def test_a_servers_status_becomes_the_typed_error_with_its_error_detail(
    err: AgentmeshError, kind: type[errors.AgentmeshError]
) -> None:
    typed = errors.from_rpc_error(raised_by_server(err), "rid-1")
    assert type(typed) is kind and isinstance(typed, errors.AgentmeshError)
    assert typed.code == kind.grpc_code
    assert (typed.reason, typed.error_class) == (err.code.name, err.error_class.name)
    assert typed.detail == to_detail(err)  # our ErrorDetail, bit for bit
    assert (typed.message, typed.request_id, typed.retryable) == (err.message, "rid-1", err.retryable)
    assert typed.retry_after == err.retry_after
    assert typed.error_info is not None and typed.error_info.reason == err.code.name
    assert [v.path for v in typed.violations] == [v.path for v in err.violations]


def test_a_status_without_agentmesh_details_is_still_typed() -> None:
    bare = errors.from_rpc_error(FakeRpcError(grpc.StatusCode.UNAVAILABLE, "connection refused"))
    assert isinstance(bare, errors.Unavailable) and bare.message == "connection refused"
    assert (bare.reason, bare.error_class, bare.detail, bare.retryable) == ("", "", None, True)
    garbage = errors.from_rpc_error(
        FakeRpcError(grpc.StatusCode.INTERNAL, "", (("grpc-status-details-bin", b"\xff\x00not a status"),))
    )
    assert isinstance(garbage, errors.Internal) and garbage.message == "INTERNAL" and garbage.detail is None
    odd = errors.from_rpc_error(FakeRpcError(grpc.StatusCode.DATA_LOSS, "lost"))
    assert isinstance(odd, errors.DataLoss)
    plain = errors.from_rpc_error(grpc.RpcError())  # no Call methods at all
    assert isinstance(plain, errors.Unknown)


def test_an_error_info_alone_names_the_reason_and_class() -> None:
    """A non-Python agentmesh peer may send the standard details only (no ErrorDetail)."""
    status = to_rpc_status(NotFoundError("gone"))
    del status.details[-1]  # our ErrorDetail is the last detail
    typed = errors.from_rpc_error(
        FakeRpcError(grpc.StatusCode.NOT_FOUND, "gone", (("grpc-status-details-bin", status.SerializeToString()),))
    )
    assert (typed.reason, typed.error_class, typed.detail, typed.message) == ("NOT_FOUND", "ENGINEERING", None, "gone")


def event(seq: int, kind: Any = D.TASK_EVENT_KIND_STEP_STARTED, status: Any = D.TASK_STATUS_RUNNING) -> Any:
    return D.TaskEvent(task_id="t-1", sequence=seq, kind=kind, status=status, step=1, message=f"event {seq}")


END = D.TASK_EVENT_KIND_STATUS, D.TASK_STATUS_SUCCEEDED


@dataclass
class Stream:
    """A fake server stream: events, then (optionally) an error; records whether it was cancelled."""

    replies: list[Any]
    error: grpc.RpcError | None = None
    cancelled: bool = False

    def __iter__(self) -> Iterator[Any]:
        yield from self.replies
        if self.error is not None:
            raise self.error

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class FakeStub:
    """RunTask/WatchTask answered from a script of streams; records every request and its metadata."""

    streams: list[Stream]
    calls: list[tuple[str, Any, dict[str, str], float | None]] = field(default_factory=list)

    def _next(self, name: str, request: Any, metadata: Any, timeout: float | None) -> Stream:
        self.calls.append((name, request, dict(metadata), timeout))
        return self.streams.pop(0)

    def RunTask(self, request: Any, *, metadata: Any, timeout: float | None) -> Stream:
        return self._next("RunTask", request, metadata, timeout)

    def WatchTask(self, request: Any, *, metadata: Any, timeout: float | None) -> Stream:
        return self._next("WatchTask", request, metadata, timeout)


def client_with(stub: FakeStub, **kwargs: Any) -> Client:
    client = Client("127.0.0.1:1", token="tok", sleep=lambda s: None, **kwargs)
    client._stub = stub  # type: ignore[assignment]
    return client


def replies(kind: str, *events: Any) -> list[Any]:
    reply = D.RunTaskResponse if kind == "run" else D.WatchTaskResponse
    return [reply(event=e) for e in events]


UNAVAILABLE = FakeRpcError(grpc.StatusCode.UNAVAILABLE, "Socket closed")


def test_a_broken_stream_resumes_after_the_last_event_and_skips_replays_and_heartbeats() -> None:
    heartbeat = D.TaskEvent(task_id="t-1", kind=D.TASK_EVENT_KIND_HEARTBEAT)
    stub = FakeStub(
        [
            Stream(replies("run", event(1), heartbeat, event(2)), UNAVAILABLE),
            # A server may replay what the client saw already: it is skipped, not yielded twice.
            Stream(replies("watch", event(2), event(3), heartbeat), UNAVAILABLE),
            Stream([], UNAVAILABLE),  # a refused reconnect
            # A stream that ends before the task did (a server shutting down) is resumed too.
            Stream(replies("watch", event(4))),
            Stream(replies("watch", event(5), event(6, *END), event(7))),
        ]
    )
    with client_with(stub) as client:
        run = client.run("smoke", "goal", request_id="rid-7")
        seen = [e.sequence for e in run]
    assert seen == [1, 2, 3, 4, 5, 6]  # nothing after the terminal event
    assert run.status is TaskStatus.SUCCEEDED and run.reconnects == 4 and run.done
    assert [name for name, *_ in stub.calls] == ["RunTask", "WatchTask", "WatchTask", "WatchTask", "WatchTask"]
    assert [request.after_sequence for name, request, *_ in stub.calls[1:]] == [2, 3, 3, 4]
    assert {request.task_id for _, request, *_ in stub.calls[1:]} == {run.task_id}
    for _, _, metadata, timeout in stub.calls:  # every call: the token, the run's request id, a deadline
        assert metadata == {"authorization": "Bearer tok", "x-request-id": "rid-7"}
        assert timeout is not None and 0 < timeout <= 600


def test_a_start_that_broke_before_any_event_is_retried_with_the_same_task_id() -> None:
    stub = FakeStub([Stream([], UNAVAILABLE), Stream(replies("run", event(1, *END)))])
    with client_with(stub) as client:
        events = list(client.run("smoke", "goal", task_id="t-mine", max_steps=3))
    assert [e.sequence for e in events] == [1] and isinstance(events[0], StatusChanged)
    assert [(name, request.start.task_id, request.start.max_steps) for name, request, *_ in stub.calls] == [
        ("RunTask", "t-mine", 3),
        ("RunTask", "t-mine", 3),
    ]
    assert not stub.calls[0][1].start.HasField("token_budget")  # unset keeps the agent's


def test_a_non_resumable_error_is_raised_typed_and_the_stream_cancelled() -> None:
    denied = raised_by_server(PermissionDeniedError("dev:task.t-1:watch", "not yours"))
    stream = Stream(replies("watch", event(1)), denied)
    with client_with(FakeStub([stream])) as client:
        run = client.watch("t-1", request_id="rid-9")
        with pytest.raises(errors.PermissionDenied) as caught:
            list(run)
    assert caught.value.request_id == "rid-9" and caught.value.detail is not None
    assert run.last_sequence == 1 and stream.cancelled


def test_reconnects_are_bounded() -> None:
    stub = FakeStub([Stream(replies("watch", event(1)), UNAVAILABLE)] + [Stream([], UNAVAILABLE) for _ in range(3)])
    with client_with(stub, reconnects=2) as client, pytest.raises(errors.Unavailable):
        list(client.watch("t-1"))
    assert len(stub.calls) == 3


def test_leaving_a_run_early_cancels_its_stream() -> None:
    stream = Stream(replies("run", event(1), event(2)))
    with client_with(FakeStub([stream])) as client:
        run = client.run("smoke", "goal")
        assert next(run).sequence == 1
        run.__iter__().close()  # type: ignore[attr-defined]
    assert stream.cancelled


def test_bad_arguments_are_refused_before_any_call() -> None:
    with pytest.raises(ValueError):
        Client("")
    with pytest.raises(ValueError):
        Client("127.0.0.1:1", timeout=0)
    with pytest.raises(ValueError):
        Client("127.0.0.1:1", metadata=[("authorization", "Bearer x")])
    with pytest.raises(ValueError):
        Client("127.0.0.1:1", backoff=(2.0, 1.0))
    with Client("127.0.0.1:1") as client:
        for bad in ("", "has space", "x" * 129, "-leading", "ünï"):
            with pytest.raises(ValueError, match="request_id"):
                client.run("smoke", "goal", request_id=bad)
            with pytest.raises(ValueError, match="request_id"):
                client.get_task("t-1", request_id=bad)


def test_every_event_kind_has_its_typed_form() -> None:
    approval = D.TaskEvent(sequence=3, kind=D.TASK_EVENT_KIND_APPROVAL_REQUIRED, status=D.TASK_STATUS_WAITING_APPROVAL)
    approval.pending_approval.approval_id = "ap-1"
    approval.pending_approval.plan.name = "refund"
    approval.pending_approval.kind = common_pb2.APPROVAL_KIND_SETTLEMENT
    typed = to_event(approval)
    assert isinstance(typed, ApprovalRequired)
    assert (typed.approval_id, typed.tool, typed.kind, typed.status) == (
        "ap-1",
        "refund",
        "SETTLEMENT",
        TaskStatus.WAITING_APPROVAL,
    )
    incident = D.TaskEvent(sequence=4, kind=D.TASK_EVENT_KIND_INCIDENT)
    incident.error.ParseFromString(to_detail(AgentmeshError(ErrorCode.LOOP_DETECTED, "looping")).SerializeToString())
    typed_incident = to_event(incident)
    assert isinstance(typed_incident, Incident) and typed_incident.error is not None
    assert (typed_incident.error.code, typed_incident.error.error_class) == ("LOOP_DETECTED", "FATAL")
    failed = D.TaskEvent(sequence=5, kind=D.TASK_EVENT_KIND_TOOL_RESULT)
    bad = InvalidRequestError("x", "bad", violations=[Violation(path="$.x")])
    failed.tool_result.error.ParseFromString(to_detail(bad).SerializeToString())
    result = to_event(failed)
    assert isinstance(result, ToolResult) and result.output is None and result.error is not None
    newer = to_event(D.TaskEvent(sequence=6, kind=cast(Any, 99)))  # a kind newer than this client
    assert isinstance(newer, UnknownEvent) and newer.kind == 99
    named = {
        D.TaskEventKind.Name(k)
        for k in D.TaskEventKind.values()
        if not isinstance(to_event(D.TaskEvent(kind=cast(Any, k))), UnknownEvent)
    }
    assert named == set(D.TaskEventKind.keys()) - {"TASK_EVENT_KIND_UNSPECIFIED", "TASK_EVENT_KIND_HEARTBEAT"}


@dataclass
class UnaryStub:
    """GetTask/CancelTask/ListAgents/ResolveApproval: records each call, answers or raises."""

    calls: list[tuple[str, Any, dict[str, str], float | None]] = field(default_factory=list)
    error: grpc.RpcError | None = None

    def __getattr__(self, name: str) -> Any:
        def method(request: Any, *, metadata: Any, timeout: float | None) -> Any:
            self.calls.append((name, request, dict(metadata), timeout))
            if self.error is not None:
                raise self.error
            if name == "ListAgents":
                return D.ListAgentsResponse(agents=[D.Agent(agent_id="a", tools=["t"])])
            return D.GetTaskResponse(task=D.Task(task_id=request.task_id, status=D.TASK_STATUS_CANCELLED))

        return method


def test_every_unary_call_sends_the_token_a_request_id_and_the_deadline() -> None:
    stub = UnaryStub()
    with Client("127.0.0.1:1", token="tok", timeout=7.5, metadata=[("x-tenant", "acme")]) as client:
        client._stub = stub  # type: ignore[assignment]
        assert client.get_task("t-1").status is TaskStatus.CANCELLED
        assert client.cancel("t-1", "stop", request_id="mine-1").task_id == "t-1"
        assert client.resolve_approval("t-1", "ap-1", approve=False, arguments_sha256="ab").task_id == "t-1"
        assert [a.tools for a in client.list_agents()] == [("t",)]
    rids = [metadata.pop("x-request-id") for _, _, metadata, _ in stub.calls]
    assert rids[1] == "mine-1" and len(set(rids)) == 4  # a fresh one per call unless given
    assert all(m == {"authorization": "Bearer tok", "x-tenant": "acme"} for _, _, m, _ in stub.calls)
    assert {timeout for *_, timeout in stub.calls} == {7.5}
    assert stub.calls[2][1].approve is False and stub.calls[2][1].arguments_sha256 == "ab"


def test_a_unary_failure_is_typed_and_names_its_request_id() -> None:
    stub = UnaryStub(error=raised_by_server(NotFoundError("task t-1 not found")))
    with Client("127.0.0.1:1") as client:
        client._stub = stub  # type: ignore[assignment]
        with pytest.raises(errors.NotFound) as caught:
            client.get_task("t-1", request_id="r-1")
    assert caught.value.request_id == "r-1" and "r-1" in str(caught.value)
    assert "authorization" not in stub.calls[0][2]  # no token, no header


def test_typed_output_parsed_or_as_a_pydantic_model() -> None:
    # Issue 41: Task.output / Answer.output are the typed answer; with an output_type, an instance of it.
    from pydantic import BaseModel

    from agentmesh_client.events import Answer, Task, output_schema_json, parse_output

    class Report(BaseModel):
        service: str
        healthy: bool

    raw = D.Task(task_id="t", status=D.TASK_STATUS_SUCCEEDED, output_json='{"service": "a", "healthy": true}')
    assert Task.of(raw).output == {"service": "a", "healthy": True}
    typed = Task.of(raw, Report).output
    assert isinstance(typed, Report) and typed.healthy is True
    assert Task.of(D.Task(task_id="t")).output is None
    event = to_event(D.TaskEvent(task_id="t", sequence=3, kind=D.TASK_EVENT_KIND_ANSWER, output_json="[1]"))
    assert isinstance(event, Answer) and event.output == [1]
    assert json.loads(output_schema_json(Report))["required"] == ["service", "healthy"]
    assert output_schema_json({"type": "object"}) == '{"type": "object"}'
    assert output_schema_json(None) == "" and parse_output("") is None


def test_a_claim_check_event_is_typed() -> None:
    from agentmesh_client import ClaimCheck

    raw = D.TaskEvent(
        task_id="t",
        sequence=4,
        kind=D.TASK_EVENT_KIND_CLAIM_CHECK,
        attributes={"verdict": "unsupported", "claims": "restart: restarted", "gap": "no restart_pod call"},
    )
    event = to_event(raw)
    assert isinstance(event, ClaimCheck) and (event.verdict, event.gap) == ("unsupported", "no restart_pod call")
