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
consumer groups), reads the records through the current APIs and asserts they read the same
(upgrade_helpers.assert_same): domain objects are compared by the attributes the fixture names
(attributes added since are fine; a changed or lost value fails with its path). Then the current
code keeps working on them: it takes over a queued task, appends to an old session, refuses to
re-decide a decided approval.

From redis_v3.json on (issue 18) a fixture also holds unknown outcomes: a key `unknown` under a
pending settlement answers OUTCOME_UNKNOWN with that settlement, one settled RAN replays the ran
output, a write in flight on an old replica is waited for while its heartbeat lives and becomes
unknown once it stops; a session's named appends answer a repeat with the original position; the
task parked on a settlement loads with a pending of kind `settlement`. Older fixtures have none of
these records: those checks find nothing to check there.

From redis_v4.json on (issues 20-23) tasks record their creator, sessions their owner and attached
tasks (another task's token is refused; an older session keeps its agent's rule), entity records
carry provenance (read back as the same known facts), and the audit stream `am:audit` reads back.

From redis_v5.json on (issue 45) a commit's events are one stream entry (`dispatcher.pack_events`, on by
default): entries `0-<last sequence>` with field `b`, beside single-event entries `e`.
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any, cast

import pytest

from agentmesh.audit import AuditLog
from agentmesh.chat import ToolCall
from agentmesh.clusterclient import BoundedCluster
from agentmesh.config import ContextSettings, DispatcherSettings, RedisSettings
from agentmesh.errors import AgentmeshError, ErrorCode, FailedPreconditionError, PermissionDeniedError
from agentmesh.payloads import is_json_media_type
from agentmesh.store import RedisClient, Store
from context_svc.engine import ContextEngine
from context_svc.facts.known import known_facts
from context_svc.model import Caller as ContextCaller
from context_svc.model import Message, Role
from context_svc.model import ToolOutcome as ContextOutcome
from dispatcher_svc.events import EventLog
from dispatcher_svc.model import CallStage, EventKind, TaskEvent, TaskStatus
from dispatcher_svc.queue import TaskQueue
from dispatcher_svc.run.loop import idempotency_key
from dispatcher_svc.run.names import qualified_call_id
from dispatcher_svc.tasks import TaskRecord, TaskStore
from tests.compat.upgrade_helpers import Loaded, assert_same, tool_call_state
from tool_svc.approvals import ApprovalBook, Settlement
from tool_svc.idempotency import Idempotency
from tool_svc.model import Caller, Output

FIXTURES_DIR = Path(__file__).parent / "fixtures"
FIXTURE_FILES = sorted(FIXTURES_DIR.glob("redis_v*.json"), key=lambda p: int(p.stem.removeprefix("redis_v")))
UPGRADED = "compat-upgraded-replica"
"""Consumer name of the (new) replica reading the old records."""
OPERATOR = Caller(subject="compat-upgraded-operator", roles=frozenset({"operator"}))


def test_fixtures_exist() -> None:
    assert [p.name for p in FIXTURE_FILES][:1] == ["redis_v1.json"], "the first fixture must stay"


def test_v3_fixture_holds_issue_18_records() -> None:
    """redis_v3.json has every record the checks of issue 18's formats look for (nothing passes empty)."""
    fixture = read_fixture(FIXTURES_DIR / "redis_v3.json")
    keys, records = fixture["keys"], fixture["records"]
    idempotency = records["tool"]["idempotency"]
    assert {w["state"] for w in idempotency} >= {"done", "pending", "unknown", "sent"}
    assert [w for w in idempotency if w["state"] == "done" and w.get("settlement") == "ran"]
    assert {a["kind"] for a in records["tool"]["approvals"].values()} >= {"call", "settlement"}
    assert [a for a in records["tool"]["approvals"].values() if a["settlement"] == "ran"]
    assert records["dispatcher"]["settlements"]
    assert [s for s in records["context"]["sessions"].values() if s.get("dedupe")]
    assert [k for k in keys if k.startswith("am:idem:{") and k.endswith(":hb")]
    assert [k for k in keys if k.startswith("am:sess:{") and k.endswith(":dedupe")]


def test_v4_fixture_holds_issue_20_23_records() -> None:
    """redis_v4.json has every record the checks of issues 20-23's formats look for."""
    fixture = read_fixture(FIXTURES_DIR / "redis_v4.json")
    keys, records = fixture["keys"], fixture["records"]
    tasks = records["dispatcher"]["tasks"]
    assert all(t["record"]["creator"] and t["view"]["created_by"] == t["record"]["creator"] for t in tasks.values())
    assert [t for t in tasks.values() if t["record"]["creator_agent"]]
    sessions = records["context"]["sessions"]
    assert all(s["session"]["owner"] and s["session"]["tasks"] == [sid] for sid, s in sessions.items())
    known = [fact for s in sessions.values() for fact in s["known"]]
    assert [f for f in known if f["corrected_from"]] and [f for f in known if f["negated"]]
    assert [f for f in known if f["key"].startswith("~")] and {f["role"] for f in known} == {"user", "assistant"}
    assert {e["outcome"] for e in records["audit"]} >= {"ok", "PERMISSION_DENIED"} and "am:audit" in keys


# --- loading a fixture ------------------------------------------------------------------------------


@cache
def read_fixture(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def decode(value: Any) -> bytes:
    """A dumped byte string: UTF-8 text, or {"base64": ...}."""
    if isinstance(value, str):
        return value.encode("utf-8")
    return base64.b64decode(value["base64"])


async def restore(r: RedisClient, keys: Mapping[str, Any]) -> None:
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
    # On a cluster DBSIZE answers for one node unless asked for every primary (their sum).
    everywhere: dict[str, Any] = {"target_nodes": "primaries"} if isinstance(r, BoundedCluster) else {}
    assert await r.dbsize(**everywhere) == len(keys)


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
            # One call waits; the reply's calls before it have their results in the session.
            states = [c.state for c in record.cursor.calls]
            assert states.count(CallStage.WAITING) == 1, states
            assert all(s is CallStage.APPENDED for s in states[: states.index(CallStage.WAITING)]), states

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


async def test_task_parked_on_a_settlement(loaded: Loaded) -> None:
    """A task an old replica parked on a settlement: its pending is a settlement, its call ids are
    session-unique, and tool_svc's key of the waiting call is held by that same settlement."""
    tasks = TaskStore(loaded.store, DispatcherSettings())
    events = EventLog(loaded.store, tasks, heartbeat_interval_s=1.0)
    approvals = ApprovalBook(loaded.store, loaded.records["tool"]["approval_ttl_s"])
    held_by = {w["idempotency_key"]: w.get("settlement_id") for w in loaded.records["tool"]["idempotency"]}
    for want in loaded.records["dispatcher"].get("settlements", []):
        task_id, approval_id = want["task_id"], want["approval_id"]
        record = await tasks.load(task_id)
        assert record.status == TaskStatus.WAITING_APPROVAL and record.pending is not None
        assert record.pending.is_settlement and record.pending.approval_id == approval_id
        assert_same(record.pending, want["pending"], f"{task_id}.pending")
        cursor = record.cursor
        for index, cs in enumerate(cursor.calls):
            assert cs.call.id == qualified_call_id(task_id, cursor.step, index), cs.call.id
        index = [c.state for c in cursor.calls].index(CallStage.WAITING)
        plan = cursor.calls[index].call
        assert plan == record.pending.plan
        assert held_by[idempotency_key(task_id, cursor.step, index, plan)] == approval_id
        settlement = await approvals.get(approval_id)
        assert (settlement.kind, settlement.state, settlement.pending.kind) == ("settlement", "pending", "settlement")
        asked = [e for e in await events.read(task_id) if e.kind == EventKind.APPROVAL_REQUIRED]
        assert asked and asked[-1].pending_approval is not None and asked[-1].pending_approval.is_settlement


async def test_task_creators_read_back(loaded: Loaded) -> None:
    """Who started each task, by the light read the access checks use: the recorded creator, or none
    (operators only) for a task stored before creators were recorded."""
    tasks = TaskStore(loaded.store, DispatcherSettings())
    for task_id, want in loaded.records["dispatcher"]["tasks"].items():
        written = want["record"]
        assert await tasks.creator(task_id) == (written.get("creator", ""), written.get("creator_agent", ""))


# --- tool_svc: idempotency records and approvals ---------------------------------------------------


def idempotency_of(loaded: Loaded) -> Idempotency:
    """The upgraded tool_svc's idempotency step (a caller with half a second left)."""
    ttl_s = loaded.records["tool"]["approval_ttl_s"]
    return Idempotency(
        loaded.store,
        ApprovalBook(loaded.store, ttl_s),
        ttl_s=86400,
        lease_s=30.0,
        approval_ttl_s=ttl_s,
        remaining=lambda: 0.5,
    )


def assert_unknown(outcome: Any, settlement_id: str, where: str) -> AgentmeshError:
    assert isinstance(outcome, AgentmeshError), f"{where}: {outcome!r} is not OUTCOME_UNKNOWN"
    assert outcome.code == ErrorCode.OUTCOME_UNKNOWN, f"{where}: {outcome.code.name}"
    assert outcome.metadata["settlement_id"] == settlement_id, f"{where}: {dict(outcome.metadata)}"
    return outcome


async def test_idempotency_records_replay(loaded: Loaded) -> None:
    tool = loaded.records["tool"]
    idempotency = idempotency_of(loaded)
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
        if written["state"] == "sent":
            continue  # in flight on its replica: test_write_in_flight_on_an_old_replica

        outcome = await idempotency(call)
        assert outcome is not None, f"{key}: the {written['state']} record was not recognised; the call would run again"
        assert not call.finalizers and not call.sent, f"{key}: the key was claimed again"
        if written["state"] == "unknown":
            # Still waiting for the same settlement: nothing re-sent, no second settlement opened.
            error = assert_unknown(outcome, written["settlement_id"], key)
            assert error.metadata["arguments_sha256"] == written["outcome"]["metadata"]["arguments_sha256"]
            continue
        assert_same(outcome, written["outcome"], f"{key}.outcome")
        if written["state"] == "done":
            assert call.stats.replayed
            assert (call.stats.attempts, call.stats.output_bytes) == (written["attempts"], written["output_bytes"])
        if written.get("settlement") == "ran":
            # Settled RAN: the model reads "the call ran"; it is never sent again.
            assert isinstance(outcome, Output) and outcome.inline is not None
            assert json.loads(outcome.inline)["settled"] == "ran"


async def test_unknown_outcome_settled_on_the_upgraded_replica(loaded: Loaded) -> None:
    """An operator settles an old replica's unknown outcome RAN through the upgraded code; a repeat of
    the key then gets the ran output, and the call is still not sent."""
    idempotency = idempotency_of(loaded)
    assert idempotency.approvals is not None
    for written in loaded.records["tool"]["idempotency"]:
        if written["state"] != "unknown":
            continue
        settlement = await idempotency.approvals.get(written["settlement_id"])
        record, expired = await idempotency.approvals.decide(
            written["settlement_id"],
            approve=True,
            approver=OPERATOR,
            reason="the courier confirmed the booking",
            arguments_sha256=settlement.pending.arguments_sha256,
            settlement="ran",
        )
        assert not expired and (record.state, record.settlement) == ("approved", "ran")
        call = tool_call_state(written)
        outcome = await idempotency(call)
        assert isinstance(outcome, Output) and outcome.inline is not None, outcome
        assert json.loads(outcome.inline)["settled_by"] == OPERATOR.subject
        assert not call.finalizers and not call.sent and call.stats.replayed


async def test_write_in_flight_on_an_old_replica(loaded: Loaded) -> None:
    """A write an old replica is sending (key `sent`, heartbeat alive): a repeat is told to retry; once
    the heartbeat stops (the replica died) the outcome is unknown, under the key's settlement."""
    idempotency = idempotency_of(loaded)
    for written in loaded.records["tool"]["idempotency"]:
        if written["state"] != "sent":
            continue
        key = written["idempotency_key"]
        assert idempotency.hb_key(key) == written["heartbeat_key"] and written["heartbeat_key"] in loaded.keys
        call = tool_call_state(written)
        with pytest.raises(AgentmeshError) as raised:
            await idempotency(call)
        assert raised.value.code == ErrorCode.UNAVAILABLE and raised.value.retryable, raised.value
        assert raised.value.metadata["reason"] == "in_progress"
        assert not call.finalizers and not call.sent

        await loaded.store.redis.delete(written["heartbeat_key"])  # its lease ran out
        call = tool_call_state(written)
        assert_unknown(await idempotency(call), written["settlement_id_when_dead"], key)
        assert not call.finalizers and not call.sent


async def test_approvals_read_back(loaded: Loaded) -> None:
    tool = loaded.records["tool"]
    approvals = ApprovalBook(loaded.store, tool["approval_ttl_s"])
    assert {a["state"] for a in tool["approvals"].values()} >= {"pending", "approved"}
    for approval_id, want in tool["approvals"].items():
        record = await approvals.get(approval_id)
        assert_same(record, want, approval_id)
        if record.state in ("approved", "denied"):
            operator = Caller(subject="compat-other-operator", roles=frozenset({"operator"}))
            # A settlement is decided with an outcome (RAN / NOT_RAN), any other approval without one.
            again: Settlement = "not_ran" if record.kind == "settlement" else ""
            with pytest.raises(FailedPreconditionError, match="already"):
                await approvals.decide(
                    approval_id,
                    approve=False,
                    approver=operator,
                    reason="again",
                    arguments_sha256=record.pending.arguments_sha256,
                    settlement=again,
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


async def test_session_access_and_known_facts(loaded: Loaded) -> None:
    """A session is for the tokens of its attached tasks (from redis_v4.json on; an older session
    without them: its agent's tokens, any task); its entity records read back as the writer read them
    (an older plain value: a fact with that value and its index, no provenance)."""
    engine = ContextEngine(ContextSettings(), loaded.store)
    for session_id, want in loaded.records["context"]["sessions"].items():
        caller = ContextCaller(**want["caller"])
        other_task = replace(caller, task_id=f"{session_id}-other", creator="someone-else")
        attached = want["session"].get("tasks")
        if attached is None:
            session, _ = await engine.get_session(other_task, session_id)
            assert session.tasks is None and session.owner == ""
        else:
            assert caller.task_id in attached
            with pytest.raises(PermissionDeniedError):
                await engine.get_session(other_task, session_id)
            with pytest.raises(PermissionDeniedError):
                await engine.append_message(other_task, session_id, Message(Role.USER, "Let me in."))
        _, raw = await engine.sessions.get(session_id)
        facts = known_facts(raw)
        if "known" in want:
            by_key = {fact["key"]: fact for fact in want["known"]}
            assert_same({f.key: f for f in facts}, by_key, f"{session_id}.known")
        else:
            assert {f.key: f.value for f in facts} == {k: v for k, (v, _) in raw.items()}
            assert all(not (f.negated or f.corrected_from or f.quote) for f in facts)
        index, _ = await engine.append_message(caller, session_id, Message(Role.USER, "The refund cap is 70 USD."))
        _, after = await engine.get_session(caller, session_id)
        assert after["refund cap"] == "70 USD" and index == want["session"]["message_count"]


async def test_audit_stream_read_back(loaded: Loaded) -> None:
    """The audit entries of an old replica read back as it read them; the upgraded one appends after."""
    audit = AuditLog(loaded.store)
    written = loaded.records.get("audit", [])
    assert_same(await audit.read(), written, "audit")
    await audit.record(subject=OPERATOR.subject, action="task.cancel", target="task-compat-queued")
    read = await audit.read()
    assert (read[-1].subject, read[-1].action, read[-1].outcome) == (OPERATOR.subject, "task.cancel", "ok")
    assert len(read) <= len(written) + 1


async def test_payloads_read_back(loaded: Loaded) -> None:
    engine = ContextEngine(ContextSettings(), loaded.store)
    sessions = loaded.records["context"]["sessions"]
    assert any(want["payloads"] for want in sessions.values())
    for session_id, want in sessions.items():
        caller = ContextCaller(**want["caller"])
        payloads = want["payloads"]
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
        assert refs or not payloads
        for ref in refs:
            meta, _, _ = await engine.get_payload(caller, session_id, ref.ref_id)
            assert (meta.sha256, meta.size_bytes, meta.media_type) == (ref.sha256, ref.size_bytes, ref.media_type)


async def test_named_appends_answer_repeats(loaded: Loaded) -> None:
    """A session whose appends were named (client_message_id, tool_call_id): the upgraded replica
    answers a repeat with the original index (already=True) and appends nothing; a tool result with
    other content under the same call id is refused."""
    engine = ContextEngine(ContextSettings(), loaded.store)
    for session_id, want in loaded.records["context"]["sessions"].items():
        if not want.get("appends"):
            continue
        caller = ContextCaller(**want["caller"])
        before, _ = await engine.get_session(caller, session_id)
        for named in want["appends"]:
            if "client_message_id" in named:
                dedupe = f"m:{named['client_message_id']}"
                message = Message(
                    Role(named["role"]),
                    named["content"],
                    tool_calls=tuple(ToolCall.from_json(c) for c in named["tool_calls"]),
                )
                appended = await engine.append_message_once(
                    caller, session_id, message, client_message_id=named["client_message_id"]
                )
            else:
                dedupe = f"c:{named['tool_call_id']}"
                result = ContextOutcome(
                    tool_call_id=named["tool_call_id"],
                    tool_name=named["tool_name"],
                    inline=named["inline"],
                    structured=named["structured"],
                )
                appended = await engine.append_tool_result_once(caller, session_id, result)
                with pytest.raises(FailedPreconditionError, match="already appended"):
                    await engine.append_tool_result_once(caller, session_id, replace(result, inline='{"other": 1}'))
            assert (appended.index, appended.already) == (named["index"], True), dedupe
            existing = await engine.sessions.seen(session_id, dedupe)
            assert existing is not None
            assert_same(existing, want["dedupe"][dedupe], f"{session_id}.dedupe[{dedupe!r}]")
        after, _ = await engine.get_session(caller, session_id)
        assert (after.message_count, after.total_tokens) == (before.message_count, before.total_tokens)
