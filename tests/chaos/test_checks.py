"""The chaos checks catch what they claim to (no processes): each invariant on a clean synthetic task
and on one with exactly the fault it looks for."""

from __future__ import annotations

import json
import time
from typing import Any

from agentmesh.v1 import common_pb2, dispatcher_pb2
from tests.chaos import checks
from tests.chaos.checks import Final
from tests.chaos.driver import Seen, Settlement, TaskRun
from tests.chaos.report import Action, ChaosReport, percentile
from tests.chaos.upstreams import Request, Upstreams

D = dispatcher_pb2
N1, N2 = "a" * 32, "b" * 32


def event(seq: int, kind: Any, status: Any, t: float, **fields: Any) -> D.TaskEvent:
    ev = D.TaskEvent(task_id="t1", sequence=seq, kind=kind, status=status, message=f"e{seq}", **fields)
    ev.time.FromMilliseconds(int(t * 1000))
    return ev


def task_log(t0: float = 1000.0) -> list[D.TaskEvent]:
    running = D.TASK_STATUS_RUNNING
    call1 = common_pb2.ToolCall(id="c1", name="post_effect", arguments_json=json.dumps({"seq": 1, "nonce": N1}))
    call2 = common_pb2.ToolCall(id="c2", name="keyed_effect", arguments_json=json.dumps({"seq": 2, "nonce": N2}))
    ok = common_pb2.ToolOutput(inline="{}")
    return [
        event(1, D.TASK_EVENT_KIND_STATUS, running, t0),
        event(2, D.TASK_EVENT_KIND_TOOL_CALL, running, t0 + 1, tool_call=call1),
        event(3, D.TASK_EVENT_KIND_TOOL_RESULT, running, t0 + 2, tool_result=common_pb2.ToolResult(
            tool_call_id="c1", tool_name="post_effect", output=ok)),
        event(4, D.TASK_EVENT_KIND_TOOL_CALL, running, t0 + 3, tool_call=call2),
        event(5, D.TASK_EVENT_KIND_TOOL_RESULT, running, t0 + 4, tool_result=common_pb2.ToolResult(
            tool_call_id="c2", tool_name="keyed_effect", output=ok)),
        event(6, D.TASK_EVENT_KIND_ANSWER, D.TASK_STATUS_SUCCEEDED, t0 + 5),
    ]  # fmt: skip


def clean() -> tuple[Final, Upstreams]:
    run = TaskRun("t1", "goal", [["post_effect"], ["keyed_effect"]], started=True)
    log = task_log()
    run.live = [Seen(e.sequence, e.kind, e.status, e.message) for e in log]
    task = D.Task(task_id="t1", status=D.TASK_STATUS_SUCCEEDED, last_sequence=6, answer=f"DONE: {N1} {N2}")
    session: list[dict[str, Any]] = [
        {"r": "user", "c": "goal"},
        {"r": "assistant", "tc": [["c1", "post_effect", json.dumps({"nonce": N1})]]},
        {"r": "tool", "id": "c1", "c": "{}"},
        {"r": "assistant", "tc": [["c2", "keyed_effect", json.dumps({"nonce": N2})]]},
        {"r": "tool", "id": "c2", "c": "{}"},
        {"r": "assistant", "c": task.answer},
    ]
    up = Upstreams()
    up.requests += [Request("/post", "POST", N1, "k1", 0.0), Request("/keyed", "POST", N2, "k2", 0.0)]
    return Final(run, task, zero=log, zero_end="end", full=log, session=session), up


def verdicts(final: Final, up: Upstreams) -> dict[str, list[str]]:
    return {
        "lost": checks.check_lost([final]),
        "twice": checks.check_twice([final], up),
        "events": checks.check_events([final]),
        "appends": checks.check_appends([final]),
        "outcomes": checks.check_outcomes([final], up),
    }


def only(found: dict[str, list[str]], key: str) -> list[str]:
    assert all(not v for k, v in found.items() if k != key), found
    assert found[key], found
    return found[key]


def test_a_clean_task_passes_every_check() -> None:
    final, up = clean()
    assert all(not v for v in verdicts(final, up).values())


def test_lost() -> None:
    final, up = clean()
    assert final.task is not None
    final.task.status = D.TASK_STATUS_RUNNING
    found = verdicts(final, up)
    assert "lost, status RUNNING" in found["lost"][0]


def test_a_repeated_post_and_a_second_idempotency_key_are_side_effects_twice() -> None:
    final, up = clean()
    up.requests.append(Request("/post", "POST", N1, "k1", 0.0))
    up.requests.append(Request("/keyed", "POST", N2, "k2", 0.0))  # same key: deduplicated upstream
    found = verdicts(final, up)
    assert len(found["twice"]) == 1 and "post_effect" in found["twice"][0]
    assert "upstream saw 2" in found["outcomes"][0]
    up.requests.append(Request("/keyed", "POST", N2, "k3", 0.0))  # another key: a second effect
    assert len(checks.check_twice([final], up)) == 2


def test_an_effect_no_task_recorded() -> None:
    final, up = clean()
    up.requests.append(Request("/put", "PUT", "c" * 32, "", 0.0))
    assert "no task recorded" in only(verdicts(final, up), "twice")[0]


def test_a_watch_that_ends_early_or_repeats() -> None:
    final, up = clean()
    final.zero = final.zero[:3]
    assert "ended (end) at sequence 3" in only(verdicts(final, up), "events")[0]
    final.zero = [*task_log()[:3], task_log()[2], *task_log()[3:]]
    assert "repeats [3]" in only(verdicts(final, up), "events")[0]


def test_a_live_event_not_in_the_log_or_a_live_repeat() -> None:
    final, up = clean()
    final.run.live[1] = Seen(2, D.TASK_EVENT_KIND_TOOL_CALL, D.TASK_STATUS_RUNNING, "something else")
    assert "differs" in only(verdicts(final, up), "events")[0]
    final, up = clean()
    final.run.live = []
    for e in [*task_log()[:2], task_log()[1]]:
        final.run.saw(e)
    assert "repeated sequence 2" in only(verdicts(final, up), "events")[0]


def test_a_tool_result_appended_twice() -> None:
    final, up = clean()
    final.session.insert(3, {"r": "tool", "id": "c1", "c": "{}"})
    assert "c1 appended 2 times" in only(verdicts(final, up), "appends")[0]


def test_told_failed_but_ran_and_settled_ran() -> None:
    final, up = clean()
    final.full = [*final.full]
    failed = common_pb2.ToolResult(
        tool_call_id="c1", tool_name="post_effect", error=common_pb2.ErrorDetail(code=common_pb2.ERROR_CODE_UNAVAILABLE)
    )
    final.full[2] = event(3, D.TASK_EVENT_KIND_TOOL_RESULT, D.TASK_STATUS_RUNNING, 1002, tool_result=failed)
    final.zero = final.full
    final.session[2]["e"] = "UNAVAILABLE"
    assert "told UNAVAILABLE; the upstream saw 1" in only(verdicts(final, up), "outcomes")[0]
    final.run.settlements.append(Settlement("t1", "ap1", "post_effect", N1, "RAN", 1, resolved=True))
    assert all(not v for v in verdicts(final, up).values())


def test_a_plan_broken_answer() -> None:
    final, up = clean()
    assert final.task is not None
    final.task.answer = "PLAN BROKEN: 3 results for a plan of 2 calls"
    assert "PLAN BROKEN" in only(verdicts(final, up), "outcomes")[0]


def test_recovery_is_measured_from_the_target_being_back() -> None:
    final, _ = clean()
    back = Action(1, "kill -9", "tool", "tool", start_s=1001.5, back_s=1002.5)
    after_end = Action(1, "kill -9", "tool", "tool", start_s=1010.0, back_s=1011.0)
    recovered, stalled, unmeasured = checks.recovery([back, after_end], [final])
    assert recovered == [0.5] and stalled == [1.5] and unmeasured == 1


def test_the_table_names_every_violation() -> None:
    report = ChaosReport(seed=3, rounds=1, tasks_per_round=1, kills_per_round=1, pauses_per_round=0)
    report.actions.append(Action(1, "kill -9", "redis", "redis", time.time(), time.time()))
    report.invariants["twice"] = ["post_effect nonce x: 2 side effects"]
    table = report.table()
    assert report.violations == 1 and "post_effect nonce x: 2 side effects" in table
    assert "redis" in table and percentile([1.0, 2.0, 3.0], 50) == 2.0


def test_a_result_the_model_saw_without_its_event() -> None:
    final, up = clean()
    final.full = [e for e in final.full if e.sequence != 3]
    found = only(verdicts(final, up), "events")
    assert any("no TOOL_RESULT" in line and "c1" in line for line in found)
