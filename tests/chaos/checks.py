"""The invariants a chaos run is judged by, and its recovery times.

Each check returns one line per violation (what, which task, which nonce), never a bare count:
1. `lost`: every task is terminal (SUCCEEDED, FAILED, ABORTED, CANCELLED) once the chaos stopped
   and the mesh is healthy; a task that never started counts as lost too.
2. `twice`: per nonce, the non-idempotent upstream saw at most one request and the Idempotency-Key
   upstream at most one distinct effect; and no upstream saw a nonce no task recorded (the effect
   of a model reply that was regenerated instead of resumed).
3. `events`: a WatchTask from sequence 0 yields exactly 1..N (N = GetTask's last_sequence), ends on a
   terminal status, and agrees with every event the harness saw live (no repeat, no gap, same kind
   and text at the same sequence); and every call result in the session has its TOOL_RESULT event.
4. `appends`: in the session log (read from Redis, `am:sess:{task}:log`), each tool_call_id has at
   most one tool message, each reply with tool calls is there once, each final answer once.
5. `outcomes`: in a SUCCEEDED task, each call the model was told ran (its tool message in the
   session, else its TOOL_RESULT event, is no error; or it was settled RAN) has exactly one effect
   (the idempotent upstream: at least one), each call it was told failed has none on the
   non-idempotent upstreams; an answer `DONE` issued every planned call, and no answer is
   `PLAN BROKEN` (the model skipped a call because a result was there twice).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from agentmesh.v1 import dispatcher_pb2
from tests.chaos.driver import TERMINAL, TaskRun, code_name, status_name
from tests.chaos.report import Action
from tests.chaos.upstreams import PATHS, TOOL_OF_PATH, Upstreams

D = dispatcher_pb2


@dataclass
class Final:
    """A task after the run: its record, its event log read twice, its session log."""

    run: TaskRun
    task: D.Task | None = None
    zero: list[D.TaskEvent] = field(default_factory=list)
    """One WatchTask from sequence 0."""
    zero_end: str = ""
    full: list[D.TaskEvent] = field(default_factory=list)
    """Every event, over as many watches as it took."""
    session: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""

    @property
    def task_id(self) -> str:
        return self.run.task_id

    @property
    def status(self) -> int:
        return self.task.status if self.task is not None else 0


@dataclass(frozen=True)
class Issued:
    task_id: str
    call_id: str
    tool: str
    nonce: str


def _nonce(arguments_json: str) -> str:
    try:
        args = json.loads(arguments_json)
    except ValueError:
        return ""
    return str(args.get("nonce", "")) if isinstance(args, dict) else ""


def issued_calls(final: Final) -> dict[str, Issued]:
    """The task's tool calls by call id: from its TOOL_CALL events and its session's replies."""
    found: dict[str, Issued] = {}
    for event in final.full:
        if event.kind == D.TASK_EVENT_KIND_TOOL_CALL and event.tool_call.name:
            call = event.tool_call
            found.setdefault(call.id, Issued(final.task_id, call.id, call.name, _nonce(call.arguments_json)))
    for message in final.session:
        for call_id, name, arguments_json in message.get("tc", ()):
            found.setdefault(call_id, Issued(final.task_id, call_id, name, _nonce(arguments_json)))
    return found


def session_results(final: Final) -> dict[str, dict[str, Any]]:
    """The tool messages of the task's session (what the model saw), by the nonce of their call."""
    nonce_of = {
        call_id: _nonce(arguments_json) for m in final.session for call_id, _, arguments_json in m.get("tc", ())
    }
    return {nonce_of.get(m.get("id", ""), ""): m for m in final.session if m.get("r") == "tool"}


def event_results(final: Final) -> dict[str, D.TaskEvent]:
    """The TOOL_RESULT events of the task's log, by the nonce of their call (the last one wins)."""
    nonce_of = {
        e.tool_call.id: _nonce(e.tool_call.arguments_json) for e in final.full if e.kind == D.TASK_EVENT_KIND_TOOL_CALL
    }
    found = {}
    for e in final.full:
        if e.kind == D.TASK_EVENT_KIND_TOOL_RESULT:
            nonce = _nonce(e.tool_call.arguments_json) or nonce_of.get(e.tool_result.tool_call_id, "")
            found[nonce] = e
    return found


def check_lost(finals: list[Final]) -> list[str]:
    problems = []
    for f in finals:
        if not f.run.started:
            problems.append(f"{f.task_id}: never started ({'; '.join(f.run.notes) or 'no answer'})")
        elif f.status not in TERMINAL:
            detail = f"; {f.error}" if f.error else ""
            notes = f"; {'; '.join(f.run.notes[-2:])}" if f.run.notes else ""
            problems.append(f"{f.task_id}: lost, status {status_name(f.status)}{detail}{notes}")
    return problems


def check_twice(finals: list[Final], upstreams: Upstreams) -> list[str]:
    owner: dict[str, Issued] = {}
    for f in finals:
        for call in issued_calls(f).values():
            owner[call.nonce] = call
    problems = []
    for tool in ("post_effect", "keyed_effect"):
        for nonce in sorted(upstreams.nonces()[PATHS[tool]]):
            effects = upstreams.effects(tool, nonce)
            if effects > 1:
                who = owner.get(nonce)
                where = f"task {who.task_id} call {who.call_id}" if who else "no task recorded it"
                sent = upstreams.of(PATHS[tool], nonce)
                keys = len({r.idempotency_key for r in sent if r.idempotency_key})
                unkeyed = sum(1 for r in sent if not r.idempotency_key)
                problems.append(
                    f"{tool} nonce {nonce[:12]}: {effects} side effects ({len(sent)} requests: "
                    f"{keys} distinct Idempotency-Key, {unkeyed} without); {where}"
                )
    for path, nonces in upstreams.nonces().items():
        for nonce in sorted(nonces - owner.keys()):
            problems.append(
                f"{TOOL_OF_PATH.get(path, path)} nonce {nonce[:12]}: {len(upstreams.of(path, nonce))} request(s) "
                "for a call no task recorded (a reply regenerated, not resumed?)"
            )
    return problems


def check_events(finals: list[Final]) -> list[str]:
    problems: list[str] = []
    for f in finals:
        if f.task is None:
            continue
        problems.extend(f.run.live_problems)
        sequences = [e.sequence for e in f.zero]
        n = f.task.last_sequence
        if sequences != list(range(1, len(sequences) + 1)):
            repeats = [s for s, c in Counter(sequences).items() if c > 1]
            problems.append(
                f"{f.task_id}: watch from 0 yielded sequences out of order (repeats {repeats[:5]}, "
                f"{len(sequences)} events, last {sequences[-1] if sequences else 0})"
            )
        elif len(sequences) != n:
            last_status = status_name(f.zero[-1].status) if f.zero else "none"
            problems.append(
                f"{f.task_id}: watch from 0 ended ({f.zero_end}) at sequence {len(sequences)} ({last_status}) "
                f"but the task's last_sequence is {n} ({status_name(f.task.status)})"
            )
        elif f.task.status in TERMINAL and (not f.zero or f.zero[-1].status not in TERMINAL):
            problems.append(f"{f.task_id}: watch from 0 did not end on a terminal event")
        logged_results = event_results(f)
        for nonce, message in session_results(f).items():
            if nonce and nonce not in logged_results:
                problems.append(
                    f"{f.task_id}: the session has the result of {message.get('n', '?')} call {message.get('id', '?')} "
                    f"(nonce {nonce[:12]}) but the event log has no TOOL_RESULT for it"
                )
        by_sequence = {e.sequence: e for e in f.full}
        for seen in f.run.live:
            logged = by_sequence.get(seen.sequence)
            if logged is None:
                problems.append(f"{f.task_id}: live event {seen.sequence} ({seen.message[:60]!r}) is not in the log")
            elif (logged.kind, logged.message) != (seen.kind, seen.message):
                problems.append(
                    f"{f.task_id}: live event {seen.sequence} {seen.message[:50]!r} differs from the log's "
                    f"{logged.message[:50]!r}"
                )
    return problems


def check_appends(finals: list[Final]) -> list[str]:
    problems = []
    for f in finals:
        results = Counter(m.get("id", "") for m in f.session if m.get("r") == "tool")
        for call_id, count in sorted(results.items()):
            if count > 1:
                problems.append(f"{f.task_id}: tool result for {call_id} appended {count} times")
        replies: dict[tuple[str, ...], list[str]] = {}
        for m in f.session:
            if m.get("r") == "assistant" and m.get("tc"):
                replies.setdefault(tuple(c[0] for c in m["tc"]), []).append(json.dumps(m["tc"]))
        for ids, contents in sorted(replies.items()):
            if len(contents) > 1:
                same = "the same calls" if len(set(contents)) == 1 else "other arguments: a regenerated reply"
                problems.append(f"{f.task_id}: reply with calls {list(ids)} appended {len(contents)} times ({same})")
        answers = Counter(
            m.get("c", "") for m in f.session if m.get("r") == "assistant" and not m.get("tc") and m.get("c")
        )
        for text, count in answers.items():
            if count > 1:
                problems.append(f"{f.task_id}: answer {text[:40]!r} appended {count} times")
    return problems


def check_outcomes(finals: list[Final], upstreams: Upstreams) -> list[str]:
    problems = []
    for f in finals:
        if f.status != D.TASK_STATUS_SUCCEEDED or f.task is None:
            continue
        ran_settled = {s.nonce for s in f.run.settlements if s.outcome == "RAN" and s.resolved}
        seen, logged = session_results(f), event_results(f)
        calls = issued_calls(f)
        for call in calls.values():
            effects = upstreams.effects(call.tool, call.nonce)
            told = told_of(seen.get(call.nonce), logged.get(call.nonce))
            told_ran = told == "ok" or call.nonce in ran_settled
            what = f"{f.task_id} {call.tool} nonce {call.nonce[:12]}"
            if told_ran and (effects < 1 if call.tool == "put_effect" else effects != 1):
                problems.append(f"{what}: the model was told it ran; the upstream saw {effects} effect(s)")
            elif not told_ran and call.tool != "put_effect" and effects > 0:
                problems.append(f"{what}: the model was told {told}; the upstream saw {effects} effect(s)")
        answer = f.task.answer
        planned = sum(len(step) for step in f.run.plan)
        if answer.startswith("PLAN BROKEN"):
            problems.append(f"{f.task_id}: {answer[:100]}")
        elif answer.startswith("DONE") and len(calls) != planned:
            problems.append(f"{f.task_id}: answered DONE after {len(calls)} calls of a plan of {planned}")
    return problems


def told_of(message: dict[str, Any] | None, event: D.TaskEvent | None) -> str:
    """What the model was told of a call: "ok", an error code, or "nothing". The session's tool message
    is what it saw; the TOOL_RESULT event stands in when the session has none."""
    if message is not None:
        return str(message.get("e") or "ok")
    if event is not None:
        which = event.tool_result.WhichOneof("outcome")
        if which == "error":
            return code_name(event.tool_result.error.code)
        return "ok" if which == "output" else str(which)
    return "nothing"


def recovery(actions: list[Action], finals: list[Final]) -> tuple[list[float], list[float], int]:
    """Per disruption: recovery = (first event of a task that was running at the kill, written at or
    after the target was back) - (the time it was back); stall = the same event's time - the kill.
    A task is running at t when its latest event at or before t has a non-terminal status. A
    disruption with no such later event (every such task ended meanwhile) is unmeasured."""
    logs = [[(e.time.ToMilliseconds() / 1000, e.status) for e in f.full] for f in finals if f.full]
    recovered, stalled, unmeasured = [], [], 0
    for action in actions:
        if not action.back_s:
            unmeasured += 1
            continue
        best: float | None = None
        for log in logs:
            before = [status for t, status in log if t <= action.start_s]
            if not before or before[-1] in TERMINAL:
                continue
            after = next((t for t, _ in log if t >= action.back_s), None)
            if after is not None and (best is None or after < best):
                best = after
        if best is None:
            unmeasured += 1
            continue
        recovered.append(best - action.back_s)
        stalled.append(best - action.start_s)
    return recovered, stalled, unmeasured
