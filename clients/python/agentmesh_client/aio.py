"""`AsyncClient`: `Client` on asyncio (grpc.aio), with the same arguments, methods and behaviour.

async with AsyncClient("127.0.0.1:50051", token=token) as client:
    async for event in client.run("assistant", "What is 6*7?"):
        print(event.sequence, type(event).__name__, event.message)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import grpc
import grpc.aio

from agentmesh_client import errors
from agentmesh_client._core import D, Options, RunState, credentials, request_id_or_new, start_request
from agentmesh_client._v1 import dispatcher_pb2_grpc
from agentmesh_client.events import Agent, Event, Task

__all__ = ["AsyncClient", "AsyncRun"]


class AsyncRun(RunState):
    """`Run` for `async for`: the typed events of one task until it ends; `await result()`."""

    def __init__(self, client: AsyncClient, task_id: str, **kwargs: Any) -> None:
        super().__init__(client._options, task_id, **kwargs)
        self._client = client
        self._iterator: AsyncGenerator[Event, None] | None = None

    def __aiter__(self) -> AsyncIterator[Event]:
        if self._iterator is None:
            self._iterator = self._events()
        return self._iterator

    async def __anext__(self) -> Event:
        return await self.__aiter__().__anext__()

    async def aclose(self) -> None:
        """Stops watching (the task goes on); cancels the open stream."""
        if self._iterator is not None:
            await self._iterator.aclose()

    async def result(self) -> Task:
        """Consumes the remaining events, then reads the task (GetTask)."""
        async for _ in self:
            pass
        return await self._client.get_task(self.task_id, request_id=self.request_id, output_type=self._output_type)

    async def _events(self) -> AsyncGenerator[Event, None]:
        while not self.done:
            method, request, metadata, timeout = self._call()
            call = getattr(self._client._stub, method)(request, metadata=metadata, timeout=timeout)
            failure: grpc.RpcError | None = None
            try:
                async for reply in call:
                    event = self._accept(reply.event)
                    if event is not None:
                        yield event
                        if self.done:
                            return
            except grpc.RpcError as exc:
                failure = exc
            finally:
                call.cancel()
            await self._client._sleep(self._broke(failure))


class AsyncClient:
    """The asyncio client of the dispatcher; arguments as `Client`'s (`sleep` is awaited)."""

    def __init__(
        self,
        target: str,
        *,
        token: str | None = None,
        tls: bool | grpc.ChannelCredentials | None = None,
        timeout: float = 30.0,
        run_timeout: float | None = 600.0,
        metadata: Sequence[tuple[str, str]] = (),
        reconnects: int = 8,
        backoff: tuple[float, float] = (0.1, 5.0),
        options: Sequence[tuple[str, Any]] = (),
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        channel: grpc.aio.Channel | None = None,
    ) -> None:
        self._options = Options(
            target,
            token=token,
            timeout=timeout,
            run_timeout=run_timeout,
            metadata=metadata,
            reconnects=reconnects,
            backoff=backoff,
        )
        self._sleep = sleep
        # A channel of the caller's (its interceptors, its TLS) is used as given and left open by close().
        self._owns_channel = channel is None
        if channel is not None:
            if tls is not None or options:
                raise ValueError("tls and options configure a channel the client dials: not with channel=")
            self._channel = channel
        elif (creds := credentials(tls)) is None:
            self._channel = grpc.aio.insecure_channel(target, options=list(options))
        else:
            self._channel = grpc.aio.secure_channel(target, creds, options=list(options))
        self._stub = dispatcher_pb2_grpc.DispatcherServiceStub(self._channel)  # type: ignore[no-untyped-call]

    @property
    def target(self) -> str:
        return self._options.target

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes the channel the client dialled (not one given as `channel=`)."""
        if self._owns_channel:
            await self._channel.close(None)

    async def _unary(self, method: Any, request: Any, request_id: str | None) -> Any:
        rid = request_id_or_new(request_id)
        try:
            return await method(request, metadata=self._options.metadata(rid), timeout=self._options.timeout)
        except grpc.RpcError as exc:
            raise errors.from_rpc_error(exc, rid) from None

    def run(
        self,
        agent: str,
        goal: str,
        *,
        session_id: str | None = None,
        task_id: str | None = None,
        token_budget: int | None = None,
        max_steps: int | None = None,
        timeout: float | None = None,
        request_id: str | None = None,
        output_schema: Any = None,
        output_type: Any = None,
        on_heartbeat: Callable[[], None] | None = None,
    ) -> AsyncRun:
        """Starts a task of `agent` (RunTask); its events as an `AsyncRun` (see `Client.run`, also for
        `output_schema` and `output_type`)."""
        start = start_request(
            agent,
            goal,
            session_id=session_id,
            task_id=task_id,
            token_budget=token_budget,
            max_steps=max_steps,
            output_schema=output_schema if output_schema is not None else output_type,
        )
        return AsyncRun(
            self,
            start.task_id,
            start=start,
            after_sequence=0,
            timeout=self._options.run_timeout if timeout is None else timeout,
            request_id=request_id_or_new(request_id),
            output_type=output_type,
            on_heartbeat=on_heartbeat,
        )

    def watch(
        self,
        task_id: str,
        *,
        after_sequence: int = 0,
        timeout: float | None = None,
        request_id: str | None = None,
        on_heartbeat: Callable[[], None] | None = None,
    ) -> AsyncRun:
        """The events of an existing task after `after_sequence` (WatchTask), until it ends; `on_heartbeat`
        is called on each heartbeat the stream sends while the task is quiet."""
        return AsyncRun(
            self,
            task_id,
            start=None,
            after_sequence=after_sequence,
            timeout=self._options.run_timeout if timeout is None else timeout,
            request_id=request_id_or_new(request_id),
            on_heartbeat=on_heartbeat,
        )

    async def get_task(self, task_id: str, *, request_id: str | None = None, output_type: Any = None) -> Task:
        """The task; its `output` is the typed answer, as an `output_type` (a pydantic model) when given."""
        reply = await self._unary(self._stub.GetTask, D.GetTaskRequest(task_id=task_id), request_id)
        return Task.of(reply.task, output_type)

    async def cancel(self, task_id: str, reason: str = "", *, request_id: str | None = None) -> Task:
        request = D.CancelTaskRequest(task_id=task_id, reason=reason)
        return Task.of((await self._unary(self._stub.CancelTask, request, request_id)).task)

    async def resolve_approval(
        self,
        task_id: str,
        approval_id: str,
        *,
        approve: bool,
        arguments_sha256: str,
        reason: str = "",
        request_id: str | None = None,
    ) -> Task:
        """Approves or denies a pending tool call (`ApprovalRequired`); the task after resuming."""
        request = D.DispatcherServiceResolveApprovalRequest(
            task_id=task_id, approval_id=approval_id, approve=approve, reason=reason, arguments_sha256=arguments_sha256
        )
        return Task.of((await self._unary(self._stub.ResolveApproval, request, request_id)).task)

    async def list_agents(self, *, request_id: str | None = None) -> list[Agent]:
        reply = await self._unary(self._stub.ListAgents, D.ListAgentsRequest(), request_id)
        return [Agent.of(agent) for agent in reply.agents]
