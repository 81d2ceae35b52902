"""`Client`: the dispatcher of an agentmesh deployment from Python, over gRPC.

    with Client("127.0.0.1:50051", token=token) as client:
        for event in client.run("assistant", "What is 6*7?"):
            print(event.sequence, type(event).__name__, event.message)

Every call carries the token (`authorization: Bearer <token>`), an `x-request-id` (fresh per call, or
the one given) and a deadline; a failed call raises a typed `agentmesh_client.errors.AgentmeshError`.
A task outlives any stream that watches it: when `run`'s or `watch`'s stream breaks (UNAVAILABLE: a
reset connection, a restarted server) it is resumed with `WatchTask(after_sequence=<last sequence
yielded>)`, with backoff, so no event is missed or yielded twice.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import grpc

from agentmesh_client import errors
from agentmesh_client._v1 import dispatcher_pb2, dispatcher_pb2_grpc
from agentmesh_client.events import Agent, Answer, Event, StatusChanged, Task, TaskStatus, to_event

__all__ = ["Client", "Run"]

D = dispatcher_pb2
REQUEST_ID_HEADER = "x-request-id"
AUTHORIZATION_HEADER = "authorization"
# Statuses after which the same stream may be opened again: the connection or the server went away.
_RESUMABLE = frozenset({grpc.StatusCode.UNAVAILABLE})


def new_request_id() -> str:
    return uuid.uuid4().hex


def new_task_id() -> str:
    """A client-chosen task id: StartTask with it is idempotent, so a start that broke is retried safely."""
    return f"t-{uuid.uuid4().hex}"


class Run:
    """The events of one task, as an iterator of typed events (`agentmesh_client.events`).

    It ends after the event that takes the task to an end status (SUCCEEDED, FAILED, ABORTED,
    CANCELLED). Meanwhile and afterwards: `task_id`, `status`, `answer`, `last_sequence`,
    `request_id` (of every call of this run) and `reconnects` (streams resumed).
    """

    def __init__(
        self,
        client: Client,
        task_id: str,
        *,
        start: dispatcher_pb2.StartTaskRequest | None,
        after_sequence: int,
        timeout: float | None,
        request_id: str,
    ) -> None:
        self._client = client
        self._start = start
        self.task_id = task_id
        self.last_sequence = after_sequence
        self.request_id = request_id
        self.status = TaskStatus.UNSPECIFIED
        self.answer = ""
        self.reconnects = 0
        self.done = False
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._iterator: Iterator[Event] | None = None

    def __iter__(self) -> Iterator[Event]:
        if self._iterator is None:
            self._iterator = self._events()
        return self._iterator

    def __next__(self) -> Event:
        return next(iter(self))

    def result(self) -> Task:
        """Consumes the remaining events, then reads the task (GetTask)."""
        for _ in self:
            pass
        return self._client.get_task(self.task_id, request_id=self.request_id)

    def _remaining(self) -> float | None:
        if self._deadline is None:
            return None
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise errors.DeadlineExceeded(
                f"the run's deadline passed after event {self.last_sequence} of task {self.task_id}",
                request_id=self.request_id,
            )
        return left

    def _open(self) -> Any:
        metadata = self._client._metadata(self.request_id)
        timeout = self._remaining()
        stub = self._client._stub
        # Until an event arrived the task may not exist yet: RunTask again with the same task_id (idempotent).
        if self._start is not None and self.last_sequence == 0:
            return stub.RunTask(D.RunTaskRequest(start=self._start), metadata=metadata, timeout=timeout)
        request = D.WatchTaskRequest(task_id=self.task_id, after_sequence=self.last_sequence)
        return stub.WatchTask(request, metadata=metadata, timeout=timeout)

    def _events(self) -> Iterator[Event]:
        failures = 0
        while not self.done:
            call = self._open()
            try:
                for reply in call:
                    raw = reply.event
                    # Heartbeats (sequence 0) keep an idle stream alive; a replayed event was yielded already.
                    if raw.kind == D.TASK_EVENT_KIND_HEARTBEAT or raw.sequence <= self.last_sequence:
                        continue
                    event = to_event(raw)
                    self.last_sequence = raw.sequence
                    self.status = event.status
                    failures = 0
                    if isinstance(event, Answer):
                        self.answer = event.text
                    if isinstance(event, StatusChanged) and event.terminal:
                        self.done = True
                    yield event
                    if self.done:
                        return
            except grpc.RpcError as exc:
                code = exc.code() if callable(getattr(exc, "code", None)) else None
                if code not in _RESUMABLE or failures >= self._client.reconnects:
                    raise errors.from_rpc_error(exc, self.request_id) from None
            finally:
                call.cancel()
            # The stream broke, or ended before the task did (a server shutting down): resume it.
            failures += 1
            if failures > self._client.reconnects:
                raise errors.Unavailable(
                    f"the stream of task {self.task_id} ended {failures} times without progress",
                    request_id=self.request_id,
                )
            self.reconnects += 1
            self._client._sleep(self._client._backoff(failures))


class Client:
    """A synchronous client of the dispatcher (module docstring).

    `target`: "host:port". `token`: a signed identity (`agentmesh token --role operator`), sent as
    `authorization: Bearer <token>`. `tls`: None or False for plaintext, True for the system's roots,
    or `grpc.ChannelCredentials`. `timeout`: the deadline of each unary call, seconds. `run_timeout`:
    the deadline of a whole `run`/`watch` (None: no deadline). `metadata`: extra pairs sent with every
    call. `reconnects`: how many times in a row a broken stream is resumed before `Unavailable` is raised.
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
    ) -> None:
        if not target:
            raise ValueError("target must be host:port")
        if timeout <= 0 or (run_timeout is not None and run_timeout <= 0):
            raise ValueError("timeout and run_timeout must be > 0")
        if any(key.lower() in (AUTHORIZATION_HEADER, REQUEST_ID_HEADER) for key, _ in metadata):
            raise ValueError("pass the token as token= and request ids as request_id=, not in metadata")
        self.target = target
        self.timeout = timeout
        self.run_timeout = run_timeout
        self.reconnects = reconnects
        self._backoff_range = backoff
        self._sleep = sleep
        self._extra = tuple(metadata)
        self._auth = ((AUTHORIZATION_HEADER, f"Bearer {token}"),) if token else ()
        if tls is None or tls is False:
            self._channel = grpc.insecure_channel(target, options=list(options))
        else:
            credentials = grpc.ssl_channel_credentials() if tls is True else tls
            self._channel = grpc.secure_channel(target, credentials, options=list(options))
        self._stub = dispatcher_pb2_grpc.DispatcherServiceStub(self._channel)  # type: ignore[no-untyped-call]

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def _metadata(self, request_id: str) -> tuple[tuple[str, str], ...]:
        return (*self._auth, (REQUEST_ID_HEADER, request_id), *self._extra)

    def _backoff(self, failures: int) -> float:
        first, cap = self._backoff_range
        return float(min(cap, first * 2 ** (failures - 1)) * random.uniform(0.5, 1.0))

    def _unary(self, method: Any, request: Any, request_id: str | None) -> Any:
        rid = request_id or new_request_id()
        try:
            return method(request, metadata=self._metadata(rid), timeout=self.timeout)
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
    ) -> Run:
        """Starts a task of `agent` (RunTask) and returns its events as a `Run` to iterate.

        `session_id` continues a conversation (a session of an earlier task). `task_id` makes the start
        idempotent (one is chosen when omitted). `timeout`: the deadline of the whole run (default
        `run_timeout`). Nothing is sent until the first event is asked for."""
        start = D.StartTaskRequest(
            agent_id=agent,
            goal=goal,
            task_id=task_id or new_task_id(),
            session_id=session_id or "",
            token_budget=token_budget,
            max_steps=max_steps,
        )
        return Run(
            self,
            start.task_id,
            start=start,
            after_sequence=0,
            timeout=self.run_timeout if timeout is None else timeout,
            request_id=request_id or new_request_id(),
        )

    def watch(
        self, task_id: str, *, after_sequence: int = 0, timeout: float | None = None, request_id: str | None = None
    ) -> Run:
        """The events of an existing task after `after_sequence` (WatchTask), until it ends."""
        return Run(
            self,
            task_id,
            start=None,
            after_sequence=after_sequence,
            timeout=self.run_timeout if timeout is None else timeout,
            request_id=request_id or new_request_id(),
        )

    def get_task(self, task_id: str, *, request_id: str | None = None) -> Task:
        reply = self._unary(self._stub.GetTask, D.GetTaskRequest(task_id=task_id), request_id)
        return Task.of(reply.task)

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
        """Approves or denies a pending tool call (`ApprovalRequired`); returns the task after resuming."""
        request = D.DispatcherServiceResolveApprovalRequest(
            task_id=task_id,
            approval_id=approval_id,
            approve=approve,
            reason=reason,
            arguments_sha256=arguments_sha256,
        )
        return Task.of(self._unary(self._stub.ResolveApproval, request, request_id).task)

    def list_agents(self, *, request_id: str | None = None) -> list[Agent]:
        reply = self._unary(self._stub.ListAgents, D.ListAgentsRequest(), request_id)
        return [Agent.of(agent) for agent in reply.agents]
