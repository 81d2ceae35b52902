"""The phases of a run, each a function from the run to its `NextStep`, and PHASES, the registry
the loop dispatches on (by the cursor's Phase).

A step: guards -> BuildContext + DiscoverTools -> budget guard -> Generate -> checkpoint the reply
-> per tool call: TOOL_CALL checkpoint -> ExecuteTool -> policy -> checkpoint the outcome ->
AppendToolResult (see loop.py for how a resumed run repeats nothing).

Adding a kind of step (docs/design.md §7): a member of `model.Phase` (its value is what the
checkpoint stores: never rename one), a function here `async def phase(run: Run) -> NextStep` that
does its I/O through `run.checkpoints` / `run.downstream`, asks `decisions` what follows, leaves
in the cursor the phase that comes next and returns `Continue(that phase)` or an exit; then its
entry in PHASES. A new way for a run to end is a variant of `next_step.Exit` and its case in
`exits.finish` (mypy checks that every variant has one).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace

from agentmesh.chat import Usage
from dispatcher_svc.events import now_ms
from dispatcher_svc.model import CallStage, EventKind, ModelReply, Phase, TaskEvent, ToolOutcome
from dispatcher_svc.ports import Appended, ContextView, SessionSpec, ToolInfo
from dispatcher_svc.prompts import encode_prompt
from dispatcher_svc.run import decisions, handing, judging, replies, tool_calls
from dispatcher_svc.run.context import Run
from dispatcher_svc.run.downstream import AppendConflict, PortFailure, alongside
from dispatcher_svc.run.names import message_id, qualify
from dispatcher_svc.run.next_step import Continue, Fail, HandOff, NextStep, Succeed, WaitChild
from dispatcher_svc.run.texts import raw_tokens_of, reply_text
from dispatcher_svc.tasks import CallState

log = logging.getLogger("dispatcher_svc.loop")

PhaseFn = Callable[[Run], Awaitable[NextStep]]


async def setup(run: Run) -> NextStep:
    """Creates the session (or, continuing one, reads where it is) and records the goal, then
    starts step 1."""
    record, agent, c, down = run.state.record, run.state.agent, run.state.cursor, run.downstream
    ports = down.ports
    orphaned = await handing.root_cancelled(run)
    if orphaned is not None:
        return orphaned
    spec = SessionSpec(
        session_id=record.session_id,
        agent_id=agent.id,
        goal=record.goal,
        system_prompt=agent.system_prompt,
        max_context_tokens=agent.max_context_tokens,
    )
    goal_id = message_id(record.task_id, "goal")
    build_tokens = down.build_tokens(True)  # step 1's context comes with the goal's append

    async def open_session() -> None:
        goal: Appended | None = None
        if c.ctx_count == 0 and record.session_id != record.task_id:
            # The next turn of a conversation: StartTask attached this task to the session already.
            info = await down.call(
                "GetSession",
                lambda o: ports.context.get_session(record.session_id, o),
                retry_on=decisions.UNCERTAIN_CODES,
            )
            c.ctx_count = info.message_count
            c.raw_tokens = info.total_tokens
        elif c.ctx_count == 0:
            # The goal's append rides on CreateSession (issue 45); a resumed task's session exists, and
            # a context_svc of an earlier release appends nothing: then the append below.
            info = await down.call(
                "CreateSession",
                lambda o: ports.context.create_session(spec, o, goal_message_id=goal_id, build_tokens=build_tokens),
            )
            c.ctx_count = info.message_count
            goal = info.goal
        if goal is not None:
            c.raw_tokens += down.appended("CreateSession(goal)", goal)
            return
        c.raw_tokens += await down.append_once(
            "AppendMessage(goal)",
            lambda o: ports.context.append_message(
                record.session_id, "user", record.goal, (), o, client_message_id=goal_id, build_tokens=build_tokens
            ),
        )

    if down.tools_known():
        await open_session()
    else:
        # DiscoverTools only reads and needs nothing the session's calls do: one round trip instead of
        # two (think() then finds the tools known).
        await alongside(open_session(), down.offer_tools())
    return await begin_step(run)


async def begin_step(run: Run, prefix: Sequence[TaskEvent] = ()) -> NextStep:
    """Guards, then the next step starts (one commit with the previous step's last events)."""
    state, c = run.state, run.state.cursor
    stop = decisions.before_step(
        steps_done=c.step,
        max_steps=state.record.max_steps,
        now_ms=now_ms(),
        deadline_ms=state.deadline_ms,
        prefix=prefix,
    )
    if stop is not None:
        return stop
    c.step += 1
    run.tasks.metrics.task_step(state.agent.id)
    c.phase = Phase.THINKING
    c.reply = None
    c.reply_appended = False
    c.calls = []
    # Overlaps the step's BuildContext and DiscoverTools; think() settles it before Generate.
    await run.checkpoints.settle()
    run.checkpoints.checkpoint_behind([*prefix, run.checkpoints.event(EventKind.STEP_STARTED, f"step {c.step}")])
    return Continue(Phase.THINKING)


async def think(run: Run) -> NextStep:
    """BuildContext, DiscoverTools, budget guard, Generate; the reply is checkpointed before any tool runs."""
    state, down = run.state, run.downstream
    record, agent, c = state.record, state.agent, state.cursor
    built, state.next_view = state.next_view, None

    def build() -> Awaitable[ContextView]:
        return down.call(
            "BuildContext",
            lambda o: down.ports.context.build_context(record.session_id, agent.max_context_tokens, o),
            retry_on=decisions.UNCERTAIN_CODES,  # a read: safe to send again whatever became of the last
        )

    if built is not None:
        # The step's last append brought the context built right after it (issue 45): no BuildContext.
        view, offered = built, await down.offer_tools()
    elif down.tools_known():
        view = await build()
        offered = await down.offer_tools()
    else:
        # Both only read, and neither needs the other's answer: one round trip instead of two.
        view, offered = await alongside(build(), down.offer_tools())
    await run.checkpoints.settle()
    over = decisions.before_generate(
        spent=state.usage.total_tokens,
        prompt_tokens=view.total_tokens,
        reserve_tokens=agent.max_output_tokens,
        token_budget=record.token_budget,
    )
    if over is not None:
        return over
    reply = await _generate(run, view, offered)
    events = _reply_events(run, view, offered, reply)
    after = decisions.after_reply(reply, prefix=events)
    if isinstance(after, Succeed):
        return await judging.judge(run, after)
    if not isinstance(after, Continue):
        return after
    c.reply = reply
    c.reply_appended = False
    c.calls = [CallState(call) for call in reply.tool_calls]
    c.phase = after.phase
    started = tool_calls.start_call(run, 0, prefix=events)
    if not isinstance(started, list):
        return started
    await run.checkpoints.commit([*events, *started])
    await down.reached("after_reply_checkpoint")
    return after


async def _generate(run: Run, view: ContextView, offered: list[ToolInfo]) -> ModelReply:
    """Generate; the reply's usage counted, its tool calls named for the session, its request kept
    for the commit that checkpoints it."""
    state, agent, down = run.state, run.state.agent, run.downstream
    reply = await down.call(
        "Generate",
        lambda o: down.ports.provider.generate(
            model=agent.model,
            task_tag=agent.task_tag,
            messages=view.messages,
            tools=offered,
            temperature=agent.temperature,
            max_tokens=agent.max_output_tokens,
            agent_id=agent.id,
            opts=o,
            include_request=run.settings.record_prompts,
            response_schema=state.record.output_schema,
        ),
    )
    step = state.cursor.step
    if reply.sent is not None:
        # Stored by the commit that checkpoints this reply, whichever exit it takes (prompts.py).
        state.prompt = (step, encode_prompt(reply.model, reply.sent, now_ms()))
    reply = qualify(reply, state.record.task_id, step)
    state.usage = state.usage + reply.usage
    return reply


def _reply_events(run: Run, view: ContextView, offered: list[ToolInfo], reply: ModelReply) -> list[TaskEvent]:
    """The CONTEXT and MODEL_REPLY events of a step."""
    event = run.checkpoints.event
    system_tokens = sum(b.tokens for b in view.blocks if b.kind == "SYSTEM")
    raw_context = run.state.cursor.raw_tokens + system_tokens
    return [
        event(
            EventKind.CONTEXT,
            f"context {view.total_tokens} tokens (budget {view.budget_tokens}; raw would be ~{raw_context}); "
            f"{len(offered)} tools offered",
            usage=Usage(view.total_tokens, 0),
            attributes={
                "context_tokens": str(view.total_tokens),
                "budget_tokens": str(view.budget_tokens),
                "raw_tokens": str(raw_context),
                "summarized_messages": str(view.summarized_messages),
                "dropped_messages": str(view.dropped_messages),
                "tools_offered": ",".join(t.name for t in offered),
                **{f"block_{b.kind.lower()}_tokens": str(b.tokens) for b in view.blocks},
            },
        ),
        event(
            EventKind.MODEL_REPLY,
            reply_text([call.name for call in reply.tool_calls], reply.text),
            usage=reply.usage,
            attributes={"model": reply.model, "finish_reason": reply.finish_reason, "cost_usd": repr(reply.cost_usd)},
        ),
    ]


async def correct(run: Run) -> NextStep:
    """Phase CORRECTING: the rejected answer and its correction go to the session (each once, by its
    message id), then the next step starts, where the model answers again."""
    record, c, down = run.state.record, run.state.cursor, run.downstream
    reply = c.reply
    assert reply is not None
    if not c.reply_appended:
        c.raw_tokens += await down.append_once(
            "AppendMessage(rejected answer)",
            lambda o: down.ports.context.append_message(
                record.session_id,
                "assistant",
                reply.text,
                (),
                o,
                client_message_id=message_id(record.task_id, f"{c.step}:reply"),
            ),
        )
        c.reply_appended = True
    fix = c.fix
    build_tokens = down.build_tokens(True)  # the next step's context comes with the correction
    c.raw_tokens += await down.append_once(
        "AppendMessage(correction)",
        lambda o: down.ports.context.append_message(
            record.session_id,
            "user",
            fix,
            (),
            o,
            client_message_id=message_id(record.task_id, f"{c.step}:fix"),
            build_tokens=build_tokens,
        ),
    )
    c.fix = ""
    return await begin_step(run)


async def act(run: Run) -> NextStep:
    """Records the reply in the session, then runs its tool calls in order.

    Per call: ExecuteTool -> policy -> AppendToolResult -> one commit with its outcome events
    and the next call's TOOL_CALL (or the next step's start). A crash anywhere in between
    resumes at the call: it is re-sent with its idempotency key (replayed, not re-run) and
    the append is detected by the session's message count.
    """
    c, down = run.state.cursor, run.downstream
    early: ToolOutcome | None = None
    # The reply is appended with its first call's result, in one AppendMessage (issue 45); a run that
    # ends before that result's append records the reply on its own first (`replies.reply_before`).
    reply_rides = False
    if not c.reply_appended:
        first = c.calls[0]
        if first.state is CallStage.RUNNING and first.resolved is None and not handing.is_handoff(run, first.call):
            try:
                early = await down.fetch_outcome(0, first)
            except PortFailure:
                await replies.reply_before(run)
                raise
            reply_rides = True
        else:
            await replies.record_reply(run)
    for index, cs in enumerate(c.calls):
        if cs.state is CallStage.APPENDED:
            continue
        # A WAITING call here belongs to a task resumed after it was failed while parked: it is sent
        # again with its key, never left parked in a RUNNING task (decisions.taken_up).
        cs.state = decisions.taken_up(cs.state)
        events: list[TaskEvent] = []
        marks: tool_calls.Marks | None = None
        try:
            if cs.state is CallStage.NEW:
                started = tool_calls.start_call(run, index, prefix=())
                if not isinstance(started, list):
                    return started
                events += started
            issued = len(events)
            if cs.state is CallStage.RUNNING:
                if early is None and handing.is_handoff(run, cs.call):
                    handed: ToolOutcome | HandOff | WaitChild | Fail | None = None
                    if cs.resolved is None:
                        handed = await handing.hand_off(run, cs)
                    elif handing.awaits_verdict(run, cs):  # a verifier's verdict on this transfer
                        handed = await handing.after_verdict(run, cs)
                        cs.resolved = None
                    if handed is not None and not isinstance(handed, ToolOutcome):
                        return replace(handed, prefix=(*events, *handed.prefix))
                    early = handed
                outcome = early if early is not None else await down.fetch_outcome(index, cs)
                early = None
                marks = tool_calls.Marks.of(c)
                applied = tool_calls.apply(run, cs, outcome)
                if not isinstance(applied, list):
                    if reply_rides:
                        await replies.reply_before(run)
                    return applied
                events += applied
            assert cs.state is CallStage.DONE and cs.outcome is not None
            try:
                # The reply's last result brings the next step's context along (unless notes follow it).
                build = index + 1 == len(c.calls)
                tokens = None
                if reply_rides:
                    reply_rides = False
                    tokens = await replies.record_reply_with(run, cs.outcome, build=build)
                if tokens is None:
                    tokens = await down.append_result(cs.outcome, build=build)
            except AppendConflict as conflict:
                # The session log holds another result of this call: the truth, taken instead.
                applied = tool_calls.retake(run, cs, conflict.stored.outcome, marks)
                if not isinstance(applied, list):
                    return applied
                events, tokens = [*events[:issued], *applied], 0
        except PortFailure as failure:
            # The call's events go with the failure: the checkpoint records the call as done, so a
            # resumed run appends its result without producing them again (found by `make chaos`).
            log.warning("task %s: %s", run.state.record.task_id, failure)
            if reply_rides:
                await replies.reply_before(run)
            return decisions.exit_for(failure.error, prefix=events)
        await down.reached("after_append_result")
        c.raw_tokens += raw_tokens_of(cs.outcome, tokens)
        cs.state = CallStage.APPENDED
        if index + 1 < len(c.calls):
            started = tool_calls.start_call(run, index + 1, prefix=events)
            if not isinstance(started, list):
                return started
            await run.checkpoints.commit([*events, *started])
        else:
            try:
                c.raw_tokens += await down.notes_ran_again()  # after the reply's last result
            except PortFailure as failure:
                return decisions.exit_for(failure.error, prefix=events)
            return await begin_step(run, prefix=events)
    return await begin_step(run)


PHASES: Mapping[Phase, PhaseFn] = {
    Phase.INIT: setup,
    Phase.THINKING: think,
    Phase.ACTING: act,
    Phase.CORRECTING: correct,
}
"""The phase function for each phase a cursor can name."""
