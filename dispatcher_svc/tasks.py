"""Task state in Redis: one hash per task and its event stream (records, fenced commits, leases).

The work queue is `dispatcher_svc.queue`, the Lua scripts `dispatcher_svc.task_scripts`. Every
write to a task is one Lua script (`COMMIT_LUA`) that checks the writer's fencing number first:
acquiring a task increments `fence`, so a stale owner (paused, partitioned, slow) that wakes up after
another replica took over has its next write refused and stops. The same script appends the write's
events to the stream with contiguous sequences (ids `0-<seq>`): state and log never disagree.

Keys: `am:task:{<id>}` (hash), `:events` (stream) and `:prompts` (each step's provider request,
`dispatcher_svc.prompts`) share a hash tag (one slot, one TTL); `am:tasks`, `am:tasks:waiting`
(parked tasks by approval expiry, for the sweeper) and `am:tasks:index` (every task by create time,
for ListTasks: `dispatcher_svc.task_index`) are touched by single commands or their own scripts.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis.exceptions as rexc

from agentmesh.chat import ToolCall, Usage
from agentmesh.config import DispatcherSettings
from agentmesh.errors import (
    AgentmeshError,
    FailedPreconditionError,
    NotFoundError,
    Violation,
    echo,
    error_from_json,
    error_to_json,
)
from agentmesh.metrics import Metrics
from agentmesh.store import Store
from dispatcher_svc.feed import LocalFeed
from dispatcher_svc.model import (
    CallStage,
    ModelReply,
    PendingApproval,
    Phase,
    Task,
    TaskEvent,
    TaskStatus,
    ToolOutcome,
    event_to_json,
    outcome_from_json,
    outcome_to_json,
    pending_from_json,
    pending_to_json,
    reply_from_json,
    reply_to_json,
)
from dispatcher_svc.queue import ENQUEUE_LUA, TaskQueue, taken_entries
from dispatcher_svc.task_scripts import ACQUIRE_LUA, COMMIT_LUA, DUE_APPROVALS_LUA

UNKNOWN_EXPIRY_RECHECK_MS = 60_000
"""An approval without a known expiry is looked at this often (tool_svc says whether it expired)."""

_OK, _STALE, _WRONG_STATUS, _MISSING, _EXISTS = 1, 0, -1, -2, -3


class StaleOwnerError(FailedPreconditionError):
    """A write carried an old fencing number: another replica owns the task now."""


class WrongStatusError(FailedPreconditionError):
    """A write expected the task in another status (e.g. resolving an approval twice)."""

    def __init__(self, message: str, status: TaskStatus) -> None:
        super().__init__(message, metadata={"status": status.name})
        self.status = status


class TaskExistsError(FailedPreconditionError):
    """A task with this id exists already."""


def task_not_found(task_id: str) -> NotFoundError:
    return NotFoundError(
        f"task_id: no task {echo(task_id)!r}",
        violations=[Violation(path="task_id", rule="exists", actual=repr(echo(task_id)))],
        metadata={"field": "task_id", "task_id": task_id},
    )


STATUS_FIELDS = ("status", "last_sequence")
"""The hash fields of a light status read (`parse_status`)."""


def parse_status(task_id: str, raw: Sequence[bytes | None]) -> tuple[TaskStatus, int]:
    """The status and last sequence from an HMGET of STATUS_FIELDS; NotFoundError naming task_id."""
    if raw[0] is None:
        raise task_not_found(task_id)
    return TaskStatus(int(raw[0])), int(raw[1] or 0)


# --- the checkpoint ---------------------------------------------------------------------------------


@dataclass
class CallState:
    """One tool call of the current reply, as far as it got.

    Its stage (CallStage): new -> running (TOOL_CALL committed; may have been sent) -> done
    (outcome committed) -> appended (its result is in the session log); waiting = parked on an
    approval.
    """

    call: ToolCall
    state: CallStage = CallStage.NEW
    outcome: ToolOutcome | None = None
    resolved: ToolOutcome | None = None
    """An outcome delivered by ResolveApproval, not yet handled by the loop."""
    note: str = ""
    """The text note of a checkpoint written before corrections were typed (ToolOutcome.correction):
    kept, and written back, so such records stay readable; never shown to the model again."""

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"call": self.call.to_json(), "state": self.state.value}
        if self.outcome is not None:
            data["outcome"] = outcome_to_json(self.outcome)
        if self.resolved is not None:
            data["resolved"] = outcome_to_json(self.resolved)
        if self.note:
            data["note"] = self.note
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CallState:
        return cls(
            call=ToolCall.from_json(data["call"]),
            state=CallStage(data.get("state", "new")),
            outcome=outcome_from_json(data["outcome"]) if "outcome" in data else None,
            resolved=outcome_from_json(data["resolved"]) if "resolved" in data else None,
            note=data.get("note", ""),
        )


@dataclass
class Cursor:
    """Where the task's loop is: enough to resume it on any replica without repeating a side effect."""

    phase: Phase = Phase.INIT
    """init (no session yet) | thinking (step started, no reply) | acting (reply checkpointed)."""
    step: int = 0
    ctx_count: int = 0
    """Messages known to be in the session log; an append is detected after a crash by comparing."""
    reply: ModelReply | None = None
    reply_appended: bool = False
    calls: list[CallState] = field(default_factory=list)
    signatures: dict[str, int] = field(default_factory=dict)
    """Times each (tool, arguments) was issued: loop detection."""
    contract_failures: dict[str, int] = field(default_factory=dict)
    """Consecutive CONTRACT failures per tool: reflective retries used."""
    failed: dict[str, str] = field(default_factory=dict)
    """(tool, arguments) that failed with ENGINEERING -> code: never re-issued."""
    pinned: list[str] = field(default_factory=list)
    """Tools offered on every later step (fallbacks, read_payload after an offload)."""
    raw_tokens: int = 0
    """Tokens the session would hold had every tool output been appended raw (for the comparison)."""

    def to_json(self) -> str:
        data: dict[str, Any] = {
            "phase": self.phase.value,
            "step": self.step,
            "ctx": self.ctx_count,
            "reply": reply_to_json(self.reply) if self.reply is not None else None,
            "reply_appended": self.reply_appended,
            "calls": [c.to_json() for c in self.calls],
            "sigs": self.signatures,
            "contract": self.contract_failures,
            "failed": self.failed,
            "pinned": self.pinned,
            "raw": self.raw_tokens,
        }
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Cursor:
        if not text:
            return cls()
        data = json.loads(text)
        return cls(
            phase=Phase(data.get("phase", "init")),
            step=int(data.get("step", 0)),
            ctx_count=int(data.get("ctx", 0)),
            reply=reply_from_json(data["reply"]) if data.get("reply") else None,
            reply_appended=bool(data.get("reply_appended", False)),
            calls=[CallState.from_json(c) for c in data.get("calls", [])],
            signatures={k: int(v) for k, v in data.get("sigs", {}).items()},
            contract_failures={k: int(v) for k, v in data.get("contract", {}).items()},
            failed=dict(data.get("failed", {})),
            pinned=list(data.get("pinned", [])),
            raw_tokens=int(data.get("raw", 0)),
        )


# --- the task record ------------------------------------------------------------------------------


@dataclass
class TaskRecord:
    """Everything stored for a task (the hash, parsed)."""

    task_id: str
    agent_id: str
    goal: str
    status: TaskStatus
    fence: int = 0
    step: int = 0
    usage: Usage = field(default_factory=Usage)
    answer: str = ""
    error: AgentmeshError | None = None
    session_id: str = ""
    request_id: str = ""
    traceparent: str = ""
    token_budget: int = 0
    max_steps: int = 0
    create_time_ms: int = 0
    update_time_ms: int = 0
    last_sequence: int = 0
    owner: str = ""
    lease_until_ms: int = 0
    runs: int = 0
    pending: PendingApproval | None = None
    cursor: Cursor = field(default_factory=Cursor)
    creator: str = ""
    """The subject of the token that started the task; "" for a task stored before creators were
    recorded (such a task is for operators only: dispatcher_svc/access.py)."""
    creator_agent: str = ""
    """The agent id of that token when it was an agent's ("" for operators and old tasks)."""

    def view(self) -> Task:
        return Task(
            task_id=self.task_id,
            agent_id=self.agent_id,
            goal=self.goal,
            status=self.status,
            step=self.step,
            usage=self.usage,
            answer=self.answer,
            error=self.error,
            session_id=self.session_id,
            request_id=self.request_id,
            pending_approval=self.pending,
            last_sequence=self.last_sequence,
            create_time_ms=self.create_time_ms,
            update_time_ms=self.update_time_ms,
            created_by=self.creator,
        )

    @classmethod
    def from_hash(cls, raw: Mapping[bytes, bytes]) -> TaskRecord:
        h = {k.decode(): v.decode("utf-8", "replace") for k, v in raw.items()}

        def num(name: str) -> int:
            value = h.get(name, "")
            return int(value) if value else 0

        usage = h.get("usage", "")
        error = h.get("error", "")
        pending = h.get("pending", "")
        return cls(
            task_id=h.get("task_id", ""),
            agent_id=h.get("agent_id", ""),
            goal=h.get("goal", ""),
            status=TaskStatus(num("status")),
            fence=num("fence"),
            step=num("step"),
            usage=Usage(*(int(x) for x in usage.split(","))) if usage else Usage(),
            answer=h.get("answer", ""),
            error=error_from_json(json.loads(error)) if error else None,
            session_id=h.get("session_id", ""),
            request_id=h.get("request_id", ""),
            traceparent=h.get("traceparent", ""),
            token_budget=num("token_budget"),
            max_steps=num("max_steps"),
            create_time_ms=num("create_ms"),
            update_time_ms=num("update_ms"),
            last_sequence=num("last_sequence"),
            owner=h.get("owner", ""),
            lease_until_ms=num("lease_until"),
            runs=num("runs"),
            pending=pending_from_json(json.loads(pending)) if pending else None,
            cursor=Cursor.from_json(h.get("cursor", "")),
            creator=h.get("creator", ""),
            creator_agent=h.get("creator_agent", ""),
        )


def fields_of(
    *,
    status: TaskStatus | None = None,
    step: int | None = None,
    usage: Usage | None = None,
    answer: str | None = None,
    error: AgentmeshError | bool | None = False,
    pending: PendingApproval | bool | None = False,
    cursor: Cursor | None = None,
    update_ms: int | None = None,
    **extra: str | int,
) -> dict[str, str]:
    """Hash fields for a commit; `error=None` / `pending=None` clear them, False leaves them."""
    out: dict[str, str] = {k: str(v) for k, v in extra.items()}
    if status is not None:
        out["status"] = str(int(status))
    if step is not None:
        out["step"] = str(step)
    if usage is not None:
        out["usage"] = f"{usage.input_tokens},{usage.output_tokens}"
    if answer is not None:
        out["answer"] = answer
    if error is not False:
        out["error"] = json.dumps(error_to_json(error), ensure_ascii=False) if isinstance(error, AgentmeshError) else ""
    if pending is not False:
        out["pending"] = json.dumps(pending_to_json(pending)) if isinstance(pending, PendingApproval) else ""
    if cursor is not None:
        out["cursor"] = cursor.to_json()
    if update_ms is not None:
        out["update_ms"] = str(update_ms)
    return out


@dataclass(frozen=True)
class Created:
    """What `TaskStore.create` did."""

    created: bool
    """False: a task with this id existed already (the queue got a harmless extra entry)."""
    taken: list[tuple[str, str]]
    """Queue entries (entry id, task id) read for this replica in the same step, to run here."""


@dataclass(frozen=True)
class CommitResult:
    fence: int
    status: TaskStatus
    last_sequence: int


class TaskStore:
    """Reads and fenced writes of task hashes and event streams."""

    def __init__(
        self,
        store: Store,
        settings: DispatcherSettings,
        feed: LocalFeed | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.metrics = metrics or Metrics()  # every status a commit enters (`agentmesh.tasks`)
        self.feed = feed if feed is not None else LocalFeed()  # also gets this process's committed events
        self._commit = store.script("dispatcher_commit", COMMIT_LUA, durable=True)
        self._acquire = store.script("dispatcher_acquire", ACQUIRE_LUA, durable=True)
        self._due = store.script("dispatcher_due_approvals", DUE_APPROVALS_LUA)
        self.index_key = store.keys.tasks_index()
        """Every task id by create time (ms), written before the task: ListTasks' index (task_index.py)."""
        self.waiting_key = f"{store.keys.prefix}:tasks:waiting"
        """Sorted set of parked tasks ("<task id> <approval id>") scored by their approval's expiry (ms):
        the expiry sweeper's index, a superset of the parked tasks (a member is added before the task is
        parked and removed only after it left WAITING_APPROVAL: a crash leaves a stale member, which the
        sweeper drops, never a parked task it cannot find)."""

    def _keys(self, task_id: str) -> list[str]:
        return [self.store.keys.task(task_id), self.store.keys.task_events(task_id)]

    def _commit_keys(self, task_id: str) -> list[str]:
        return [*self._keys(task_id), self.store.keys.task_prompts(task_id)]

    async def load(self, task_id: str) -> TaskRecord:
        """The task; NotFoundError naming task_id when there is none."""
        raw: Any = await self.store.call("load task", self.store.redis.hgetall(self.store.keys.task(task_id)))
        if not raw:
            raise task_not_found(task_id)
        return TaskRecord.from_hash(raw)

    async def exists(self, task_id: str) -> bool:
        found: Any = await self.store.call("task exists", self.store.redis.exists(self.store.keys.task(task_id)))
        return bool(found)

    async def status(self, task_id: str) -> tuple[TaskStatus, int]:
        """The task's status and last sequence (a light read); NotFoundError naming task_id."""
        raw: Any = await self.store.call(
            "task status", self.store.redis.hmget(self.store.keys.task(task_id), list(STATUS_FIELDS))
        )
        return parse_status(task_id, raw)

    async def creator(self, task_id: str) -> tuple[str, str]:
        """(creator subject, creator agent id) of the task (a light read); NotFoundError naming task_id."""
        raw: Any = await self.store.call(
            "task creator",
            self.store.redis.hmget(self.store.keys.task(task_id), ["status", "creator", "creator_agent"]),
        )
        if raw[0] is None:
            raise task_not_found(task_id)
        creator, agent = (value.decode("utf-8", "replace") if value else "" for value in raw[1:])
        return creator, agent

    async def acquire(
        self, task_id: str, consumer: str, *, lease_ms: int, if_pending: TaskEvent, if_taken_over: TaskEvent
    ) -> TaskRecord | TaskStatus | None:
        """Takes the task for `consumer` in one round trip: the record with the new fence; the status
        when there is nothing to run (finished, parked, gone: UNSPECIFIED); None when a live owner holds it."""
        args: list[str | int] = [
            consumer,
            lease_ms,
            self.settings.event_maxlen,
            event_to_json(if_pending),
            event_to_json(if_taken_over),
            if_pending.time_ms,
        ]
        async with self.store.guard("acquire task"):
            reply: Any = await self._acquire(keys=self._keys(task_id), args=args)
        code = int(reply[0])
        if code == _MISSING:
            return TaskStatus.UNSPECIFIED
        if code == 0:
            return TaskStatus(int(reply[1]))
        if code == -1:
            return None
        flat = reply[2]
        record = TaskRecord.from_hash(dict(zip(flat[::2], flat[1::2], strict=True)))
        self.metrics.task_status(record.agent_id, TaskStatus.RUNNING.name)
        if self.feed.subscribers(task_id):  # its watchers here get the event from memory, as a commit's
            appended = if_pending if int(reply[3]) == TaskStatus.PENDING else if_taken_over
            self.feed.publish(task_id, [appended.with_sequence(record.last_sequence)])
        return record

    async def load_scripts(self) -> None:
        """Loads the scripts `create` sends by SHA inside a pipeline (a NOSCRIPT there is recovered
        from, but costs a second round trip)."""
        async with self.store.guard("load scripts"):
            await self.store.redis.script_load(COMMIT_LUA)
            await self.store.redis.script_load(ENQUEUE_LUA)

    async def create(
        self, task_id: str, fields: Mapping[str, str], event: TaskEvent, queue: TaskQueue, *, take: bool = False
    ) -> Created:
        """Creates the task and queues it in one round trip; with `take`, also reads the next new
        queue entry for this replica (normally this task's own) in that round trip."""
        args: list[str | int | bytes] = ["", "", "0", 0, self.settings.event_maxlen, 0, len(fields), "", ""]
        for key, value in fields.items():
            args += [key, value]
        args.append(event_to_json(event))
        keys = self._commit_keys(task_id)
        queue_args = [task_id, queue.group if take else "", queue.consumer]
        listed = {task_id: int(fields.get("create_ms") or 0)}  # ListTasks' index (task_index.py), first
        async with self.store.guard("create task"):
            if self.store.cluster is not None or self.store.settings.cluster_wait_replicas:
                # Cluster: task and queue on different primaries (a pipeline could expose the entry
                # first); durable writes wait for replicas. So the task first, then its entry.
                await self.store.redis.zadd(self.index_key, listed, nx=True)
                commit_reply = await self._commit(keys=keys, args=args)
                queue_reply = await queue.enqueue_script(keys=[queue.key], args=queue_args)
                return Created(created=int(commit_reply[0]) == _OK, taken=taken_entries(queue_reply))
            # EVALSHA directly: a pipeline given the Script object would send SCRIPT EXISTS every time.
            pipe = self.store.redis.pipeline(transaction=False)
            pipe.zadd(self.index_key, listed, nx=True)
            pipe.evalsha(self._commit.sha, len(keys), *keys, *args)
            pipe.evalsha(queue.enqueue_script.sha, 1, queue.key, *queue_args)
            index_reply, commit_reply, queue_reply = await pipe.execute(raise_on_error=False)
            if isinstance(index_reply, Exception):
                raise index_reply
            if isinstance(commit_reply, rexc.NoScriptError) or isinstance(queue_reply, rexc.NoScriptError):
                # Redis restarted or was flushed since the scripts were loaded. If the entry went out
                # before the task existed, another replica's run of it finds nothing: so create the
                # task now (the Script objects load themselves), then queue it (again).
                if isinstance(commit_reply, rexc.NoScriptError):
                    commit_reply = await self._commit(keys=keys, args=args)
                taken = taken_entries(queue_reply) if not isinstance(queue_reply, Exception) else []
                again = [task_id, "" if taken else queue_args[1], queue.consumer]  # one entry per slot
                queue_reply = await queue.enqueue_script(keys=[queue.key], args=again)
            else:
                taken = []
            for reply in (commit_reply, queue_reply):
                if isinstance(reply, Exception):
                    raise reply
        created = int(commit_reply[0]) == _OK
        if created:
            self.metrics.task_status(fields.get("agent_id", ""), TaskStatus.PENDING.name)
        return Created(created=created, taken=taken + taken_entries(queue_reply))

    async def redis_time_ms(self) -> int:
        now: Any = await self.store.call("time", self.store.redis.time())
        seconds, micros = now
        return int(seconds) * 1000 + int(micros) // 1000

    async def commit(
        self,
        task_id: str,
        *,
        fence: int | None,
        fields: Mapping[str, str] | None = None,
        events: Sequence[TaskEvent] = (),
        expect_status: TaskStatus | None = None,
        bump_fence: bool = False,
        lease_ms: int = 0,
        ttl_s: int = 0,
        prompt: tuple[int, bytes] | None = None,
        agent: str = "",
    ) -> CommitResult:
        """Applies `fields` and appends `events` atomically if the task's fence is still `fence`;
        `prompt` (step, record: dispatcher_svc.prompts) stores a step's prompt in the same write. A
        status set is counted in the metrics under `agent`. `fence=None` creates the task
        (TaskExistsError if it exists); StaleOwnerError when another owner took over,
        WrongStatusError when `expect_status` does not hold."""
        args: list[str | int | bytes] = [
            "" if fence is None else str(fence),
            "" if expect_status is None else str(int(expect_status)),
            "1" if bump_fence else "0",
            lease_ms,
            self.settings.event_maxlen,
            ttl_s,
            len(fields or {}),
            str(prompt[0]) if prompt is not None else "",
            prompt[1] if prompt is not None else "",
        ]
        for key, value in (fields or {}).items():
            args += [key, value]
        args += [event_to_json(e) for e in events]
        async with self.store.guard("commit task"):
            reply = await self._commit(keys=self._commit_keys(task_id), args=args)
        code, current_fence, status_num, last_seq = (int(x) for x in reply)
        status = TaskStatus(status_num) if status_num in TaskStatus._value2member_map_ else TaskStatus.UNSPECIFIED
        if code == _OK:
            entered = (fields or {}).get("status")
            if entered:
                self.metrics.task_status(agent, TaskStatus(int(entered)).name)
            if events and self.feed.subscribers(task_id):  # most commits have no watcher here
                first = last_seq - len(events) + 1
                self.feed.publish(task_id, [e.with_sequence(first + i) for i, e in enumerate(events)])
            return CommitResult(current_fence, status, last_seq)
        if code == _STALE:
            raise StaleOwnerError(
                f"task {task_id}: fence {fence} is stale (now {current_fence}); another owner took over",
                metadata={"task_id": task_id, "fence": str(fence), "current_fence": str(current_fence)},
            )
        if code == _WRONG_STATUS:
            raise WrongStatusError(
                f"task {task_id} is {status.name}, not {expect_status.name if expect_status else ''}", status
            )
        if code == _MISSING:
            raise task_not_found(task_id)
        raise TaskExistsError(f"task {task_id} already exists", metadata={"status": status.name})

    # -- the index of parked tasks, read by the approval-expiry sweeper ----------------------------

    async def index_approval(self, task_id: str, approval_id: str, expire_ms: int) -> None:
        """Adds (or re-scores) a parked task: due when its approval expires."""
        score = expire_ms or int(time.time() * 1000) + UNKNOWN_EXPIRY_RECHECK_MS
        async with self.store.guard("index approval"):
            await self.store.redis.zadd(self.waiting_key, {_waiting_member(task_id, approval_id): score})

    async def reindex_approval(self, task_id: str, approval_id: str, due_ms: int) -> None:
        """Makes an indexed task due again at `due_ms` (never re-adds one removed meanwhile)."""
        async with self.store.guard("index approval"):
            await self.store.redis.zadd(self.waiting_key, {_waiting_member(task_id, approval_id): due_ms}, xx=True)

    async def unindex_approval(self, task_id: str, approval_id: str) -> None:
        async with self.store.guard("unindex approval"):
            await self.store.redis.zrem(self.waiting_key, _waiting_member(task_id, approval_id))

    async def due_approvals(self, limit: int, hold_ms: int) -> list[tuple[str, str]]:
        """Parked tasks whose approval is due, as (task id, approval id), taken for `hold_ms`."""
        async with self.store.guard("due approvals"):
            reply: Any = await self._due(keys=[self.waiting_key], args=[hold_ms, limit])
        due: list[tuple[str, str]] = []
        for raw in reply or ():
            task_id, _, approval_id = (raw.decode() if isinstance(raw, bytes) else str(raw)).partition(" ")
            due.append((task_id, approval_id))
        return due


def _waiting_member(task_id: str, approval_id: str) -> str:
    return f"{task_id} {approval_id}"  # task ids never hold a space
