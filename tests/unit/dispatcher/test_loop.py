"""The agent loop and its error-class policy, against in-memory fakes of the other services."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from agentmesh.authenticator import Authenticator
from agentmesh.chat import ToolCall
from agentmesh.errors import AgentmeshError, ErrorCode, UnavailableError, Violation
from dispatcher_svc.model import EventKind, ModelReply, TaskEvent, TaskStatus
from dispatcher_svc.ports import CallOptions, ContextView, SessionInfo
from dispatcher_svc.run.loop import RunResult
from dispatcher_svc.tasks import CommitResult, TaskRecord, TaskStore
from tests.unit.dispatcher.conftest import APPROVER, OPERATOR, MakeRig, Rig
from tests.unit.dispatcher.fakes import FakeContext, FakeTools, Prompt, call, reply


def kinds(events: list[TaskEvent]) -> list[str]:
    return [e.kind.name for e in events]


def assert_contiguous(events: list[TaskEvent]) -> None:
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))


def calculator(c: ToolCall) -> str:
    args = json.loads(c.arguments_json)
    return str(args["a"] + args["b"])


async def test_tool_call_then_answer(make_rig: MakeRig) -> None:
    def policy(p: Prompt):
        if not p.tool_messages():
            return reply(call("calc", {"a": 2, "b": 3}))
        return reply(text=f"the sum is {p.last['content']}")

    rig = await make_rig(policy, FakeTools({"calc": calculator}))
    task_id = await rig.start("add 2 and 3")
    events = await rig.events(task_id)
    assert_contiguous(events)
    assert kinds(events) == [
        "STATUS",  # PENDING
        "STATUS",  # RUNNING
        "STEP_STARTED",
        "CONTEXT",
        "MODEL_REPLY",
        "TOOL_CALL",
        "TOOL_RESULT",
        "STEP_STARTED",
        "CONTEXT",
        "MODEL_REPLY",
        "ANSWER",
        "STATUS",
    ]
    assert [e.status for e in events if e.kind == EventKind.STATUS] == [
        TaskStatus.PENDING,
        TaskStatus.RUNNING,
        TaskStatus.SUCCEEDED,
    ]
    task = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert task.status == TaskStatus.SUCCEEDED
    assert task.answer == "the sum is 5"
    assert task.step == 2
    assert task.usage.total_tokens > 0
    assert task.last_sequence == len(events)
    # The session log: goal, reply with the call, its result, the answer.
    log = rig.context.sessions[task_id]
    assert [m["role"] for m in log] == ["user", "assistant", "tool", "assistant"]
    # The task's identity token names the agent and the task.
    auth = Authenticator(rig.dispatcher.settings.auth, rig.dispatcher.settings.environment)
    identity = auth.verify(rig.tools.identities[0])
    assert (identity.agent_id, identity.task_id, identity.roles) == ("ops", task_id, frozenset({"agent"}))
    assert identity.permissions == ("dev:*:*",)


async def test_contract_error_is_corrected_with_the_hint(make_rig: MakeRig) -> None:
    def lookup(c: ToolCall) -> str | AgentmeshError:
        order = json.loads(c.arguments_json)["order_id"]
        if not order.startswith("ORD-"):
            return AgentmeshError(
                ErrorCode.SCHEMA_INVALID,
                "arguments violate the schema",
                violations=[Violation("$.order_id", "pattern", "^ORD-", json.dumps(order), "use ORD-2025-0001")],
            )
        return f"order {order}: shipped"

    def policy(p: Prompt):
        tools = p.tool_messages()
        if not tools:
            return reply(call("lookup", {"order_id": "ord-2025-1"}, "c1"))
        if "hint: use ORD-2025-0001" in tools[-1]["content"]:
            return reply(call("lookup", {"order_id": "ORD-2025-0001"}, "c2"))
        return reply(text=tools[-1]["content"])

    rig = await make_rig(policy, FakeTools({"lookup": lookup}))
    task_id = await rig.start()
    events = await rig.events(task_id)
    corrections = [e for e in events if e.kind == EventKind.CORRECTION]
    assert len(corrections) == 1
    assert corrections[0].error is not None and corrections[0].error.code == ErrorCode.SCHEMA_INVALID
    assert "correction 1 of 2" in corrections[0].message
    # The model saw the violation with its hint and the dispatcher's note, and its fix carried the hint.
    shown = rig.provider.prompts[1].tool_messages()[-1]["content"]
    assert "hint: use ORD-2025-0001" in shown
    assert "next step: correction 1 of 2" in shown
    calls = [e.tool_call for e in events if e.kind == EventKind.TOOL_CALL]
    assert [json.loads(c.arguments_json)["order_id"] for c in calls if c] == ["ord-2025-1", "ORD-2025-0001"]
    task = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert task.status == TaskStatus.SUCCEEDED
    assert task.answer == "order ORD-2025-0001: shipped"


async def test_contract_errors_beyond_two_retries_become_engineering(make_rig: MakeRig) -> None:
    def bad(c: ToolCall) -> AgentmeshError:
        return AgentmeshError(ErrorCode.SCHEMA_INVALID, "bad", violations=[Violation("$.x", "type", "integer")])

    def policy(p: Prompt):
        n = len(p.tool_messages())
        if n < 3:
            return reply(call("stubborn", {"x": f"v{n}"}, f"c{n}"))
        return reply(text="giving up")

    rig = await make_rig(policy, FakeTools({"stubborn": bad}))
    events = await rig.events(await rig.start())
    assert [e.kind.name for e in events if e.kind in (EventKind.CORRECTION, EventKind.FALLBACK)] == [
        "CORRECTION",
        "CORRECTION",
        "FALLBACK",
    ]
    assert "stop correcting it" in rig.provider.prompts[3].tool_messages()[-1]["content"]


async def test_engineering_error_offers_fallback_and_never_reissues(make_rig: MakeRig) -> None:
    def status(c: ToolCall) -> AgentmeshError:
        return AgentmeshError(ErrorCode.UPSTREAM_NOT_FOUND, "GET /status/payment-svc: 404")

    def policy(p: Prompt):
        n = len(p.tool_messages())
        if n == 0:
            return reply(call("get_status", {"svc": "payment-svc"}, "c1"))
        if n == 1:  # a stubborn model repeats the failing call
            return reply(call("get_status", {"svc": "payment-svc"}, "c2"))
        if n == 2:
            assert "metrics" in p.tools  # the fallback is offered
            return reply(call("metrics", {"svc": "payment-svc"}, "c3"))
        return reply(text="used metrics")

    tools = FakeTools({"get_status": status, "metrics": lambda c: "p99 2s"}, fallbacks={"get_status": "metrics"})
    rig = await make_rig(policy, tools, agent={"tools": ["get_status", "metrics"], "discover_k": 1})
    events = await rig.events(await rig.start())
    fallbacks = [e for e in events if e.kind == EventKind.FALLBACK]
    assert len(fallbacks) == 2
    assert fallbacks[0].error is not None and fallbacks[0].error.fallback_tool == "metrics"
    assert "repeat of a failed call not run" in fallbacks[1].message
    assert tools.runs["get_status"] == 1  # the repeat was not executed
    note = rig.provider.prompts[1].tool_messages()[-1]["content"]
    assert "UPSTREAM_NOT_FOUND" in note and "fallback tool metrics" in note
    assert (await rig.dispatcher.get_task(events[0].task_id, caller=OPERATOR)).status == TaskStatus.SUCCEEDED


async def test_fatal_tool_error_aborts_and_runs_nothing_more(make_rig: MakeRig) -> None:
    def shell(c: ToolCall) -> AgentmeshError:
        return AgentmeshError(ErrorCode.DANGEROUS_OPERATION, "rm -rf / is destructive")

    def policy(p: Prompt):
        return reply(call("shell", {"cmd": "rm -rf /"}, "c1"), call("calc", {"a": 1, "b": 1}, "c2"))

    tools = FakeTools({"shell": shell, "calc": calculator})
    rig = await make_rig(policy, tools)
    task_id = await rig.start()
    events = await rig.events(task_id)
    assert kinds(events)[-3:] == ["TOOL_RESULT", "INCIDENT", "STATUS"]
    assert events[-1].status == TaskStatus.ABORTED
    assert tools.runs["calc"] == 0
    task = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert task.status == TaskStatus.ABORTED
    assert task.error is not None and task.error.code == ErrorCode.DANGEROUS_OPERATION


async def test_approval_parks_and_resumes(make_rig: MakeRig) -> None:
    def policy(p: Prompt):
        if not p.tool_messages():
            return reply(call("restart", {"svc": "payment-svc"}, "c1"))
        return reply(text=f"done: {p.last['content']}")

    tools = FakeTools({"restart": lambda c: "restarted"}, needs_approval={"restart"})
    rig = await make_rig(policy, tools)
    task_id = await rig.start()
    seen = []
    async for event in rig.dispatcher.watch(task_id, caller=OPERATOR):
        seen.append(event)
        if event.kind == EventKind.STATUS and event.status == TaskStatus.WAITING_APPROVAL:
            break
    task = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert task.status == TaskStatus.WAITING_APPROVAL
    assert task.pending_approval is not None
    pending = task.pending_approval
    assert pending.plan.name == "restart" and pending.impact
    # Heartbeats keep a watcher of a parked task alive.
    watcher = rig.dispatcher.watch(task_id, seen[-1].sequence, caller=OPERATOR)
    beat = await asyncio.wait_for(anext(watcher), 5)
    assert beat.kind == EventKind.HEARTBEAT and beat.sequence == 0
    await watcher.aclose()  # type: ignore[attr-defined]
    approval, task = await rig.dispatcher.resolve_approval(
        task_id,
        pending.approval_id,
        approve=True,
        reason="ok",
        arguments_sha256=pending.arguments_sha256,
        caller=APPROVER,
    )
    assert approval.state == "APPROVED"
    events = await rig.events(task_id)
    assert_contiguous(events)
    assert "APPROVAL_RESOLVED" in kinds(events)
    final = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert final.status == TaskStatus.SUCCEEDED and final.answer == "done: restarted"
    assert tools.runs["restart"] == 1
    # A second resolution is refused: the task no longer waits.
    with pytest.raises(AgentmeshError) as caught:
        await rig.dispatcher.resolve_approval(
            task_id, pending.approval_id, approve=True, reason="", arguments_sha256="", caller=APPROVER
        )
    assert caught.value.code == ErrorCode.FAILED_PRECONDITION


async def test_denied_approval_is_engineering_for_the_model(make_rig: MakeRig) -> None:
    def policy(p: Prompt):
        if not p.tool_messages():
            return reply(call("restart", {"svc": "x"}, "c1"))
        return reply(text="not restarted")

    tools = FakeTools({"restart": lambda c: "restarted"}, needs_approval={"restart"})
    rig = await make_rig(policy, tools)
    task_id = await rig.start()
    async for event in rig.dispatcher.watch(task_id, caller=OPERATOR):
        if event.status == TaskStatus.WAITING_APPROVAL:
            break
    pending = (await rig.dispatcher.get_task(task_id, caller=OPERATOR)).pending_approval
    assert pending is not None
    await rig.dispatcher.resolve_approval(
        task_id, pending.approval_id, approve=False, reason="not now", arguments_sha256="", caller=APPROVER
    )
    events = await rig.events(task_id)
    assert any(e.kind == EventKind.FALLBACK and e.error and e.error.code == ErrorCode.APPROVAL_DENIED for e in events)
    assert tools.runs["restart"] == 0
    assert (await rig.dispatcher.get_task(task_id, caller=OPERATOR)).status == TaskStatus.SUCCEEDED


async def test_budget_guard_stops_before_the_model_call(make_rig: MakeRig) -> None:
    rig = await make_rig(lambda p: reply(text="never"), agent={"token_budget": 5})
    task_id = await rig.start()
    events = await rig.events(task_id)
    assert rig.provider.calls == 0
    assert events[-2].kind == EventKind.INCIDENT and events[-2].error is not None
    assert events[-2].error.code == ErrorCode.BUDGET_EXHAUSTED
    assert events[-1].status == TaskStatus.ABORTED


async def test_max_steps_guard(make_rig: MakeRig) -> None:
    rig = await make_rig(
        lambda p: reply(call("calc", {"a": p.call_index, "b": 1}, f"c{p.call_index}")),
        FakeTools({"calc": calculator}),
        agent={"max_steps": 3},
    )
    task_id = await rig.start()
    events = await rig.events(task_id)
    task = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert task.status == TaskStatus.ABORTED
    assert task.error is not None and task.error.code == ErrorCode.MAX_STEPS_EXCEEDED
    assert rig.provider.calls == 3
    assert sum(1 for e in events if e.kind == EventKind.STEP_STARTED) == 3


async def test_endless_tool_loop_is_detected(make_rig: MakeRig) -> None:
    tools = FakeTools({"calc": calculator})
    rig = await make_rig(lambda p: reply(call("calc", {"a": 1, "b": 1}, f"c{p.call_index}")), tools)
    task_id = await rig.start()
    await rig.events(task_id)
    task = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert task.status == TaskStatus.ABORTED
    assert task.error is not None and task.error.code == ErrorCode.LOOP_DETECTED
    assert tools.runs["calc"] == 2  # the third identical call never ran


async def test_empty_reply_fails_with_a_typed_reason(make_rig: MakeRig) -> None:
    rig = await make_rig(lambda p: reply(text="  "))
    task_id = await rig.start()
    events = await rig.events(task_id)
    assert events[-1].status == TaskStatus.FAILED
    task = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert task.error is not None and task.error.code == ErrorCode.INTERNAL
    assert task.error.metadata["reason"] == "empty_reply"


async def test_a_spend_budget_refusal_aborts_the_task(make_rig: MakeRig) -> None:
    """provider_svc's BUDGET_EXCEEDED (issue 43: a key's, agent's or tenant's spend budget) is FATAL."""
    rig = await make_rig(lambda p: reply(text="never"))
    rig.provider.rpc_failures = [
        AgentmeshError(
            ErrorCode.BUDGET_EXCEEDED, "agent ops: the day's budget would be exceeded", metadata={"scope": "agent:ops"}
        )
    ]
    task_id = await rig.start()
    events = await rig.events(task_id)
    assert events[-2].kind == EventKind.INCIDENT and events[-2].error is not None
    assert events[-2].error.code == ErrorCode.BUDGET_EXCEEDED
    task = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert task.status == TaskStatus.ABORTED and rig.provider.calls == 0


async def test_unavailable_service_fails_the_task_which_resumes(make_rig: MakeRig) -> None:
    rig = await make_rig(lambda p: reply(text="ok"), dispatcher={"service_retry_attempts": 2})
    rig.provider.rpc_failures = [UnavailableError("provider down")] * 2
    task_id = await rig.start()
    events = await rig.events(task_id)
    assert events[-1].status == TaskStatus.FAILED
    failed = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert failed.error is not None and failed.error.code == ErrorCode.UNAVAILABLE
    # StartTask with the same id resumes the failed task from its checkpoint.
    resumed = await rig.start(task_id=task_id)
    assert resumed == task_id
    events = await rig.events(task_id, after=len(events))
    assert events[0].message == "status PENDING: resumed after failure"
    final = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert final.status == TaskStatus.SUCCEEDED and final.answer == "ok"
    assert len(rig.context.sessions[task_id]) == 2  # goal once, answer once


async def test_cancel_stops_a_running_task(make_rig: MakeRig) -> None:
    rig = await make_rig(lambda p: reply(text="late"))
    rig.provider.delay_s = 0.6
    task_id = await rig.start()
    async for event in rig.dispatcher.watch(task_id, caller=OPERATOR):
        if event.kind == EventKind.STEP_STARTED:
            break
    task = await rig.dispatcher.cancel(task_id, "operator changed their mind", caller=OPERATOR)
    assert task.status == TaskStatus.CANCELLED
    events = await rig.events(task_id)
    assert events[-1].status == TaskStatus.CANCELLED
    await asyncio.sleep(1.0)  # past the in-flight model call's end: a late write would have landed by now
    task = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert task.status == TaskStatus.CANCELLED and task.answer == ""
    assert (await rig.dispatcher.get_task(task_id, caller=OPERATOR)).last_sequence == events[-1].sequence
    with pytest.raises(AgentmeshError) as caught:
        await rig.dispatcher.cancel(task_id, caller=OPERATOR)
    assert caught.value.code == ErrorCode.FAILED_PRECONDITION


async def test_task_deadline_fails_the_task(make_rig: MakeRig) -> None:
    rig = await make_rig(
        lambda p: reply(call("calc", {"a": 1, "b": p.call_index})),
        FakeTools({"calc": calculator}),
        dispatcher={"task_timeout_s": 0.3},
    )
    rig.provider.delay_s = 0.4
    task_id = await rig.start()
    events = await rig.events(task_id)
    task = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert events[-1].status == TaskStatus.FAILED
    assert task.error is not None and task.error.code == ErrorCode.DEADLINE_EXCEEDED
    assert rig.tools.runs["calc"] == 0  # nothing ran after the deadline


async def test_a_task_of_a_removed_agent_fails_typed(make_rig: MakeRig) -> None:
    rig = await make_rig(lambda p: reply(text="x"), start=False)
    task_id = await rig.start()
    rig.dispatcher.agents._agents.clear()  # the agent disappears from the configuration
    await rig.dispatcher.start()
    events = await rig.events(task_id)
    task = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert events[-1].status == TaskStatus.FAILED
    assert task.error is not None and task.error.code == ErrorCode.NOT_FOUND and "agent_id" in task.error.message


# -- the pipelined step-start checkpoint ------------------------------------------------------------


class HeldStepStarts:
    """Holds each commit carrying a STEP_STARTED event (the step-start checkpoint, which the loop
    does not await) until `release(step)` or `hold_s`: a slow write, so that whatever overlaps it
    observably does."""

    def __init__(self, tasks: TaskStore, hold_s: float) -> None:
        self._real_commit = tasks.commit
        self.hold_s = hold_s
        self._released: set[int] = set()
        self._changed = asyncio.Event()
        tasks.commit = self.commit  # type: ignore[method-assign]

    def release(self, step: int) -> None:
        self._released.add(step)
        self._changed.set()

    async def _until_released(self, step: int) -> None:
        while step not in self._released:
            self._changed.clear()
            await self._changed.wait()

    async def commit(self, task_id: str, **kw: Any) -> CommitResult:
        steps = [e.step for e in kw.get("events", ()) if e.kind == EventKind.STEP_STARTED]
        if steps:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._until_released(steps[0]), self.hold_s)
        return await self._real_commit(task_id, **kw)


@dataclass
class HookedContext(FakeContext):
    """A FakeContext that awaits `on_build(n)` inside its n-th BuildContext (step n, without retries)."""

    on_build: Callable[[int], Awaitable[None]] | None = None

    async def build_context(self, session_id: str, budget_tokens: int, opts: CallOptions) -> ContextView:
        view = await super().build_context(session_id, budget_tokens, opts)
        if self.on_build is not None:
            await self.on_build(self.calls["build_context"])
        return view


def before_generate(rig: Rig, check: Callable[[], Awaitable[None]]) -> None:
    """Runs `check` at the start of every Generate call, before the fake model answers."""
    real_generate = rig.provider.generate

    async def generate(**kw: Any) -> ModelReply:
        await check()
        return await real_generate(**kw)

    rig.provider.generate = generate  # type: ignore[method-assign]


def step_started(events: list[TaskEvent], step: int) -> bool:
    return any(e.kind == EventKind.STEP_STARTED and e.message == f"step {step}" for e in events)


def one_call_then_answer(p: Prompt) -> ModelReply:
    if not p.tool_messages():
        return reply(call("calc", {"a": 2, "b": 3}))
    return reply(text=f"the sum is {p.last['content']}")


async def test_generate_is_called_only_after_its_steps_start_checkpoint_is_in_the_stream(make_rig: MakeRig) -> None:
    task_id = "t-settled"
    rig = await make_rig(one_call_then_answer, FakeTools({"calc": calculator}))
    # Each step-start checkpoint takes 0.3 s to land: a Generate not waiting for it would come first.
    HeldStepStarts(rig.dispatcher.tasks, hold_s=0.3)
    in_stream_at_generate: list[bool] = []

    async def check() -> None:
        stored = await rig.dispatcher.events.read(task_id)
        in_stream_at_generate.append(step_started(stored, len(in_stream_at_generate) + 1))

    before_generate(rig, check)
    await rig.start("add 2 and 3", task_id=task_id)
    events = await rig.events(task_id)
    assert_contiguous(events)
    assert events[-1].status == TaskStatus.SUCCEEDED
    assert in_stream_at_generate == [True, True]


async def test_build_context_overlaps_the_step_start_checkpoint(make_rig: MakeRig) -> None:
    task_id = "t-overlap"
    in_stream_at_build: list[bool] = []
    context = HookedContext(views_on_append=False)  # BuildContext called: the overlap with it is tested
    rig = await make_rig(one_call_then_answer, FakeTools({"calc": calculator}), context=context)
    # The checkpoint lands only once its step's BuildContext has begun; an awaited checkpoint would
    # wait out hold_s instead, and be in the stream when BuildContext looks.
    held = HeldStepStarts(rig.dispatcher.tasks, hold_s=2.0)

    async def on_build(step: int) -> None:
        in_stream_at_build.append(step_started(await rig.dispatcher.events.read(task_id), step))
        held.release(step)

    context.on_build = on_build
    await rig.start("add 2 and 3", task_id=task_id)
    events = await rig.events(task_id)
    assert_contiguous(events)
    assert events[-1].status == TaskStatus.SUCCEEDED
    assert in_stream_at_build == [False, False]
    assert sum(1 for e in events if e.kind == EventKind.STEP_STARTED) == 2  # both checkpoints did land


async def test_a_takeover_during_build_context_stops_the_run_as_stale_before_generate(make_rig: MakeRig) -> None:
    context = HookedContext(views_on_append=False)  # BuildContext called: the overlap with it is tested
    rig = await make_rig(lambda p: reply(text="must not be asked"), context=context, start=False)
    task_id = await rig.start(task_id="t-taken")
    record = await rig.dispatcher.worker.acquire(task_id, claimed=False)
    assert isinstance(record, TaskRecord)
    # The step-start checkpoint is held until the takeover has landed: it is then written with a stale fence.
    held = HeldStepStarts(rig.dispatcher.tasks, hold_s=5.0)
    taken_at: list[int] = []

    async def take_over(step: int) -> None:
        taken = await rig.dispatcher.tasks.commit(task_id, fence=record.fence, bump_fence=True)
        taken_at.append(taken.fence)
        held.release(step)

    context.on_build = take_over
    result = await asyncio.wait_for(rig.dispatcher.loop.run(record), 10)
    assert result == RunResult.STALE
    assert taken_at == [record.fence + 1]  # the takeover happened, inside BuildContext of step 1
    assert rig.provider.calls == 0  # the model was never asked
    stored = await rig.dispatcher.events.read(task_id)
    assert not step_started(stored, 1)  # the stale checkpoint was refused, not written
    assert [m["role"] for m in rig.context.sessions[task_id]] == ["user"]  # nothing after the goal


async def test_a_run_marks_its_task_as_running_here_while_it_lasts(make_rig: MakeRig) -> None:
    rig = await make_rig(lambda p: reply(text="done"), start=False)
    task_id = await rig.start(task_id="t-marked")
    record = await rig.dispatcher.worker.acquire(task_id, claimed=False)
    assert isinstance(record, TaskRecord)
    feed = rig.dispatcher.tasks.feed
    running_at_generate: list[bool] = []

    async def check() -> None:
        running_at_generate.append(feed.is_running(task_id))

    before_generate(rig, check)
    assert not feed.is_running(task_id)
    assert await asyncio.wait_for(rig.dispatcher.loop.run(record), 10) == RunResult.FINISHED
    assert running_at_generate == [True]  # its watchers here take its commits from memory
    assert not feed.is_running(task_id)  # and read the stream again once the run has ended


# -- independent calls made at once -----------------------------------------------------------------


class CallLog:
    """Wraps port methods so each call logs ("start", name) and, `hold_s` later, ("end", name)."""

    def __init__(self, hold_s: float = 0.05) -> None:
        self.hold_s = hold_s
        self.entries: list[tuple[str, str]] = []
        self.cancelled: list[str] = []

    def wrap(self, port: object, method: str, name: str) -> None:
        real = getattr(port, method)

        async def logged(*args: Any, **kw: Any) -> Any:
            self.entries.append(("start", name))
            try:
                await asyncio.sleep(self.hold_s)
            except asyncio.CancelledError:
                self.cancelled.append(name)
                raise
            try:
                return await real(*args, **kw)
            finally:
                self.entries.append(("end", name))

        setattr(port, method, logged)

    def index(self, what: str, name: str, nth: int = 0) -> int:
        return [i for i, entry in enumerate(self.entries) if entry == (what, name)][nth]


def log_calls(rig: Rig, hold_s: float = 0.05) -> CallLog:
    calls = CallLog(hold_s)
    calls.wrap(rig.context, "build_context", "BuildContext")
    calls.wrap(rig.context, "create_session", "CreateSession")
    calls.wrap(rig.tools, "discover", "DiscoverTools")
    calls.wrap(rig.context, "append_message", "AppendMessage")
    calls.wrap(rig.tools, "execute", "ExecuteTool")
    calls.wrap(rig.context, "append_tool_result", "AppendToolResult")
    return calls


async def test_without_views_on_appends_each_step_builds_its_context(make_rig: MakeRig) -> None:
    rig = await make_rig(
        one_call_then_answer, FakeTools({"calc": calculator}), context=FakeContext(views_on_append=False)
    )
    calls = log_calls(rig)
    events = await rig.events(await rig.start("add 2 and 3"))
    assert events[-1].status == TaskStatus.SUCCEEDED
    # Without views on appends: DiscoverTools beside the goal's append still, asked once per run, and
    # a BuildContext per step.
    assert calls.index("start", "DiscoverTools") < calls.index("end", "AppendMessage", 0)
    assert calls.index("start", "AppendMessage", 0) < calls.index("end", "DiscoverTools")
    assert [name for what, name in calls.entries if what == "start"].count("DiscoverTools") == 1
    assert [name for what, name in calls.entries if what == "start"].count("BuildContext") == 2
    assert rig.provider.prompts[0].tools == ["calc"]  # the discovered tool was offered


async def test_discover_tools_runs_beside_create_session_which_appends_the_goal(make_rig: MakeRig) -> None:
    rig = await make_rig(one_call_then_answer, FakeTools({"calc": calculator}))
    calls = log_calls(rig)
    task_id = await rig.start("add 2 and 3")
    events = await rig.events(task_id)
    assert events[-1].status == TaskStatus.SUCCEEDED
    # Both started before either ended; CreateSession appended the goal and brought step 1's context,
    # the tool result step 2's: no AppendMessage of the goal, no BuildContext.
    assert calls.index("start", "DiscoverTools") < calls.index("end", "CreateSession")
    assert calls.index("start", "CreateSession") < calls.index("end", "DiscoverTools")
    assert ("start", "BuildContext") not in calls.entries
    assert [name for what, name in calls.entries if what == "start"].count("AppendMessage") == 2  # reply, answer
    assert rig.context.calls["goal_on_create"] == 1
    assert [m["role"] for m in rig.context.sessions[task_id]][:3] == ["user", "assistant", "tool"]
    assert [name for what, name in calls.entries if what == "start"].count("DiscoverTools") == 1
    assert rig.provider.prompts[0].tools == ["calc"]  # the discovered tool was offered


async def test_the_reply_rides_on_its_first_results_append_after_the_tool_call(make_rig: MakeRig) -> None:
    rig = await make_rig(one_call_then_answer, FakeTools({"calc": calculator}))
    calls = log_calls(rig)
    task_id = await rig.start("add 2 and 3")
    events = await rig.events(task_id)
    assert events[-1].status == TaskStatus.SUCCEEDED
    # One AppendMessage carries the reply and the call's result (issue 45), after ExecuteTool: the goal
    # came with CreateSession, so AppendMessage #0 is the reply's and #1 the answer's.
    assert calls.index("start", "AppendMessage", 0) > calls.index("end", "ExecuteTool")
    assert rig.context.calls["results_with_message"] == 1
    assert rig.context.calls["append_message"] == 2
    # The session keeps its order: the reply, then its result (the answer follows the final event), and
    # the second step's context came with that append (no BuildContext).
    assert [m["role"] for m in rig.context.sessions[task_id]] == ["user", "assistant", "tool", "assistant"]
    assert [name for what, name in calls.entries if what == "start"].count("BuildContext") == 0
    assert [m["role"] for m in rig.provider.prompts[1].messages][-2:] == ["assistant", "tool"]


async def test_a_context_svc_that_ignores_following_results_gets_the_result_on_its_own(make_rig: MakeRig) -> None:
    # An earlier release (a rolling upgrade) appends the reply alone and builds its view after it: the
    # loop drops that view and appends the result as before, which brings the next step's context.
    context = FakeContext(results_with_message=False)
    rig = await make_rig(one_call_then_answer, FakeTools({"calc": calculator}), context=context)
    calls = log_calls(rig)
    task_id = await rig.start("add 2 and 3")
    events = await rig.events(task_id)
    assert events[-1].status == TaskStatus.SUCCEEDED, [e.message for e in events]
    assert context.calls["results_with_message"] == 0 and context.calls["append_tool_result"] == 1
    assert calls.index("end", "AppendMessage", 0) < calls.index("start", "AppendToolResult")
    assert [m["role"] for m in context.sessions[task_id]] == ["user", "assistant", "tool", "assistant"]
    assert [m["role"] for m in rig.provider.prompts[1].messages][-2:] == ["assistant", "tool"]
    assert rig.tools.runs["calc"] == 1


async def test_a_failed_create_session_cancels_the_discover_tools_beside_it(make_rig: MakeRig) -> None:
    rig = await make_rig(lambda p: reply(text="must not be asked"), FakeTools({"calc": calculator}))
    calls = CallLog(hold_s=5.0)
    calls.wrap(rig.tools, "discover", "DiscoverTools")
    permission = AgentmeshError(ErrorCode.PERMISSION_DENIED, "no context for you")

    async def failing_create(*args: Any, **kw: Any) -> SessionInfo:
        await asyncio.sleep(0.05)  # DiscoverTools is under way by now
        raise permission

    rig.context.create_session = failing_create  # type: ignore[method-assign]
    task_id = await rig.start()
    events = await asyncio.wait_for(rig.events(task_id), 10)  # not the 5 s DiscoverTools would hold
    task = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert events[-1].status == TaskStatus.FAILED
    assert task.error is not None and task.error.code == ErrorCode.PERMISSION_DENIED
    assert calls.entries == [("start", "DiscoverTools")]
    assert calls.cancelled == ["DiscoverTools"]
    assert rig.provider.calls == 0


async def test_a_tool_call_failing_beside_the_replys_append_fails_the_task_which_resumes_without_repeats(
    make_rig: MakeRig,
) -> None:
    rig = await make_rig(
        one_call_then_answer, FakeTools({"calc": calculator}), dispatcher={"service_retry_attempts": 2}
    )
    rig.tools.rpc_failures = [UnavailableError("tool_svc down")] * 2
    task_id = await rig.start("add 2 and 3")
    events = await rig.events(task_id)
    failed = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert events[-1].status == TaskStatus.FAILED
    assert failed.error is not None and failed.error.code == ErrorCode.UNAVAILABLE
    assert [m["role"] for m in rig.context.sessions[task_id]] == ["user", "assistant"]  # the append landed
    await rig.start("add 2 and 3", task_id=task_id)
    await rig.events(task_id, after=len(events))
    final = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert final.status == TaskStatus.SUCCEEDED and final.answer == "the sum is 5"
    # The reply is in the session once, the tool ran once.
    assert [m["role"] for m in rig.context.sessions[task_id]] == ["user", "assistant", "tool", "assistant"]
    assert rig.tools.runs["calc"] == 1
