"""agentmesh_client's AsyncClient on a channel of the caller's (`channel=`, what the CLI streams on: its
interceptors, its TLS) and its heartbeat hook (`on_heartbeat`, the CLI's progress display), without a
network: a fake channel answers the stubs the client builds on it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from agentmesh_client import Client
from agentmesh_client._v1 import dispatcher_pb2 as D
from agentmesh_client.aio import AsyncClient


class FakeRpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return "Socket closed"

    def trailing_metadata(self) -> tuple[()]:
        return ()


@dataclass
class AsyncStream:
    replies: list[Any]
    error: grpc.RpcError | None = None
    cancelled: bool = False

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._replies()

    async def _replies(self) -> AsyncIterator[Any]:
        for reply in self.replies:
            yield reply
        if self.error is not None:
            raise self.error

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class FakeChannel:
    """Answers the stubs' stream methods from a script; records (method, request, metadata); never closed
    by a client that did not dial it."""

    streams: list[AsyncStream]
    calls: list[tuple[str, Any, dict[str, str]]] = field(default_factory=list)
    closed: bool = False

    def unary_stream(self, method: str, *args: Any, **kwargs: Any) -> Callable[..., AsyncStream]:
        def call(request: Any, *, metadata: Any, timeout: float | None) -> AsyncStream:
            self.calls.append((method.rsplit("/", 1)[-1], request, dict(metadata)))
            return self.streams.pop(0)

        return call

    def unary_unary(self, method: str, *args: Any, **kwargs: Any) -> Callable[..., Any]:
        return lambda *a, **k: None

    async def close(self, grace: float | None) -> None:
        self.closed = True


def _event(seq: int, kind: Any = D.TASK_EVENT_KIND_STEP_STARTED, status: Any = D.TASK_STATUS_RUNNING) -> Any:
    return D.TaskEvent(task_id="t-1", sequence=seq, kind=kind, status=status, step=1)


async def _no_sleep(seconds: float) -> None:
    return None


async def test_a_run_on_the_callers_channel_resumes_and_tells_each_heartbeat() -> None:
    heartbeat = D.TaskEvent(task_id="t-1", kind=D.TASK_EVENT_KIND_HEARTBEAT)
    unavailable = FakeRpcError(grpc.StatusCode.UNAVAILABLE)
    done = _event(3, D.TASK_EVENT_KIND_STATUS, D.TASK_STATUS_SUCCEEDED)
    channel = FakeChannel(
        [
            AsyncStream([D.RunTaskResponse(event=e) for e in (_event(1), heartbeat)], unavailable),
            AsyncStream([D.WatchTaskResponse(event=e) for e in (heartbeat, _event(1), _event(2), done)]),
        ]
    )
    beats: list[int] = []
    client = AsyncClient(
        "dispatcher",
        channel=channel,  # type: ignore[arg-type]
        metadata=(("x-agentmesh-identity", "tok"),),
        sleep=_no_sleep,
    )
    run = client.run("assistant", "hi", task_id="t-1", request_id="r-1", on_heartbeat=lambda: beats.append(1))
    seen = [event.sequence async for event in run]
    assert seen == [1, 2, 3] and len(beats) == 2 and run.reconnects == 1
    assert [(name, request.after_sequence if name == "WatchTask" else 0) for name, request, _ in channel.calls] == [
        ("RunTask", 0),
        ("WatchTask", 1),
    ]
    assert all(md["x-agentmesh-identity"] == "tok" and md["x-request-id"] == "r-1" for _, _, md in channel.calls)
    await client.close()
    assert not channel.closed  # the caller's channel stays the caller's


def test_a_given_channel_takes_no_tls_or_options() -> None:
    with pytest.raises(ValueError, match="channel="):
        AsyncClient("dispatcher", channel=FakeChannel([]), tls=True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="channel="):
        AsyncClient("dispatcher", channel=FakeChannel([]), options=[("grpc.max_send_message_length", 1)])  # type: ignore[arg-type]


@dataclass
class SyncChannel:
    """The blocking twin of FakeChannel: iterables in place of async ones."""

    streams: list[list[Any]]
    calls: list[str] = field(default_factory=list)
    closed: bool = False

    def unary_stream(self, method: str, *args: Any, **kwargs: Any) -> Callable[..., Any]:
        def call(request: Any, *, metadata: Any, timeout: float | None) -> Any:
            self.calls.append(method.rsplit("/", 1)[-1])
            return _SyncStream(self.streams.pop(0))

        return call

    def unary_unary(self, method: str, *args: Any, **kwargs: Any) -> Callable[..., Any]:
        return lambda *a, **k: None

    def close(self) -> None:
        self.closed = True


@dataclass
class _SyncStream:
    replies: list[Any]

    def __iter__(self) -> Any:
        return iter(self.replies)

    def cancel(self) -> None:
        return None


def test_the_blocking_client_takes_a_channel_and_tells_heartbeats_too() -> None:
    heartbeat = D.TaskEvent(task_id="t-1", kind=D.TASK_EVENT_KIND_HEARTBEAT)
    done = _event(2, D.TASK_EVENT_KIND_STATUS, D.TASK_STATUS_SUCCEEDED)
    channel = SyncChannel([[D.RunTaskResponse(event=e) for e in (heartbeat, _event(1), heartbeat, done)]])
    beats: list[int] = []
    client = Client("dispatcher", channel=channel, sleep=lambda s: None)  # type: ignore[arg-type]
    seen = [e.sequence for e in client.run("assistant", "hi", on_heartbeat=lambda: beats.append(1))]
    assert seen == [1, 2] and len(beats) == 2 and channel.calls == ["RunTask"]
    client.close()
    assert not channel.closed
