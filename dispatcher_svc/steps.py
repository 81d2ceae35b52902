"""The step logic of a run: setup, think (context, tools, model), act (tool calls and the
error-class policy), and the exits (succeed, fail, abort, park), each typed `NoReturn`.

A step: guards -> BuildContext + DiscoverTools -> budget guard -> Generate -> checkpoint the reply
-> per tool call: TOOL_CALL checkpoint -> ExecuteTool -> policy -> checkpoint the outcome ->
AppendToolResult (see loop.py for how a resumed run repeats nothing).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import NoReturn

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from agentmesh.chat import Correction, NextStep, Usage
from agentmesh.errors import AgentmeshError, ErrorClass, ErrorCode
from agentmesh.semconv import ATTR_ERROR_CLASS, ATTR_ERROR_CODE, ERROR_TYPE
from dispatcher_svc import guards, policy
from dispatcher_svc.calls import (
    READ_PAYLOAD_TOOL,
    DownstreamCalls,
    PortFailure,
    alongside,
    message_id,
    qualified_call_id,
)
from dispatcher_svc.events import now_ms
from dispatcher_svc.model import CallStage, EventKind, ModelReply, Phase, TaskEvent, TaskStatus, ToolOutcome
from dispatcher_svc.ports import SessionSpec
from dispatcher_svc.prompts import encode_prompt
from dispatcher_svc.run_state import RunResult, Stop, clip
from dispatcher_svc.tasks import CallState

log = logging.getLogger("dispatcher_svc.loop")


def outcome_summary(outcome: ToolOutcome) -> str:
    if outcome.pending is not None:
        return f"{outcome.tool_name} -> waiting for approval {outcome.pending.approval_id}"
    if outcome.error is not None:
        err = outcome.error
        return f"{outcome.tool_name} -> {err.code.name} ({err.error_class.name}): {clip(err.message, 100)}"
    out = outcome.output
    assert out is not None
    if out.ref is not None:
        return (
            f"{outcome.tool_name} -> ok, {out.ref.size_bytes} bytes offloaded as {out.ref.ref_id[:15]}…, "
            f"context keeps the digest"
        )
    return f"{outcome.tool_name} -> ok: {clip(out.inline or '', 100)}"


def raw_tokens_of(outcome: ToolOutcome, appended_tokens: int) -> int:
    """Tokens the result would have cost appended raw: offloaded outputs at ~4 bytes per token."""
    out = outcome.output
    if out is not None and out.ref is not None:
        return max(appended_tokens, out.ref.size_bytes // 4)
    return appended_tokens


class Steps(DownstreamCalls):
    """What a run does, phase by phase."""

    def _mark_error(self, err: AgentmeshError) -> None:
        self.error = err
        span = trace.get_current_span()
        span.set_attributes(
            {ATTR_ERROR_CODE: err.code.name, ATTR_ERROR_CLASS: err.error_class.name, ERROR_TYPE: err.code.name}
        )
        span.set_status(Status(StatusCode.ERROR, f"{err.code.name}: {clip(err.message, 200)}"))

    async def fail(self, err: AgentmeshError, *, prefix: Sequence[TaskEvent] = ()) -> NoReturn:
        if err.error_class == ErrorClass.FATAL:
            await self.abort(err, prefix=prefix)
        self._mark_error(err)
        status = TaskStatus.FAILED
        await self.commit(
            [*prefix, self.event(EventKind.STATUS, f"status FAILED: {err}", status=status, error=err)],
            status=status,
            error=err,
        )
        raise Stop(RunResult.FINISHED)

    async def abort(self, err: AgentmeshError, *, prefix: Sequence[TaskEvent] = ()) -> NoReturn:
        status = TaskStatus.ABORTED
        self._mark_error(err)
        await self.commit(
            [
                *prefix,
                self.event(
                    EventKind.INCIDENT,
                    f"incident: {err.code.name}: {clip(err.message, 200)}; task aborted, a human decides what next",
                    status=status,
                    error=err,
                ),
                self.event(EventKind.STATUS, f"status ABORTED: {err.code.name}", status=status, error=err),
            ],
            status=status,
            error=err,
        )
        raise Stop(RunResult.FINISHED)

    async def setup(self) -> None:
        """Creates the session (or, continuing one, reads where it is) and records the goal, then
        starts step 1."""
        record = self.record
        spec = SessionSpec(
            session_id=record.session_id,
            agent_id=self.agent.id,
            goal=record.goal,
            system_prompt=self.agent.system_prompt,
            max_context_tokens=self.agent.max_context_tokens,
        )
        if self.cursor.ctx_count == 0 and record.session_id != record.task_id:
            # The next turn of a conversation: StartTask attached this task to the session already.
            info = await self.call("GetSession", lambda o: self.ports.context.get_session(record.session_id, o))
            self.cursor.ctx_count = info.message_count
            self.cursor.raw_tokens = info.total_tokens
        elif self.cursor.ctx_count == 0:
            info = await self.call("CreateSession", lambda o: self.ports.context.create_session(spec, o))
            self.cursor.ctx_count = info.message_count
        goal_id = message_id(record.task_id, "goal")
        tokens = await self.append_once(
            "AppendMessage(goal)",
            lambda o: self.ports.context.append_message(
                record.session_id, "user", record.goal, (), o, client_message_id=goal_id
            ),
        )
        self.cursor.raw_tokens += tokens
        await self.begin_step()

    async def begin_step(self, prefix: Sequence[TaskEvent] = ()) -> None:
        """Guards, then the next step starts (one commit with the previous step's last events)."""
        stop = guards.max_steps(steps_done=self.cursor.step, limit=self.record.max_steps)
        if stop is not None:
            await self.abort(stop, prefix=prefix)
        late = guards.deadline(now_ms=now_ms(), deadline_ms=self.deadline_ms)
        if late is not None:
            await self.fail(late, prefix=prefix)
        c = self.cursor
        c.step += 1
        self.loop.tasks.metrics.task_step(self.agent.id)
        c.phase = Phase.THINKING
        c.reply = None
        c.reply_appended = False
        c.calls = []
        # Overlaps the step's BuildContext and DiscoverTools; think() settles it before Generate.
        await self.settle()
        self.checkpoint_behind([*prefix, self.event(EventKind.STEP_STARTED, f"step {c.step}")])

    async def think(self) -> None:
        """BuildContext, DiscoverTools, budget guard, Generate; the reply is checkpointed before any tool runs."""
        record, agent, c = self.record, self.agent, self.cursor
        build = self.call(
            "BuildContext",
            lambda o: self.ports.context.build_context(record.session_id, agent.max_context_tokens, o),
        )
        if self.tools_known():
            view = await build
            offered = await self.offer_tools()
        else:
            # Both only read, and neither needs the other's answer: one round trip instead of two.
            view, offered = await alongside(build, self.offer_tools())
        await self.settle()
        over = guards.budget(
            spent=self.usage.total_tokens,
            prompt_tokens=view.total_tokens,
            reserve_tokens=agent.max_output_tokens,
            token_budget=record.token_budget,
        )
        if over is not None:
            await self.abort(over)
        reply = await self.call(
            "Generate",
            lambda o: self.ports.provider.generate(
                model=agent.model,
                task_tag=agent.task_tag,
                messages=view.messages,
                tools=offered,
                temperature=agent.temperature,
                max_tokens=agent.max_output_tokens,
                agent_id=agent.id,
                opts=o,
                include_request=self.settings.record_prompts,
            ),
        )
        if reply.sent is not None:
            # Stored by the commit that checkpoints this reply, whichever exit it takes (prompts.py).
            self._prompt = (c.step, encode_prompt(reply.model, reply.sent, now_ms()))
        reply = _qualify(reply, record.task_id, c.step)
        self.usage = self.usage + reply.usage
        system_tokens = sum(b.tokens for b in view.blocks if b.kind == "SYSTEM")
        raw_context = c.raw_tokens + system_tokens
        events = [
            self.event(
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
            )
        ]
        if reply.tool_calls:
            names = ", ".join(call.name for call in reply.tool_calls)
            text = f"model asked for {len(reply.tool_calls)} tool call(s): {names}"
        else:
            text = f"model answered: {clip(reply.text, 120)}" if reply.text.strip() else "model replied with nothing"
        events.append(
            self.event(
                EventKind.MODEL_REPLY,
                text,
                usage=reply.usage,
                attributes={
                    "model": reply.model,
                    "finish_reason": reply.finish_reason,
                    "cost_usd": repr(reply.cost_usd),
                },
            )
        )
        if not reply.tool_calls:
            if not reply.text.strip():
                empty = AgentmeshError(
                    ErrorCode.INTERNAL,
                    "the model replied with neither text nor a tool call",
                    metadata={"reason": "empty_reply", "finish_reason": reply.finish_reason},
                )
                await self.fail(empty, prefix=events)
            await self.succeed(reply, prefix=events)
        c.reply = reply
        c.reply_appended = False
        c.calls = [CallState(call) for call in reply.tool_calls]
        c.phase = Phase.ACTING
        events += await self.start_call(0, prefix=events)
        await self.commit(events)
        await self.reached("after_reply_checkpoint")

    async def succeed(self, reply: ModelReply, *, prefix: Sequence[TaskEvent]) -> NoReturn:
        """The final answer: checkpointed with the reply, then recorded in the session (best effort)."""
        status = TaskStatus.SUCCEEDED
        await self.commit(
            [
                *prefix,
                self.event(EventKind.ANSWER, reply.text, status=status),
                self.event(EventKind.STATUS, "status SUCCEEDED", status=status),
            ],
            status=status,
            answer=reply.text,
            error=None,
        )
        record = self.record
        answer_id = message_id(record.task_id, "answer")
        try:
            await self.append_once(
                "AppendMessage(answer)",
                lambda o: self.ports.context.append_message(
                    record.session_id, "assistant", reply.text, (), o, client_message_id=answer_id
                ),
            )
        except PortFailure as exc:
            # The task has its answer already; the session misses it until a resume appends it.
            log.warning("task %s: answer not recorded in the session: %s", record.task_id, exc)
        raise Stop(RunResult.FINISHED)

    async def start_call(self, index: int, *, prefix: Sequence[TaskEvent]) -> list[TaskEvent]:
        """Marks call `index` as issued (its TOOL_CALL event, for the next commit) after the loop guard;
        a repeat of an ENGINEERING failure is answered at once without running it."""
        c = self.cursor
        cs = c.calls[index]
        call = cs.call
        signature = call.signature()
        times = c.signatures.get(signature, 0) + 1
        c.signatures[signature] = times
        tool_event = self.event(EventKind.TOOL_CALL, f"{call.name} {clip(call.arguments_json, 120)}", tool_call=call)
        looping = guards.loop(call, times=times, threshold=self.settings.loop_threshold)
        if looping is not None:
            await self.abort(looping, prefix=[*prefix, tool_event])
        if signature not in c.failed:
            cs.state = CallStage.RUNNING
            return [tool_event]
        # ENGINEERING: the same failing call is never re-issued; the model hears why.
        fallback = self.fallback_for(call.name, "")
        error = policy.repeat_of_failure(call, c.failed[signature], fallback)
        not_repeated = Correction(NextStep.NOT_REPEATED, fallback_tool=fallback, failed_with=error.code)
        cs.outcome = ToolOutcome(call.id, call.name, error=error, correction=not_repeated)
        cs.state = CallStage.DONE
        fallback_event = self.event(
            EventKind.FALLBACK,
            f"{call.name}: repeat of a failed call not run; "
            + (f"fallback_tool: {fallback}" if fallback else "no fallback tool"),
            tool_call=call,
            error=error,
        )
        return [tool_event, fallback_event]

    async def act(self) -> None:
        """Records the reply in the session, then runs its tool calls in order.

        Per call: ExecuteTool -> policy -> AppendToolResult -> one commit with its outcome events
        and the next call's TOOL_CALL (or the next step's start). A crash anywhere in between
        resumes at the call: it is re-sent with its idempotency key (replayed, not re-run) and
        the append is detected by the session's message count.
        """
        record, c = self.record, self.cursor
        reply = c.reply
        assert reply is not None

        async def record_reply() -> None:
            # Marked as soon as it lands, whatever happens to a call beside it: a resumed run
            # must not append it again.
            reply_id = message_id(record.task_id, f"{c.step}:reply")
            c.raw_tokens += await self.append_once(
                "AppendMessage(reply)",
                lambda o: self.ports.context.append_message(
                    record.session_id, "assistant", reply.text, reply.tool_calls, o, client_message_id=reply_id
                ),
            )
            c.reply_appended = True

        early: ToolOutcome | None = None
        if not c.reply_appended:
            first = c.calls[0]
            if first.state is CallStage.RUNNING and first.resolved is None:
                # Recording the reply and running its first call are independent: the call's
                # result is appended only after both, so the session keeps its order.
                _, early = await alongside(record_reply(), self.fetch_outcome(0, first))
            else:
                await record_reply()
        for index, cs in enumerate(c.calls):
            if cs.state is CallStage.APPENDED:
                continue
            if cs.state is CallStage.WAITING:
                # Acquired while still parked (a stray queue entry): park again without writing.
                raise Stop(RunResult.PARKED)
            events: list[TaskEvent] = []
            try:
                if cs.state is CallStage.NEW:
                    events += await self.start_call(index, prefix=())
                if cs.state is CallStage.RUNNING:
                    outcome = early if early is not None else await self.fetch_outcome(index, cs)
                    early = None
                    events += await self.apply(cs, outcome)
                assert cs.state is CallStage.DONE and cs.outcome is not None
                tokens = await self.append_result(cs.outcome)
            except PortFailure as failure:
                # The call's events go with the failure: the checkpoint records the call as done, so a
                # resumed run appends its result without producing them again (found by `make chaos`).
                log.warning("task %s: %s", self.record.task_id, failure)
                await self.fail(failure.error, prefix=events)
            await self.reached("after_append_result")
            c.raw_tokens += raw_tokens_of(cs.outcome, tokens)
            cs.state = CallStage.APPENDED
            if index + 1 < len(c.calls):
                events += await self.start_call(index + 1, prefix=events)
                await self.commit(events)
            else:
                await self.begin_step(prefix=events)
                return
        await self.begin_step()

    async def apply(self, cs: CallState, outcome: ToolOutcome) -> list[TaskEvent]:
        """Applies the policy to a tool outcome: the events to commit with it, or parks / aborts."""
        c, call = self.cursor, cs.call
        if outcome.tool_call_id != call.id or outcome.tool_name != call.name:
            outcome = replace(outcome, tool_call_id=call.id, tool_name=call.name)
        decision = policy.decide(
            outcome,
            contract_failures=c.contract_failures.get(call.name, 0),
            max_contract_retries=self.settings.max_contract_retries,
            spec_fallback=self.fallback_for(call.name, ""),
        )
        result_event = self.event(EventKind.TOOL_RESULT, outcome_summary(outcome), tool_call=call, tool_result=outcome)
        action = decision.action
        if action == policy.Action.PARK:
            pending = outcome.pending or policy.settlement_request(outcome, call)
            if pending is None:
                assert decision.error is not None
                await self.fail(decision.error, prefix=[result_event])
            cs.state = CallStage.WAITING
            # Indexed before it is parked: the expiry sweeper must find every parked task.
            await self.loop.tasks.index_approval(self.record.task_id, pending.approval_id, pending.expire_time_ms)
            await self.commit(
                [
                    self.event(
                        EventKind.APPROVAL_REQUIRED,
                        f"{call.name} needs settlement {pending.approval_id} (RAN or NOT_RAN): its outcome is unknown"
                        if pending.is_settlement
                        else f"{call.name} needs approval {pending.approval_id}: {clip(pending.impact, 140)}",
                        status=TaskStatus.WAITING_APPROVAL,
                        tool_call=call,
                        pending_approval=pending,
                    ),
                    self.event(EventKind.STATUS, "status WAITING_APPROVAL", status=TaskStatus.WAITING_APPROVAL),
                ],
                status=TaskStatus.WAITING_APPROVAL,
                pending=pending,
            )
            raise Stop(RunResult.PARKED)
        if action == policy.Action.FALLBACK and outcome.error is not None and decision.fallback_tool:
            # The model sees the fallback even when only the registry named it.
            outcome = replace(outcome, error=outcome.error.replace(fallback_tool=decision.fallback_tool))
        cs.outcome = replace(outcome, correction=decision.correction)
        cs.state = CallStage.DONE
        if action == policy.Action.ABORT:
            assert decision.error is not None
            await self.abort(decision.error, prefix=[result_event])
        events = [result_event]
        signature = call.signature()
        if action == policy.Action.OK:
            c.contract_failures.pop(call.name, None)
            output = outcome.output
            if output is not None and output.ref is not None and READ_PAYLOAD_TOOL not in c.pinned:
                c.pinned.append(READ_PAYLOAD_TOOL)
        elif action == policy.Action.CORRECT:
            err = decision.error
            assert err is not None
            c.contract_failures[call.name] = decision.retries_used
            hints = "; ".join(
                f"{v.path} {v.rule}: {v.hint or v.expected}" for v in err.violations if v.hint or v.expected
            )
            events.append(
                self.event(
                    EventKind.CORRECTION,
                    f"{call.name}: {err.code.name}, correction {decision.retries_used} of "
                    f"{self.settings.max_contract_retries}" + (f" ({clip(hints, 140)})" if hints else ""),
                    tool_call=call,
                    error=err,
                )
            )
        else:  # FALLBACK
            err = outcome.error
            assert err is not None
            c.contract_failures.pop(call.name, None)
            c.failed[signature] = err.code.name
            if decision.fallback_tool and decision.fallback_tool not in c.pinned:
                c.pinned.append(decision.fallback_tool)
            events.append(
                self.event(
                    EventKind.FALLBACK,
                    f"{call.name}: {err.code.name} ({err.error_class.name}); "
                    + (f"fallback_tool: {decision.fallback_tool}" if decision.fallback_tool else "no fallback tool"),
                    tool_call=call,
                    error=err,
                )
            )
        return events


def _qualify(reply: ModelReply, task_id: str, step: int) -> ModelReply:
    """Gives every tool call an id unique in the session (task, step, index): a model's own ids repeat
    across steps and tasks, and context_svc keeps one result per id. Done before the reply is
    checkpointed, so a resumed run uses the same ids."""
    calls = tuple(replace(call, id=qualified_call_id(task_id, step, i)) for i, call in enumerate(reply.tool_calls))
    return replace(reply, tool_calls=calls)
