"""Task ownership, fencing, takeover, the event log and bad input (real Redis, fake services)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

import pytest

from agentmesh.chat import ToolCall
from agentmesh.errors import AgentmeshError, ErrorCode
from dispatcher_svc.model import EventKind, TaskEvent, TaskStatus
from dispatcher_svc.queue import ENQUEUE_LUA
from dispatcher_svc.service import StartRequest
from dispatcher_svc.tasks import StaleOwnerError, TaskRecord, fields_of
from tests.unit.dispatcher.conftest import APPROVER, OPERATOR, MakeRig
from tests.unit.dispatcher.fakes import FakeContext, FakeTools, Prompt, call, reply


def counting_policy(p: Prompt):
    """Answers differently on every call: a different tool argument each step, then an answer."""
    n = len(p.tool_messages())
    if n < 2:
        return reply(call("notify", {"seq": n, "nonce": p.call_index}, f"c{p.call_index}"))
    return reply(text=f"sent {n}")


async def _wait(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("point", ["after_reply_checkpoint", "after_tool_call", "after_append_result"])
async def test_a_second_replica_takes_over_a_dead_owner(make_rig: MakeRig, point: str) -> None:
    """Replica A hangs at `point` and stops renewing (as if killed); replica B claims and finishes.

    Every side effect ran once, no event is lost or repeated, and A's late write is refused.
    """
    paused = asyncio.Event()
    stuck: list[TaskRecord] = []

    async def hang(reached: str, record: TaskRecord) -> None:
        if reached == point and not stuck:
            stuck.append(record)
            paused.set()
            await asyncio.Event().wait()

    tools = FakeTools({"notify": lambda c: "sent"})
    # context_svc keeps one result per tool_call_id: a result appended by A before it died is not
    # appended again by B (after_append_result).
    context = FakeContext(dedupe_tool_results=True)
    a = await make_rig(counting_policy, tools, hook=hang, context=context)
    task_id = await a.start()
    await asyncio.wait_for(paused.wait(), 10)
    # "kill -9": A's worker stops without handing the task back (no renewals, no writes).
    for loop_task in a.dispatcher.worker._loops:
        loop_task.cancel()
    for run in list(a.dispatcher.worker._running.values()):
        run.cancel()
    await asyncio.sleep(0.05)

    b = await make_rig(counting_policy, tools, context=context)
    events = await b.events(task_id)
    task = await b.dispatcher.get_task(task_id, caller=OPERATOR)
    assert task.status == TaskStatus.SUCCEEDED, task
    assert task.answer == "sent 2"
    assert tools.runs["notify"] == 2  # exactly once per call, although A may have sent one already
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert sum(1 for e in events if e.kind == EventKind.TOOL_RESULT) == 2
    assert any("resumed on" in e.message for e in events if e.kind == EventKind.STATUS)
    # The session log holds each message once.
    assert [m["role"] for m in context.sessions[task_id]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    # A's stale fence is refused.
    with pytest.raises(StaleOwnerError):
        await a.dispatcher.tasks.commit(task_id, fence=stuck[0].fence, fields=fields_of(answer="stale"))
    assert (await b.dispatcher.get_task(task_id, caller=OPERATOR)).answer == "sent 2"


async def test_fence_refuses_a_stale_writer_and_keeps_sequences(make_rig: MakeRig) -> None:
    rig = await make_rig(lambda p: reply(text="x"), start=False)
    task_id = (await rig.dispatcher.start_task(StartRequest("ops", "goal"), caller=OPERATOR, request_id="r")).task_id
    tasks = rig.dispatcher.tasks
    record = await tasks.load(task_id)
    assert record.fence == 0 and record.last_sequence == 1
    owner1 = await tasks.commit(task_id, fence=0, bump_fence=True)
    owner2 = await tasks.commit(task_id, fence=owner1.fence, bump_fence=True)
    assert (owner1.fence, owner2.fence) == (1, 2)

    def ev(message: str) -> TaskEvent:
        return TaskEvent(task_id, 0, EventKind.STEP_STARTED, 0, TaskStatus.RUNNING, message=message)

    with pytest.raises(StaleOwnerError):
        await tasks.commit(task_id, fence=1, fields={"answer": "stale"}, events=[ev("stale")])
    done = await tasks.commit(task_id, fence=2, events=[ev("a"), ev("b")])
    assert done.last_sequence == 3
    events = await rig.dispatcher.events.read(task_id)
    assert [(e.sequence, e.message) for e in events][1:] == [(2, "a"), (3, "b")]
    assert (await tasks.load(task_id)).answer == ""


async def test_events_are_capped_and_a_late_watcher_is_told(make_rig: MakeRig) -> None:
    # One entry per event, so MAXLEN trims events (packed, it counts commits: test_packed_events).
    rig = await make_rig(lambda p: reply(text="x"), dispatcher={"event_maxlen": 100, "pack_events": False}, start=False)
    task_id = (await rig.dispatcher.start_task(StartRequest("ops", "goal"), caller=OPERATOR, request_id="r")).task_id
    tasks = rig.dispatcher.tasks
    for i in range(30):
        events = [
            TaskEvent(task_id, 0, EventKind.STEP_STARTED, 0, TaskStatus.RUNNING, message=f"{i}.{j}") for j in range(10)
        ]
        await tasks.commit(task_id, fence=0, events=events)
    end = TaskEvent(task_id, 0, EventKind.STATUS, 0, TaskStatus.SUCCEEDED)
    await tasks.commit(task_id, fence=0, fields=fields_of(status=TaskStatus.SUCCEEDED), events=[end])
    length = await rig.store.redis.xlen(rig.store.keys.task_events(task_id))
    assert 100 <= length < 301
    seen = [e async for e in rig.dispatcher.watch(task_id, 0, caller=OPERATOR)]
    assert seen[-1].sequence == 302 and seen[-1].status == TaskStatus.SUCCEEDED
    assert int(seen[0].attributes["events_trimmed"]) == seen[0].sequence - 1
    assert [e.sequence for e in seen] == list(range(seen[0].sequence, 303))


async def test_watch_resumes_after_a_sequence_without_gaps_or_repeats(make_rig: MakeRig) -> None:
    tools = FakeTools({"notify": lambda c: "sent"})
    rig = await make_rig(counting_policy, tools)
    task_id = await rig.start()
    first: list[TaskEvent] = []
    async for event in rig.dispatcher.watch(task_id, caller=OPERATOR):
        if event.sequence:
            first.append(event)
        if len(first) == 4:
            break  # the client disconnects
    rest = await rig.events(task_id, after=first[-1].sequence)
    everything = [e.sequence for e in first + rest]
    assert everything == list(range(1, len(everything) + 1))
    assert rest[-1].status == TaskStatus.SUCCEEDED
    # Watching a finished task replays and ends; after its last event, it ends at once.
    assert [e.sequence for e in await rig.events(task_id)] == everything
    assert await rig.events(task_id, after=everything[-1]) == []


async def test_start_task_is_idempotent_on_task_id(make_rig: MakeRig) -> None:
    rig = await make_rig(lambda p: reply(text="ok"))
    first = await rig.start("goal one", task_id="my-task-1")
    again = await rig.start("goal one", task_id="my-task-1")
    assert first == again == "my-task-1"
    await rig.events(first)
    assert rig.provider.calls == 1
    with pytest.raises(AgentmeshError) as caught:
        await rig.start("another goal", task_id="my-task-1")
    assert caught.value.code == ErrorCode.FAILED_PRECONDITION
    assert caught.value.violations[0].path == "task_id"


@pytest.mark.parametrize(
    ("request_", "code", "field"),
    [
        (StartRequest("nobody", "goal"), ErrorCode.NOT_FOUND, "agent_id"),
        (StartRequest("", "goal"), ErrorCode.INVALID_REQUEST, "agent_id"),
        (StartRequest("ops", "   "), ErrorCode.INVALID_REQUEST, "goal"),
        (StartRequest("ops", "x" * 40_000), ErrorCode.INVALID_REQUEST, "goal"),
        # Issue 39: one goal limit, DiscoverTools' (a longer goal used to start, then FAIL there).
        (StartRequest("ops", "x" * 8193), ErrorCode.INVALID_REQUEST, "goal"),
        (StartRequest("ops", "goal", token_budget=-1), ErrorCode.INVALID_REQUEST, "token_budget"),
        (StartRequest("ops", "goal", max_steps=-3), ErrorCode.INVALID_REQUEST, "max_steps"),
        (StartRequest("ops", "goal", task_id="bad id{x}"), ErrorCode.INVALID_REQUEST, "task_id"),
    ],
)
async def test_bad_start_requests_name_the_field(
    make_rig: MakeRig, request_: StartRequest, code: ErrorCode, field: str
) -> None:
    rig = await make_rig(lambda p: reply(text="x"), start=False)
    with pytest.raises(AgentmeshError) as caught:
        await rig.dispatcher.start_task(request_, caller=OPERATOR, request_id="r")
    assert caught.value.code == code
    assert caught.value.violations[0].path == field
    assert field in str(caught.value)


async def test_unknown_task_is_not_found_naming_the_field(make_rig: MakeRig) -> None:
    rig = await make_rig(lambda p: reply(text="x"), start=False)
    for operation in (
        rig.dispatcher.get_task("no-such-task", caller=OPERATOR),
        rig.dispatcher.cancel("no-such-task", caller=OPERATOR),
        rig.dispatcher.resolve_approval(
            "no-such-task", "ap-1", approve=True, reason="", arguments_sha256="", caller=APPROVER
        ),
    ):
        with pytest.raises(AgentmeshError) as caught:
            await operation
        assert caught.value.code == ErrorCode.NOT_FOUND
        assert caught.value.violations[0].path == "task_id"
    with pytest.raises(AgentmeshError) as caught:
        await anext(rig.dispatcher.watch("no-such-task", caller=OPERATOR))
    assert caught.value.code == ErrorCode.NOT_FOUND
    with pytest.raises(AgentmeshError) as caught:
        rig.dispatcher.watch("t", -1, caller=OPERATOR)
    assert caught.value.code == ErrorCode.INVALID_REQUEST


async def test_budget_override_unset_keeps_the_agents_and_zero_is_refused(make_rig: MakeRig) -> None:
    rig = await make_rig(lambda p: reply(text="x"), start=False)
    task = await rig.dispatcher.start_task(StartRequest("ops", "goal"), caller=OPERATOR, request_id="r")
    record = await rig.dispatcher.tasks.load(task.task_id)
    assert (record.token_budget, record.max_steps) == (100_000, 8)
    for field, request in (
        ("token_budget", StartRequest("ops", "goal", token_budget=0)),
        ("max_steps", StartRequest("ops", "goal", max_steps=0)),
    ):
        with pytest.raises(AgentmeshError) as caught:
            await rig.dispatcher.start_task(request, caller=OPERATOR, request_id="r")
        assert caught.value.code == ErrorCode.INVALID_REQUEST
        assert caught.value.violations[0].path == field
    task = await rig.dispatcher.start_task(
        StartRequest("ops", "goal", token_budget=77, max_steps=2), caller=OPERATOR, request_id="r"
    )
    record = await rig.dispatcher.tasks.load(task.task_id)
    assert (record.token_budget, record.max_steps) == (77, 2)


async def test_a_task_queued_while_no_replica_runs_is_picked_up_later(make_rig: MakeRig) -> None:
    rig = await make_rig(lambda p: reply(text="late but done"), start=False)
    task_id = (await rig.dispatcher.start_task(StartRequest("ops", "goal"), caller=OPERATOR, request_id="r")).task_id
    assert (await rig.dispatcher.get_task(task_id, caller=OPERATOR)).status == TaskStatus.PENDING
    await rig.dispatcher.start()
    events = await rig.events(task_id)
    assert events[-1].status == TaskStatus.SUCCEEDED


async def test_the_queue_reader_survives_an_unexpected_error(make_rig: MakeRig) -> None:
    """New entries are not claimable by XAUTOCLAIM: a reader that died would strand them PENDING."""
    rig = await make_rig(lambda p: reply(text="still picked up"), start=False)
    queue = rig.dispatcher.worker.queue
    real_read = queue.read
    failures = 0

    async def flaky_read(count: int, block_ms: int) -> list[tuple[str, str]]:
        nonlocal failures
        if failures == 0:
            failures += 1
            raise TimeoutError("a client library timeout the store guard does not translate")
        return await real_read(count, block_ms)

    queue.read = flaky_read  # type: ignore[method-assign]
    await rig.dispatcher.start()
    task_id = await rig.start("goal")
    events = await rig.events(task_id)
    assert failures == 1
    assert events[-1].status == TaskStatus.SUCCEEDED


async def test_a_stopping_worker_starts_nothing_even_if_a_read_swallows_its_cancel(make_rig: MakeRig) -> None:
    """redis-py can lose a cancellation mid-command: the read then returns entries after stop()."""
    rig = await make_rig(lambda p: reply(text="must not run here"), start=False)
    worker = rig.dispatcher.worker
    task_id = await rig.start("goal")
    reading = asyncio.Event()

    async def swallowing_read(count: int, block_ms: int) -> list[tuple[str, str]]:
        reading.set()
        # The bug being simulated: the cancel is lost and the read "succeeds".
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(3600)
        return [("1-0", task_id)]

    worker.queue.read = swallowing_read  # type: ignore[method-assign]
    await rig.dispatcher.start()
    await asyncio.wait_for(reading.wait(), 10)
    await asyncio.wait_for(worker.stop(), 10)
    await asyncio.sleep(0.1)
    assert worker.running == 0
    assert all(loop.done() for loop in worker._loops)
    assert (await rig.dispatcher.get_task(task_id, caller=OPERATOR)).status == TaskStatus.PENDING


async def test_an_entry_read_while_its_task_runs_here_is_taken_up_after_that_run(make_rig: MakeRig) -> None:
    """The bench_longchain stall: a task's first entry was read before the task existed (a NOSCRIPT
    retry in create queues a second one), so its run found nothing; the second entry, read while
    that run was still going, was dropped as a duplicate and the task stayed PENDING for good."""
    rig = await make_rig(lambda p: reply(text="ran"), start=False)
    worker = rig.dispatcher.worker
    real_acquire = worker.tasks.acquire
    first = asyncio.Event()
    second_read = asyncio.Event()
    calls = 0

    async def acquire(task_id: str, consumer: str, **kw: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            first.set()
            await second_read.wait()  # the second entry arrives while this run is still going
            return TaskStatus.UNSPECIFIED  # what acquire answers when the task does not exist yet
        return await real_acquire(task_id, consumer, **kw)

    worker.tasks.acquire = acquire  # type: ignore[method-assign]
    real_spawn = worker._spawn

    def spawn(msg_id: str, task_id: str, *, claimed: bool, acquired: Any = None) -> None:
        real_spawn(msg_id, task_id, claimed=claimed, acquired=acquired)
        if first.is_set():
            second_read.set()

    worker._spawn = spawn  # type: ignore[method-assign]
    task_id = await rig.start("goal")  # queues entry 1
    await rig.dispatcher.start()
    await asyncio.wait_for(first.wait(), 10)
    await worker.queue.enqueue(task_id)  # entry 2, as create's NOSCRIPT path adds
    events = await rig.events(task_id)
    assert events[-1].status == TaskStatus.SUCCEEDED
    assert calls == 2


async def test_a_task_started_on_a_replica_with_room_runs_without_an_acquire(make_rig: MakeRig) -> None:
    """Its create took it for this replica (task_create.py, issue 45): the run starts from that record."""
    rig = await make_rig(lambda p: reply(text="ran"))
    worker = rig.dispatcher.worker
    acquired: list[str] = []
    real_acquire = worker.tasks.acquire

    async def acquire(task_id: str, consumer: str, **kw: Any) -> Any:
        acquired.append(task_id)
        return await real_acquire(task_id, consumer, **kw)

    worker.tasks.acquire = acquire  # type: ignore[method-assign]
    task_id = await rig.start("goal")
    events = await rig.events(task_id)
    assert [e.status for e in events if e.kind == EventKind.STATUS] == [
        TaskStatus.PENDING,
        TaskStatus.RUNNING,
        TaskStatus.SUCCEEDED,
    ]
    assert events[1].message == f"status RUNNING on {worker.consumer}" and events[1].sequence == 2
    assert acquired == []
    record = await worker.tasks.load(task_id)
    assert (record.fence, record.runs, record.owner) == (1, 1, worker.consumer)
    assert await rig.store.redis.xlen(worker.queue.key) == 0  # its entry acknowledged and deleted


async def test_tasks_started_right_after_a_script_flush_all_run(make_rig: MakeRig) -> None:
    rig = await make_rig(lambda p: reply(text="ran"))
    await rig.store.redis.script_flush()
    ids = await asyncio.gather(*(rig.start(f"goal {i}") for i in range(8)))
    for task_id in ids:
        assert (await rig.events(task_id))[-1].status == TaskStatus.SUCCEEDED


async def test_concurrency_limit_leaves_work_for_other_replicas(make_rig: MakeRig) -> None:
    rig = await make_rig(lambda p: reply(text="ok"), dispatcher={"max_concurrent_tasks": 2})
    rig.provider.delay_s = 0.2
    ids = [await rig.start(f"goal {i}") for i in range(6)]

    async def all_done() -> bool:
        statuses = [(await rig.dispatcher.get_task(t, caller=OPERATOR)).status for t in ids]
        return all(s == TaskStatus.SUCCEEDED for s in statuses)

    peak = 0

    async def watch_peak() -> None:
        nonlocal peak
        while True:
            peak = max(peak, rig.dispatcher.worker.running)
            await asyncio.sleep(0.01)

    watcher = asyncio.create_task(watch_peak())
    try:
        await _wait(all_done)
    finally:
        watcher.cancel()
    assert peak == 2


async def test_graceful_stop_hands_the_task_to_another_replica(make_rig: MakeRig) -> None:
    tools = FakeTools({"notify": lambda c: "sent"})
    context = FakeContext()
    a = await make_rig(counting_policy, tools, context=context, dispatcher={"claim_idle_s": 30})
    a.provider.delay_s = 0.3
    task_id = await a.start()
    async for event in a.dispatcher.watch(task_id, caller=OPERATOR):
        if event.kind == EventKind.STEP_STARTED:
            break
    await a.dispatcher.stop()  # hands the task back at once, not after claim_idle_s
    b = await make_rig(counting_policy, tools, context=context, dispatcher={"claim_idle_s": 30})
    events = await b.events(task_id, timeout_s=10)
    assert events[-1].status == TaskStatus.SUCCEEDED
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))


def test_tool_call_signature_ignores_key_order_and_call_id() -> None:
    a = ToolCall("1", "t", json.dumps({"a": 1, "b": 2}))
    b = ToolCall("2", "t", '{"b": 2,  "a": 1}')
    c = ToolCall("3", "t", '{"a": 1, "b": 3}')
    assert a.signature() == b.signature() != c.signature()
    assert ToolCall("x", "t", "not json").canonical_arguments() == "not json"


async def test_a_frozen_owner_that_wakes_up_writes_nothing(make_rig: MakeRig) -> None:
    """A stops renewing (frozen) inside a step, B takes over and finishes; when A thaws, its lease
    check refuses it before any downstream write: no duplicate append, no second side effect."""
    paused = asyncio.Event()
    thaw = asyncio.Event()

    async def freeze(reached: str, record: TaskRecord) -> None:
        if reached == "after_tool_call" and not paused.is_set():
            paused.set()
            await thaw.wait()

    tools = FakeTools({"notify": lambda c: "sent"})
    context = FakeContext()
    a = await make_rig(counting_policy, tools, hook=freeze, context=context)

    async def frozen_renewer(*args: object) -> None:
        await asyncio.Event().wait()

    a.dispatcher.worker._renew = frozen_renewer  # type: ignore[method-assign,assignment]
    task_id = await a.start()
    await asyncio.wait_for(paused.wait(), 10)
    for loop_task in a.dispatcher.worker._loops:  # A reads no more work
        loop_task.cancel()
    [a_run] = list(a.dispatcher.worker._running.values())
    b = await make_rig(counting_policy, tools, context=context)
    events = await b.events(task_id)
    assert events[-1].status == TaskStatus.SUCCEEDED
    # B records the answer in the session just after committing SUCCEEDED: let its run end first.
    for _ in range(500):
        if not b.dispatcher.worker._running:
            break
        await asyncio.sleep(0.01)
    assert not b.dispatcher.worker._running
    log_before = [m["role"] for m in context.sessions[task_id]]
    thaw.set()
    await asyncio.wait_for(a_run, 5)
    assert [m["role"] for m in context.sessions[task_id]] == log_before  # A appended nothing
    assert log_before == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert tools.runs["notify"] == 2
    assert (await b.dispatcher.get_task(task_id, caller=OPERATOR)).last_sequence == events[-1].sequence


def _owner(events: list[TaskEvent]) -> str:
    running = [e for e in events if e.kind == EventKind.STATUS and e.status == TaskStatus.RUNNING]
    assert running, [e.message for e in events]
    return running[0].attributes["owner"]


async def test_the_replica_that_queues_a_task_runs_it_when_it_has_room(make_rig: MakeRig) -> None:
    # B's reader is blocked on the queue first; without the read in the queueing step Redis would
    # hand B the entries (it serves blocked readers first come, first served).
    b = await make_rig(lambda p: reply(text="ok"))
    await asyncio.sleep(0.1)
    a = await make_rig(lambda p: reply(text="ok"))
    for i in range(6):
        task_id = await a.start(f"goal {i}")
        assert _owner(await a.events(task_id)) == a.dispatcher.worker.consumer
    assert b.provider.calls == 0


async def test_a_full_replica_leaves_the_task_it_queues_to_another(make_rig: MakeRig) -> None:
    a = await make_rig(lambda p: reply(text="ok"), dispatcher={"max_concurrent_tasks": 1})
    b = await make_rig(lambda p: reply(text="ok"))
    a.provider.delay_s = 0.5  # A's one slot stays busy while the second task is queued
    busy = await a.start("keep a busy")

    async def a_is_full() -> bool:
        return a.dispatcher.worker.running == 1

    await _wait(a_is_full)
    other = await a.start("queued while a is full")
    assert _owner(await a.events(other)) == b.dispatcher.worker.consumer
    assert (await a.events(busy))[-1].status == TaskStatus.SUCCEEDED


async def test_an_entry_read_without_room_is_queued_again_for_the_other_replicas(make_rig: MakeRig) -> None:
    rig = await make_rig(lambda p: reply(text="ok"), dispatcher={"max_concurrent_tasks": 1}, start=False)
    worker, queue, redis = rig.dispatcher.worker, rig.dispatcher.queue, rig.store.redis
    await queue.ensure_group()
    busy: asyncio.Task[None] = asyncio.create_task(asyncio.sleep(3600))
    worker._running["t-busy"] = busy  # its one slot is taken, as by a run in progress
    try:
        first = await queue.enqueue("t-late")
        # Read for this replica while it had no room (a blocked read that began when it had some).
        assert await queue.read(1, 10) == [(first, "t-late")]
        worker._admit(first, "t-late", claimed=False)
        await asyncio.gather(*worker._background)
        assert "t-late" not in worker._running
        # Its entry is acknowledged and gone; a new one waits for any replica with room.
        assert (await redis.xpending(queue.key, queue.group))["pending"] == 0
        entries: Any = await redis.xrange(queue.key)
        assert [(msg_id.decode(), fields[b"task"]) for msg_id, fields in entries] not in ([], [(first, b"t-late")])
        assert [fields[b"task"] for _, fields in entries] == [b"t-late"]
    finally:
        busy.cancel()
        worker._running.clear()


async def test_a_task_queued_before_it_existed_after_a_partial_script_flush_still_runs_once(make_rig: MakeRig) -> None:
    # The commit script is gone but the queue script is loaded: the entry goes out (and may be read
    # for this replica) before the task exists; the task is created next and queued again.
    rig = await make_rig(lambda p: reply(text="ran"))
    await rig.store.redis.script_flush()
    await rig.store.redis.script_load(ENQUEUE_LUA)
    ids = [await rig.start(f"goal {i}") for i in range(3)]
    for task_id in ids:
        events = await rig.events(task_id)
        assert events[-1].status == TaskStatus.SUCCEEDED
        assert [e.kind for e in events].count(EventKind.ANSWER) == 1
    assert rig.provider.calls == 3


async def test_a_deferred_entry_claimed_again_is_kept_for_the_run_that_takes_it_up(make_rig: MakeRig) -> None:
    """CI stop 55: an entry deferred behind a running run of its task went idle, the claim loop took
    it again (same entry, now `claimed`), and the deferred path acknowledged it as a spare; the run
    started from it later had no entry to renew ("entry ... is no longer ours")."""
    rig = await make_rig(lambda p: reply(text="ran"), start=False)
    worker = rig.dispatcher.worker
    await worker.queue.ensure_group()
    await worker.queue.enqueue("t-deferred")
    [(msg_id, task_id)] = await worker.queue.read(10, 10)
    blocker = asyncio.create_task(asyncio.sleep(3600))
    worker._running[task_id] = blocker  # a run of the task is going on here
    try:
        worker._spawn(msg_id, task_id, claimed=False)  # read while it runs: deferred
        worker._spawn(msg_id, task_id, claimed=True)  # the same entry, claimed after going idle
        await asyncio.sleep(0.2)  # an acknowledgement would be a background task
        pending = await rig.store.redis.xpending_range(worker.queue.key, worker.queue.group, "-", "+", 10)
        assert [str(p["message_id"], "utf-8") for p in pending] == [msg_id]  # type: ignore[arg-type]
        assert worker._deferred[task_id] == (msg_id, True)
    finally:
        blocker.cancel()
        worker._running.pop(task_id, None)
        worker._deferred.pop(task_id, None)


async def test_a_finished_run_deletes_its_entry_even_if_another_replica_claimed_it_meanwhile(make_rig: MakeRig) -> None:
    """Issue 45: a run that made its task terminal acknowledges and deletes its entry without asking
    whose it is now (XACK + XDEL, no script): whoever claimed the entry meanwhile has nothing to run.
    No claim loop or renewal within the test (long idle times): the entry goes with the run's end."""
    rig = await make_rig(lambda p: reply(text="done"), dispatcher={"claim_idle_s": 60, "claim_interval_s": 60})
    worker, redis = rig.dispatcher.worker, rig.store.redis
    rig.provider.delay_s = 0.5
    task_id = await rig.start("slow")
    pending: Any = []
    for _ in range(100):
        pending = await redis.xpending_range(worker.queue.key, worker.queue.group, "-", "+", 10)
        if pending:
            break
        await asyncio.sleep(0.02)
    [entry] = pending
    # Another replica's claim of the entry while the run is in its model call.
    await redis.xclaim(worker.queue.key, worker.queue.group, "replica-b", 0, [entry["message_id"]])
    events = await rig.events(task_id)
    assert events[-1].status == TaskStatus.SUCCEEDED
    assert rig.provider.calls == 1

    async def entry_gone() -> bool:
        return await redis.xlen(worker.queue.key) == 0

    await _wait(entry_gone, timeout_s=5)  # the acknowledgement follows the terminal commit the watcher saw
    assert (await redis.xpending(worker.queue.key, worker.queue.group))["pending"] == 0
