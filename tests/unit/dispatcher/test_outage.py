"""A run waits out an outage of our own services (issue 49): context_svc, tool_svc or provider_svc
answering UNAVAILABLE for a while is retried inside the run with backoff, each wait a task event and a
metric; only an outage past `dispatcher.outage_budget_s` fails the task, typed, naming the service;
a resume then finishes it with every call run once. The processes-and-kill version is
tests/e2e/dispatcher/test_outage.py."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from agentmesh import callctx
from agentmesh.errors import AgentmeshError, ErrorCode
from dispatcher_svc.model import EventKind, TaskStatus, ToolOutcome
from dispatcher_svc.ports import Appended, CallOptions, ContextView
from dispatcher_svc.service import StartRequest
from tests.metricsutil import recorded_metrics
from tests.unit.dispatcher.conftest import OPERATOR, MakeRig
from tests.unit.dispatcher.fakes import FakeContext, FakeTools, Prompt, call, reply

# The conftest fails at once (budget 0) for the tests of resuming; here outages are waited out.
WAIT = {"outage_budget_s": 60.0, "outage_max_backoff_s": 0.05, "outage_jitter_s": 0.01}


@dataclass
class Flaky(FakeContext):
    """context_svc unavailable for the first `down` AppendToolResult calls and `build_down` BuildContexts."""

    down: int = 0
    build_down: int = 0

    async def append_tool_result(
        self, session_id: str, outcome: ToolOutcome, opts: CallOptions, *, build_tokens: int | None = None
    ) -> Appended:
        if self.down > 0:
            self.down -= 1
            raise AgentmeshError(ErrorCode.UNAVAILABLE, "context_svc is down")
        return await super().append_tool_result(session_id, outcome, opts, build_tokens=build_tokens)

    async def build_context(self, session_id: str, budget_tokens: int, opts: CallOptions) -> ContextView:
        if self.build_down > 0:
            self.build_down -= 1
            raise AgentmeshError(ErrorCode.DEADLINE_EXCEEDED, "context_svc did not answer")
        return await super().build_context(session_id, budget_tokens, opts)


def two_calls(p: Prompt) -> Any:
    n = len(p.tool_messages())
    if n < 2:
        return reply(call("notify", {"seq": n}, f"c{n}"))
    return reply(text=f"sent {n}")


def waits(events: list[Any]) -> list[str]:
    return [e.message for e in events if e.kind == EventKind.STATUS and "retrying in" in e.message]


async def test_an_outage_within_the_budget_is_waited_out_in_the_run(make_rig: MakeRig) -> None:
    recorded = recorded_metrics()
    tools = FakeTools({"notify": lambda c: "sent"})
    rig = await make_rig(
        two_calls,
        tools,
        context=Flaky(down=6, build_down=4, views_on_append=False),
        dispatcher=WAIT,
        metrics=recorded.metrics,
    )
    task_id = await rig.start()
    events = await rig.events(task_id)
    assert events[-1].status == TaskStatus.SUCCEEDED, [e.message for e in events]
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    # The first two retries of each outage are quiet; each later wait is an event while RUNNING.
    shown = waits(events)
    assert shown and all(
        m.startswith(("context_svc unavailable, retrying in", "context_svc not answering")) for m in shown
    )
    assert len(shown) == (6 - 2) + (4 - 2)
    wait_events = [e for e in events if e.message in shown]
    assert {e.status for e in wait_events} == {TaskStatus.RUNNING}
    assert wait_events[0].attributes["outage_service"] == "context_svc"
    # A reply's first result rides on the reply's append (issue 45): the outage is that call's.
    assert {e.attributes["outage_call"] for e in wait_events} == {"AppendMessage(reply, notify)", "BuildContext"}
    # Every retry counted, quiet or not; nothing ran twice; no resume was needed.
    assert recorded.value("agentmesh.task.outage_waits", service="context_svc") == 6 + 4
    assert tools.runs["notify"] == 2
    assert not any("resumed" in e.message for e in events)
    assert [m["role"] for m in rig.context.sessions[task_id]].count("tool") == 2


async def test_an_outage_past_the_budget_fails_typed_and_a_resume_finishes_it(make_rig: MakeRig) -> None:
    tools = FakeTools({"notify": lambda c: "sent"})
    budget = {**WAIT, "outage_budget_s": 0.3, "outage_max_backoff_s": 0.1}
    rig = await make_rig(two_calls, tools, context=Flaky(down=1_000_000), dispatcher=budget)
    task_id = await rig.start()
    first = await rig.events(task_id)
    assert first[-1].status == TaskStatus.FAILED, [e.message for e in first]
    error = first[-1].error
    assert error is not None and error.code == ErrorCode.UNAVAILABLE and error.retryable
    assert error.metadata["service"] == "context_svc" and error.metadata["reason"] == "outage_budget"
    assert error.metadata["call"] == "AppendMessage(reply, notify)"
    assert float(error.metadata["down_s"]) >= 0.2
    assert "context_svc was unavailable for" in error.message and "outage budget of 0.3 s" in error.message
    assert waits(first)  # the watcher saw it wait before it failed
    assert tools.runs["notify"] == 1

    rig.context.down = 0  # type: ignore[attr-defined]  # context_svc is back
    await rig.dispatcher.start_task(
        StartRequest("ops", "check payment-svc", task_id=task_id), caller=OPERATOR, request_id="r2"
    )
    events = await rig.events(task_id)
    assert events[-1].status == TaskStatus.SUCCEEDED
    assert tools.runs["notify"] == 2  # the first call was not sent again: its outcome was checkpointed
    assert [m["role"] for m in rig.context.sessions[task_id]].count("tool") == 2


async def test_a_budget_of_zero_fails_after_the_quiet_attempts_as_before(make_rig: MakeRig) -> None:
    rig = await make_rig(two_calls, FakeTools({"notify": lambda c: "sent"}), context=Flaky(down=3))
    task_id = await rig.start()
    events = await rig.events(task_id)
    assert events[-1].status == TaskStatus.FAILED
    assert not waits(events)
    assert rig.context.down == 0  # type: ignore[attr-defined]  # three attempts, none reported


@dataclass
class Clocked(FakeContext):
    """Records what the run's calls see of an incoming call's deadline and token."""

    seen: list[tuple[float | None, str | None]] | None = None

    async def build_context(self, session_id: str, budget_tokens: int, opts: CallOptions) -> ContextView:
        if self.seen is not None:
            self.seen.append((callctx.remaining_time(), callctx.identity_token_var.get()))
        return await super().build_context(session_id, budget_tokens, opts)


async def test_a_run_does_not_inherit_the_deadline_of_the_call_that_queued_it(make_rig: MakeRig) -> None:
    context = Clocked(seen=[], views_on_append=False)  # its BuildContext sees what the run's calls see
    rig = await make_rig(lambda p: reply(text="done"), context=context)
    # StartTask served with a deadline already past, as a run outliving it would see it later.
    deadline = callctx.deadline_var.set(time.monotonic() - 1.0)
    token = callctx.identity_token_var.set("the caller's token")
    try:
        task_id = await rig.start()
    finally:
        callctx.deadline_var.reset(deadline)
        callctx.identity_token_var.reset(token)
    events = await rig.events(task_id)
    assert events[-1].status == TaskStatus.SUCCEEDED
    assert context.seen == [(None, None)]
