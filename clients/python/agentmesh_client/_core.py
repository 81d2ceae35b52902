"""What the synchronous and the asyncio clients share: call metadata, deadlines, and the state of a
run that resumes its stream (which events to yield, which call to open next, when to give up)."""

from __future__ import annotations

import random
import re
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from agentmesh_client import errors
from agentmesh_client._v1 import dispatcher_pb2
from agentmesh_client.events import Answer, Event, StatusChanged, TaskStatus, output_schema_json, parse_output, to_event

D = dispatcher_pb2
REQUEST_ID_HEADER = "x-request-id"
AUTHORIZATION_HEADER = "authorization"
# Statuses after which the same stream may be opened again: the connection or the server went away.
RESUMABLE = frozenset({grpc.StatusCode.UNAVAILABLE})


# The request ids the services keep (others they replace, so logs could not be searched by ours).
_REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")


def new_request_id() -> str:
    return uuid.uuid4().hex


def request_id_or_new(request_id: str | None) -> str:
    """`request_id` when given (ValueError unless the services would keep it), else a fresh one."""
    if request_id is None:
        return new_request_id()
    if not _REQUEST_ID.fullmatch(request_id):
        raise ValueError(f"request_id must match {_REQUEST_ID.pattern}, got {request_id!r}")
    return request_id


def new_task_id() -> str:
    """A client-chosen task id: StartTask with it is idempotent, so a start that broke is retried safely."""
    return f"t-{uuid.uuid4().hex}"


class Options:
    """A client's settings (see `Client`), checked once."""

    def __init__(
        self,
        target: str,
        *,
        token: str | None,
        timeout: float,
        run_timeout: float | None,
        metadata: Sequence[tuple[str, str]],
        reconnects: int,
        backoff: tuple[float, float],
    ) -> None:
        if not target:
            raise ValueError("target must be host:port")
        if timeout <= 0 or (run_timeout is not None and run_timeout <= 0):
            raise ValueError("timeout and run_timeout must be > 0")
        if reconnects < 0 or backoff[0] < 0 or backoff[1] < backoff[0]:
            raise ValueError("reconnects must be >= 0 and backoff (first, cap) with 0 <= first <= cap")
        if any(key.lower() in (AUTHORIZATION_HEADER, REQUEST_ID_HEADER) for key, _ in metadata):
            raise ValueError("pass the token as token= and request ids as request_id=, not in metadata")
        self.target = target
        self.timeout = timeout
        self.run_timeout = run_timeout
        self.reconnects = reconnects
        self.backoff_range = backoff
        self._extra = tuple(metadata)
        self._auth = ((AUTHORIZATION_HEADER, f"Bearer {token}"),) if token else ()

    def metadata(self, request_id: str) -> tuple[tuple[str, str], ...]:
        return (*self._auth, (REQUEST_ID_HEADER, request_id), *self._extra)

    def backoff(self, failures: int) -> float:
        """Jittered exponential backoff before the `failures`-th reconnect in a row."""
        first, cap = self.backoff_range
        return float(min(cap, first * 2 ** (failures - 1)) * random.uniform(0.5, 1.0))


def credentials(tls: bool | grpc.ChannelCredentials | None) -> grpc.ChannelCredentials | None:
    if tls is None or tls is False:
        return None
    return grpc.ssl_channel_credentials() if tls is True else tls


def start_request(
    agent: str,
    goal: str,
    *,
    session_id: str | None,
    task_id: str | None,
    token_budget: int | None,
    max_steps: int | None,
    output_schema: Any = None,
) -> dispatcher_pb2.StartTaskRequest:
    return D.StartTaskRequest(
        output_schema_json=output_schema_json(output_schema),
        agent_id=agent,
        goal=goal,
        task_id=task_id or new_task_id(),
        session_id=session_id or "",
        token_budget=token_budget,
        max_steps=max_steps,
    )


class RunState:
    """The progress of one run: what was yielded, and how to resume (`Run`, `AsyncRun`).

    Meanwhile and afterwards: `task_id`, `status`, `answer`, `output` (the typed answer, parsed, or an
    instance of the run's `output_type`), `last_sequence`, `request_id` (of every call of this run),
    `reconnects` (streams resumed) and `done`.
    """

    def __init__(
        self,
        options: Options,
        task_id: str,
        *,
        start: dispatcher_pb2.StartTaskRequest | None,
        after_sequence: int,
        timeout: float | None,
        request_id: str,
        output_type: Any = None,
        on_heartbeat: Callable[[], None] | None = None,
    ) -> None:
        self._options = options
        self._on_heartbeat = on_heartbeat
        self._output_type = output_type
        self.output: Any = None
        self._start = start
        self.task_id = task_id
        self.last_sequence = after_sequence
        self.request_id = request_id
        self.status = TaskStatus.UNSPECIFIED
        self.answer = ""
        self.reconnects = 0
        self.done = False
        self._failures = 0
        self._deadline = None if timeout is None else time.monotonic() + timeout

    def _call(self) -> tuple[str, Any, tuple[tuple[str, str], ...], float | None]:
        """(method, request, metadata, timeout) of the stream to open now."""
        timeout = None
        if self._deadline is not None:
            timeout = self._deadline - time.monotonic()
            if timeout <= 0:
                raise errors.DeadlineExceeded(
                    f"the run's deadline passed after event {self.last_sequence} of task {self.task_id}",
                    request_id=self.request_id,
                )
        metadata = self._options.metadata(self.request_id)
        # Until an event arrived the task may not exist yet: RunTask again with the same task_id (idempotent).
        if self._start is not None and self.last_sequence == 0:
            return "RunTask", D.RunTaskRequest(start=self._start), metadata, timeout
        request = D.WatchTaskRequest(task_id=self.task_id, after_sequence=self.last_sequence)
        return "WatchTask", request, metadata, timeout

    def _accept(self, raw: dispatcher_pb2.TaskEvent) -> Event | None:
        """The typed event to yield, or None: heartbeats (sequence 0; told to `on_heartbeat`, which a
        progress display uses) and replays of yielded events."""
        if raw.kind == D.TASK_EVENT_KIND_HEARTBEAT:
            if self._on_heartbeat is not None:
                self._on_heartbeat()
            return None
        if raw.sequence <= self.last_sequence:
            return None
        event = to_event(raw)
        self.last_sequence = raw.sequence
        self.status = event.status
        self._failures = 0
        if isinstance(event, Answer):
            self.answer = event.text
            self.output = parse_output(event.output_json, self._output_type)
        if isinstance(event, StatusChanged) and event.terminal:
            self.done = True
        return event

    def _broke(self, exc: grpc.RpcError | None) -> float:
        """The stream failed with `exc` (None: it ended before the task did, as a server shutting down
        ends it). The delay before resuming it; raises the typed error when it must not be resumed."""
        code = exc.code() if exc is not None and callable(getattr(exc, "code", None)) else None
        if exc is not None and code not in RESUMABLE:
            raise errors.from_rpc_error(exc, self.request_id) from None
        self._failures += 1
        if self._failures > self._options.reconnects:
            if exc is not None:
                raise errors.from_rpc_error(exc, self.request_id) from None
            raise errors.Unavailable(
                f"the stream of task {self.task_id} ended {self._failures} times without the task ending",
                request_id=self.request_id,
            )
        self.reconnects += 1
        return self._options.backoff(self._failures)
