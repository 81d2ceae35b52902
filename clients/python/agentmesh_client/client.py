"""`Client`: the dispatcher of an agentmesh deployment from Python, over gRPC (synchronous).

    with Client("127.0.0.1:50051", token=token) as client:
        for event in client.run("assistant", "What is 6*7?"):
            print(event.sequence, type(event).__name__, event.message)

Every call carries the token (`authorization: Bearer <token>`), an `x-request-id` (fresh per call, or
the one given; one for all the calls of a run) and a deadline; a failed call raises a typed
`agentmesh_client.errors.AgentmeshError`. A task outlives any stream that watches it: when `run`'s or
`watch`'s stream breaks (UNAVAILABLE: a reset connection, a restarted server) it is resumed with
`WatchTask(after_sequence=<last sequence yielded>)`, with backoff, so no event is missed or yielded
twice. `agentmesh_client.aio.AsyncClient` is the same on asyncio.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any

import grpc

from agentmesh_client import errors
from agentmesh_client._core import D, Options, RunState, credentials, request_id_or_new, start_request
from agentmesh_client._v1 import dispatcher_pb2_grpc
from agentmesh_client.events import Agent, Event, Task

__all__ = ["Client", "Run"]


class Run(RunState):
    """The events of one task, an iterator of typed events (`agentmesh_client.events`). It ends after
    the event that takes the task to an end status (SUCCEEDED, FAILED, ABORTED, CANCELLED). Its
    attributes say where it is: `task_id`, `status`, `answer`, `last_sequence`, `request_id`,
    `reconnects`, `done`. Nothing is sent before the first event is asked for."""

    def __init__(self, client: Client, task_id: str, **kwargs: Any) -> None:
        super().__init__(client._options, task_id, **kwargs)
        self._client = client
        self._iterator: Generator[Event, None, None] | None = None

    def __iter__(self) -> Iterator[Event]:
        if self._iterator is None:
            self._iterator = self._events()
        return self._iterator

    def __next__(self) -> Event:
        return next(iter(self))

    def close(self) -> None:
        """Stops watching (the task goes on); cancels the open stream."""
        if self._iterator is not None:
            self._iterator.close()

    def result(self) -> Task:
        """Consumes the remaining events, then reads the task (GetTask); its `output` is the typed answer
        (an instance of the run's `output_type` when one was given)."""
        for _ in self:
            pass
        return self._client.get_task(self.task_id, request_id=self.request_id, output_type=self._output_type)

    def _events(self) -> Generator[Event, None, None]:
        while not self.done:
            method, request, metadata, timeout = self._call()
            call = getattr(self._client._stub, method)(request, metadata=metadata, timeout=timeout)
            failure: grpc.RpcError | None = None
            try:
                for reply in call:
                    event = self._accept(reply.event)
                    if event is not None:
                        yield event
                        if self.done:
                            return
            except grpc.RpcError as exc:
                failure = exc
            finally:
                call.cancel()
            self._client._sleep(self._broke(failure))


class Client:
    """A synchronous client of the dispatcher (module docstring).

    `target`: "host:port". `token`: a signed identity (`agentmesh token --role operator`), sent as
    `authorization: Bearer <token>`. `tls`: None or False for plaintext, True for the system's roots,
    or `grpc.ChannelCredentials`. `timeout`: the deadline of each unary call, seconds. `run_timeout`:
    the deadline of a whole `run`/`watch` (None: none). `metadata`: extra pairs sent with every call.
    `reconnects`: how many times in a row a broken stream is resumed before the error is raised;
    `backoff`: (first, cap) seconds between them, jittered. `options`: grpc channel options. `sleep`:
    how to wait between reconnects (tests pass their own). `channel`: a channel of the caller's to use
    instead of dialling `target` (with its own interceptors and TLS; then no `tls` or `options`, and
    `close()` leaves it open).
    """

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
        sleep: Callable[[float], None] = time.sleep,
        channel: grpc.Channel | None = None,
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
            self._channel = grpc.insecure_channel(target, options=list(options))
        else:
            self._channel = grpc.secure_channel(target, creds, options=list(options))
        self._stub = dispatcher_pb2_grpc.DispatcherServiceStub(self._channel)  # type: ignore[no-untyped-call]

    @property
    def target(self) -> str:
        return self._options.target

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes the channel the client dialled (not one given as `channel=`)."""
        if self._owns_channel:
            self._channel.close()

    def _unary(self, method: Any, request: Any, request_id: str | None) -> Any:
        rid = request_id_or_new(request_id)
        try:
            return method(request, metadata=self._options.metadata(rid), timeout=self._options.timeout)
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
    ) -> Run:
        """Starts a task of `agent` (RunTask) and returns its events as a `Run` to iterate.

        `session_id` continues a conversation (the session of an earlier task). `task_id` makes the
        start idempotent (one is chosen when omitted). `timeout`: the deadline of the whole run
        (default `run_timeout`). `output_schema` (a JSON Schema as a mapping or JSON text) asks for a
        typed answer (it may only narrow the agent's); `output_type`, a pydantic model class, does the
        same with its schema, and the run's `output` and `result().output` are instances of it.
        `on_heartbeat` is called on each heartbeat the stream sends while the task is quiet (a progress
        display's tick); heartbeats are never yielded."""
        start = start_request(
            agent,
            goal,
            session_id=session_id,
            task_id=task_id,
            token_budget=token_budget,
            max_steps=max_steps,
            output_schema=output_schema if output_schema is not None else output_type,
        )
        return Run(
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
    ) -> Run:
        """The events of an existing task after `after_sequence` (WatchTask), until it ends; `on_heartbeat`
        as for `run`."""
        return Run(
            self,
            task_id,
            start=None,
            after_sequence=after_sequence,
            timeout=self._options.run_timeout if timeout is None else timeout,
            request_id=request_id_or_new(request_id),
            on_heartbeat=on_heartbeat,
        )

    def get_task(self, task_id: str, *, request_id: str | None = None, output_type: Any = None) -> Task:
        """The task; its `output` is the typed answer, as an `output_type` (a pydantic model) when given."""
        reply = self._unary(self._stub.GetTask, D.GetTaskRequest(task_id=task_id), request_id)
        return Task.of(reply.task, output_type)

    def cancel(self, task_id: str, reason: str = "", *, request_id: str | None = None) -> Task:
        reply = self._unary(self._stub.CancelTask, D.CancelTaskRequest(task_id=task_id, reason=reason), request_id)
        return Task.of(reply.task)

    def resolve_approval(
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
        return Task.of(self._unary(self._stub.ResolveApproval, request, request_id).task)

    def list_agents(self, *, request_id: str | None = None) -> list[Agent]:
        reply = self._unary(self._stub.ListAgents, D.ListAgentsRequest(), request_id)
        return [Agent.of(agent) for agent in reply.agents]
