"""Rolling upgrades: records an earlier release wrote to Redis stay readable by the current code.

During a rolling upgrade old and new replicas share one Redis, and a new replica picks up tasks,
idempotency records, approvals, sessions and payloads the old release wrote. So the rule is:

    Every later change to a stored format (key names, hash fields, JSON documents, stream
    entries, list/set/zset members) keeps these fixtures readable. A fixture is never edited or
    regenerated: when a format changes, generate a NEW fixture file (fixtures/redis_v2.json, then
    redis_v3.json, ...) with tests/compat/make_fixtures.py run against the release that writes the
    new format, and keep every older file. Each file found is tested.

A fixture (fixtures/redis_v<N>.json, see make_fixtures.py) holds `keys`, every key the writing
release stored (type, value, TTL), and `records`, what that release read back through its own
APIs. Each test loads one fixture into the emptied test Redis (hashes, lists, sets, zsets and
strings with the same types; streams by XADD with the explicit entry ids, plus their last id and
consumer groups), reads the records through the current APIs and asserts they read the same:
domain objects are compared by the attributes the fixture names (attributes added since are fine;
a changed or lost value fails with its path). Then the current code keeps working on them: it
takes over a queued task, appends to an old session, refuses to re-decide a decided approval.
"""

from __future__ import annotations

import base64
import contextlib
import enum
import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, cast

import pytest
import redis.asyncio

from agentmesh.chat import ToolCall
from agentmesh.config import ContextSettings, DispatcherSettings, RedisSettings
from agentmesh.errors import FailedPreconditionError
from agentmesh.payloads import is_json_media_type
from agentmesh.store import Store
from context_svc.engine import ContextEngine
from context_svc.model import Caller as ContextCaller
from context_svc.model import Message, Role
from dispatcher_svc.events import EventLog
from dispatcher_svc.loop import idempotency_key
from dispatcher_svc.model import EventKind, TaskEvent, TaskStatus
from dispatcher_svc.queue import TaskQueue
from dispatcher_svc.tasks import TaskRecord, TaskStore
from tool_svc.approvals import ApprovalBook
from tool_svc.call import CallState
from tool_svc.idempotency import Idempotency
from tool_svc.model import Caller, CallRequest, Permission, ToolDef, arguments_sha256, call_sha256
from tool_svc.registry import RegisteredTool
from tool_svc.validation import SchemaCheck

FIXTURES_DIR = Path(__file__).parent / "fixtures"
FIXTURE_FILES = sorted(FIXTURES_DIR.glob("redis_v*.json"), key=lambda p: int(p.stem.removeprefix("redis_v")))
UPGRADED = "compat-upgraded-replica"
"""Consumer name of the (new) replica reading the old records."""


@cache
def read_fixture(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def test_fixtures_exist() -> None:
    assert [p.name for p in FIXTURE_FILES][:1] == ["redis_v1.json"], "the first fixture must stay"


# --- loading a fixture ------------------------------------------------------------------------------


def decode(value: Any) -> bytes:
    """A dumped byte string: UTF-8 text, or {"base64": ...}."""
    if isinstance(value, str):
        return value.encode("utf-8")
    return base64.b64decode(value["base64"])


def encode(value: bytes) -> Any:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(value).decode("ascii")}


async def restore(r: redis.asyncio.Redis, keys: Mapping[str, Any]) -> None:
    """Writes every dumped key with its type, value and TTL."""
    pipe = r.pipeline(transaction=False)
    for key, item in keys.items():
        kind, value = item["type"], item["value"]
        if kind == "string":
            pipe.set(key, decode(value))
        elif kind == "hash":
            pipe.hset(key, mapping={field: decode(v) for field, v in value.items()})
        elif kind == "list":
            pipe.rpush(key, *[decode(v) for v in value])
        elif kind == "set":
            pipe.sadd(key, *[decode(v) for v in value])
        elif kind == "zset":
            pipe.zadd(key, {decode(m["member"]): m["score"] for m in value})
        elif kind == "stream":
            assert value["entries"], f"{key}: an empty stream cannot be restored by XADD"
            for entry in value["entries"]:
                pipe.xadd(key, {field: decode(v) for field, v in entry["fields"].items()}, id=entry["id"])
            pipe.execute_command("XSETID", key, value["last_generated_id"])
            for group in value["groups"]:
                pipe.xgroup_create(key, group["name"], id=group["last_delivered_id"])
                for consumer in group["consumers"]:
                    pipe.xgroup_createconsumer(key, group["name"], consumer)
        else:
            raise AssertionError(f"{key}: unknown type {kind} in the fixture")
        if item["ttl_s"]:
            pipe.expire(key, item["ttl_s"])
    await pipe.execute()
    for key, item in keys.items():
        stored_type: Any = await r.type(key)
        assert stored_type.decode() == item["type"], key
    assert await r.dbsize() == len(keys)


@dataclass
class Loaded:
    store: Store
    keys: dict[str, Any]
    records: dict[str, Any]


@pytest.fixture(params=FIXTURE_FILES, ids=lambda p: p.stem)
async def loaded(request: pytest.FixtureRequest, redis_url: str) -> AsyncIterator[Loaded]:
    """The fixture's keys in the emptied test Redis, and a Store on it."""
    fixture = read_fixture(request.param)
    store = await Store.connect(RedisSettings(url=redis_url), "dev")
    try:
        await restore(store.redis, fixture["keys"])
        yield Loaded(store, fixture["keys"], fixture["records"])
    finally:
        await store.close()


# --- comparing what the current code reads with what the writer read -----------------------------


def assert_same(actual: Any, expected: Any, where: str) -> None:
    """`actual` (read by the current code) holds `expected` (the writer's read, as JSON).

    Objects are compared by the attributes `expected` names, enums by name, errors by their
    attributes, byte strings as dumped; mappings must have the same keys, sequences the same length.
    """
    if isinstance(actual, bytes):
        assert encode(actual) == expected, where
    elif isinstance(actual, enum.StrEnum):
        # By name as the writer recorded its enums, or by value for a string the reader now types
        # (Cursor.phase, CallState.state became Phase and CallStage: the stored strings are theirs).
        assert expected in (actual.name, actual.value), f"{where}: {actual.name} != {expected}"
    elif isinstance(actual, enum.Enum):
        assert actual.name == expected, f"{where}: {actual.name} != {expected}"
    elif isinstance(expected, dict):
        if isinstance(actual, Mapping):
            assert sorted(str(k) for k in actual) == sorted(expected), (
                f"{where}: keys {list(actual)} != {list(expected)}"
            )
            for k, v in actual.items():
                assert_same(v, expected[str(k)], f"{where}[{k!r}]")
        else:
            for name, value in expected.items():
                assert hasattr(actual, name), f"{where}.{name}: no such attribute on {type(actual).__name__}"
                assert_same(getattr(actual, name), value, f"{where}.{name}")
    elif isinstance(expected, list):
        items = sorted(actual, key=str) if isinstance(actual, (set, frozenset)) else list(actual)
        assert len(items) == len(expected), f"{where}: {len(items)} items != {len(expected)}"
        for i, (a, e) in enumerate(zip(items, expected, strict=True)):
            assert_same(a, e, f"{where}[{i}]")
    else:
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"
        assert isinstance(actual, bool) == isinstance(expected, bool), f"{where}: {actual!r} vs {expected!r}"


# --- dispatcher_svc: tasks, event logs, the queue, the parked-task index -----------------------------


def running_event(task_id: str, message: str) -> TaskEvent:
    return TaskEvent(
        task_id=task_id,
        sequence=0,
        kind=EventKind.STATUS,
        time_ms=1,
        status=TaskStatus.RUNNING,
        message=message,
        attributes={"owner": UPGRADED},
    )


async def test_tasks_and_event_logs_read_back(loaded: Loaded) -> None:
    tasks = TaskStore(loaded.store, DispatcherSettings())
    events = EventLog(loaded.store, tasks, heartbeat_interval_s=1.0)
    written = loaded.records["dispatcher"]["tasks"]
    assert written
    for task_id, want in written.items():
        record = await tasks.load(task_id)
        assert_same(record, want["record"], f"{task_id}.record")
        assert_same(record.view(), want["view"], f"{task_id}.view")
        status, last_sequence = await tasks.status(task_id)
        assert (status.name, last_sequence) == (want["record"]["status"], want["record"]["last_sequence"])

        stored = await events.read(task_id)
        assert_same(stored, want["events"], f"{task_id}.events")
        assert [e.sequence for e in stored] == list(range(1, last_sequence + 1))
        # A watcher of the upgraded replica gets the whole log; a finished task's watch ends by itself.
        watched: list[TaskEvent] = []
        watch = cast(AsyncGenerator[TaskEvent, None], events.watch(task_id))
        async with contextlib.aclosing(watch) as stream:
            async for item in stream:
                watched.append(item)
                if len(watched) == len(stored) and not status.terminal:
                    break
        assert_same(watched, want["events"], f"{task_id}.watch")

        # The state and the log agree, as the writer left them.
        last = stored[-1]
        assert last.status == record.status
        if record.status == TaskStatus.SUCCEEDED:
            assert record.answer and [e.message for e in stored if e.kind == EventKind.ANSWER] == [record.answer]
        if record.status == TaskStatus.FAILED:
            assert record.error is not None and last.error is not None and last.error.code == record.error.code
        if record.status == TaskStatus.WAITING_APPROVAL:
            assert record.pending is not None and last.kind == EventKind.STATUS
            assert [c.state for c in record.cursor.calls] == ["waiting"]

        # Taking the task: finished and parked ones are left alone (nothing written).
        if status != TaskStatus.PENDING:
            taken = await tasks.acquire(
                task_id,
                UPGRADED,
                lease_ms=1000,
                if_pending=running_event(task_id, "taken"),
                if_taken_over=running_event(task_id, "taken over"),
            )
            assert taken == status, f"{task_id}: acquire of a {status.name} task gave {taken!r}"
            assert (await tasks.status(task_id)) == (status, last_sequence)


async def test_queued_task_is_taken_over_and_parked_task_indexed(loaded: Loaded) -> None:
    settings = DispatcherSettings()
    tasks = TaskStore(loaded.store, settings)
    group = loaded.records["dispatcher"]["consumer_group"]
    queue = TaskQueue(loaded.store, group, UPGRADED)
    dumped = loaded.keys[loaded.store.keys.tasks_stream()]["value"]

    entries = await queue.read(count=10, block_ms=10)
    assert entries == [(e["id"], e["fields"]["task"]) for e in dumped["entries"]]
    assert [task_id for _, task_id in entries] == loaded.records["dispatcher"]["queued"]
    for msg_id, task_id in entries:
        before = await tasks.load(task_id)
        assert before.status == TaskStatus.PENDING
        taken = await tasks.acquire(
            task_id,
            UPGRADED,
            lease_ms=1000,
            if_pending=running_event(task_id, "taken"),
            if_taken_over=running_event(task_id, "taken over"),
        )
        assert isinstance(taken, TaskRecord)
        assert (taken.status, taken.owner) == (TaskStatus.RUNNING, UPGRADED)
        assert (taken.fence, taken.runs, taken.last_sequence) == (
            before.fence + 1,
            before.runs + 1,
            before.last_sequence + 1,
        )
        assert (taken.goal, taken.agent_id, taken.session_id) == (before.goal, before.agent_id, before.session_id)
        assert taken.cursor == before.cursor
        await queue.done(msg_id)

    # The expiry sweeper finds every parked task (made due now; an unknown member is not re-added).
    waiting = [(w["task_id"], w["approval_id"]) for w in loaded.records["dispatcher"]["waiting"]]
    assert waiting
    for task_id, approval_id in waiting:
        record = await tasks.load(task_id)
        assert record.status == TaskStatus.WAITING_APPROVAL
        assert record.pending is not None and record.pending.approval_id == approval_id
        await tasks.reindex_approval(task_id, approval_id, due_ms=0)
    assert sorted(await tasks.due_approvals(limit=100, hold_ms=60_000)) == sorted(waiting)


# --- tool_svc: idempotency records and approvals ---------------------------------------------------


def tool_call_state(written: Mapping[str, Any]) -> CallState:
    """The same ExecuteTool again, as the upgraded tool_svc builds it."""
    tool = written["tool"]
    spec = ToolDef(
        name=tool["name"],
        description=tool["description"],
        input_schema=tool["input_schema"],
        permission=Permission(group=tool["group"], access=tool["access"]),
        impact=tool["impact"],
        requires_approval=tool["requires_approval"],
        executor="builtin",
        builtin=tool["name"],
    )
    caller = written["caller"]
    arguments = written["arguments"]
    return CallState(
        request=CallRequest(**written["request"]),
        caller=Caller(
            subject=caller["subject"],
            agent_id=caller["agent_id"],
            instance=caller["instance"],
            environment=caller["environment"],
            permissions=tuple(caller["permissions"]),
            roles=frozenset(caller["roles"]),
        ),
        service_environment="dev",
        tool=RegisteredTool(spec, SchemaCheck.compile(spec.input_schema), None, "config"),
        arguments=arguments,
        arguments_sha256=arguments_sha256(arguments),
        call_sha256=call_sha256(spec.name, arguments),
    )


async def test_idempotency_records_replay(loaded: Loaded) -> None:
    tool = loaded.records["tool"]
    approvals = ApprovalBook(loaded.store, tool["approval_ttl_s"])
    idempotency = Idempotency(
        loaded.store,
        approvals,
        ttl_s=86400,
        lease_s=30.0,
        approval_ttl_s=tool["approval_ttl_s"],
        remaining=lambda: 0.5,
    )
    assert {w["state"] for w in tool["idempotency"]} >= {"done", "pending"}
    for written in tool["idempotency"]:
        key = written["idempotency_key"]
        # The dispatcher resuming the task sends the same key, bound to the same hash.
        dispatched = written["dispatched_as"]
        request = written["request"]
        plan = ToolCall(request["call_id"], request["name"], request["arguments_json"])
        assert idempotency_key(dispatched["task_id"], dispatched["step"], dispatched["index"], plan) == key
        call = tool_call_state(written)
        assert call.call_sha256 == written["call_sha256"], f"{key}: the key's argument hash changed"

        outcome = await idempotency(call)
        assert outcome is not None, f"{key}: the {written['state']} record was not recognised; the call would run again"
        assert not call.finalizers, f"{key}: the key was claimed again"
        assert_same(outcome, written["outcome"], f"{key}.outcome")
        if written["state"] == "done":
            assert call.stats.replayed
            assert (call.stats.attempts, call.stats.output_bytes) == (written["attempts"], written["output_bytes"])


async def test_approvals_read_back(loaded: Loaded) -> None:
    tool = loaded.records["tool"]
    approvals = ApprovalBook(loaded.store, tool["approval_ttl_s"])
    assert {a["state"] for a in tool["approvals"].values()} >= {"pending", "approved"}
    for approval_id, want in tool["approvals"].items():
        record = await approvals.get(approval_id)
        assert_same(record, want, approval_id)
        if record.state in ("approved", "denied"):
            operator = Caller(subject="compat-other-operator", roles=frozenset({"operator"}))
            with pytest.raises(FailedPreconditionError, match="already"):
                await approvals.decide(
                    approval_id,
                    approve=False,
                    approver=operator,
                    reason="again",
                    arguments_sha256=record.pending.arguments_sha256,
                )


# --- context_svc: sessions, their logs, index and summary; payloads ----------------------------------


async def test_sessions_read_back_and_build_context(loaded: Loaded) -> None:
    engine = ContextEngine(ContextSettings(), loaded.store)
    sessions = loaded.records["context"]["sessions"]
    assert sessions
    for session_id, want in sessions.items():
        caller = ContextCaller(**want["caller"])
        session, entities = await engine.get_session(caller, session_id)
        assert_same(session, want["session"], f"{session_id}.session")
        assert entities == want["entities"]
        messages = await engine.sessions.messages(session_id, 0, session.message_count - 1)
        assert_same(messages, want["messages"], f"{session_id}.messages")
        summary, version = await engine.sessions.summary(session_id)
        assert_same(summary, want["summary"], f"{session_id}.summary")
        assert version == want["summary_version"]

        # The index (what BuildContext reads instead of the contents) matches the log.
        read = await engine.sessions.load(session_id)
        assert read.session == session
        assert read.entries == [m.index_entry() for m in messages[session.summarized_upto + 1 :]]
        assert all(read.tail[i] == messages[i] for i in read.tail)

        view = await engine.build_context(caller, session_id)
        system = view.messages[0]
        assert system.role == Role.SYSTEM and session.goal in system.content and session.system_prompt in system.content
        kept = [m for m in view.messages if m.index >= 0]
        assert kept and kept[-1].index == session.message_count - 1
        assert kept == messages[kept[0].index :], "the recent window must be the stored messages"
        if summary is not None:
            assert view.summarized_messages == kept[0].index > summary.last_index
            block = view.messages[1]  # the summary block renders the stored summary's facts
            assert block.role == Role.SYSTEM and any(fact in block.content for fact in summary.key_data)

        # The upgraded replica appends to the old log.
        index, tokens = await engine.append_message(caller, session_id, Message(Role.USER, "Thanks, that helps."))
        assert index == session.message_count and tokens > 0
        after, _ = await engine.get_session(caller, session_id)
        assert (after.message_count, after.total_tokens) == (index + 1, session.total_tokens + tokens)


async def test_payloads_read_back(loaded: Loaded) -> None:
    engine = ContextEngine(ContextSettings(), loaded.store)
    for session_id, want in loaded.records["context"]["sessions"].items():
        caller = ContextCaller(**want["caller"])
        payloads = want["payloads"]
        assert payloads
        assert await engine.payloads.list_shas(session_id) == sorted(p["ref"]["sha256"] for p in payloads)
        for written in payloads:
            ref_id = written["ref"]["ref_id"]
            meta, content, partial = await engine.get_payload(caller, session_id, ref_id)
            assert_same(meta, written["ref"], ref_id)
            assert_same(content, written["content"], f"{ref_id}.content")
            assert not partial and len(content) == meta.size_bytes
            if is_json_media_type(meta.media_type):
                _, selected, _ = await engine.get_payload(caller, session_id, ref_id, json_path="$")
                assert json.loads(selected) == [json.loads(content)]
        # Every ref in the log points to a stored payload.
        messages = await engine.sessions.messages(session_id, 0, want["session"]["message_count"] - 1)
        refs = [m.ref for m in messages if m.ref is not None]
        assert refs
        for ref in refs:
            meta, _, _ = await engine.get_payload(caller, session_id, ref.ref_id)
            assert (meta.sha256, meta.size_bytes, meta.media_type) == (ref.sha256, ref.size_bytes, ref.media_type)
