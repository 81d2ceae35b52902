"""The step's reply in the session log: recorded on its own, or with its first call's result in one
AppendMessage (`following`, issue 45), which saves a call per step; a run that ends before that result's
append records the reply on its own first."""

from __future__ import annotations

import logging
from dataclasses import replace

from agentmesh.errors import ErrorCode
from dispatcher_svc.model import ModelReply, ToolOutcome
from dispatcher_svc.run.context import Run
from dispatcher_svc.run.decisions import UNCERTAIN_CODES
from dispatcher_svc.run.downstream import Downstream, PortFailure
from dispatcher_svc.run.names import message_id

log = logging.getLogger("dispatcher_svc.loop")


async def record_reply_with(run: Run, outcome: ToolOutcome, *, build: bool) -> int | None:
    """The step's reply and `outcome` (its first call's) appended in one call: the result's tokens;
    None when only the reply, or neither, is known to have landed (the caller appends the result as
    usual; `record_reply` first when the reply is not marked)."""
    record, c = run.state.record, run.state.cursor
    reply = c.reply
    assert reply is not None
    reply_id = message_id(record.task_id, f"{c.step}:reply")
    both = await append_with_reply(run.downstream, reply_id, reply, outcome, build=build)
    if both is None:
        await record_reply(run)
        return None
    reply_tokens, result_tokens = both
    c.raw_tokens += reply_tokens
    c.reply_appended = True
    return result_tokens


async def reply_before(run: Run) -> None:
    """A run ending (or failing) before the reply rode on its first result's append: the reply is
    recorded on its own, as it was beside the call before (issue 45); best effort, since the run is
    ending anyway and a resumed one appends it (the cursor says it is not)."""
    try:
        await record_reply(run)
    except PortFailure as failure:
        log.warning("task %s: the reply is not in the session yet: %s", run.state.record.task_id, failure)


async def record_reply(run: Run) -> None:
    """AppendMessage of the step's reply, marked as soon as it lands, whatever happens to a call
    beside it: a resumed run must not append it again."""
    record, c = run.state.record, run.state.cursor
    reply = c.reply
    assert reply is not None
    reply_id = message_id(record.task_id, f"{c.step}:reply")
    c.raw_tokens += await run.downstream.append_once(
        "AppendMessage(reply)",
        lambda o: run.downstream.ports.context.append_message(
            record.session_id, "assistant", reply.text, reply.tool_calls, o, client_message_id=reply_id
        ),
    )
    c.reply_appended = True


async def append_with_reply(
    down: Downstream, reply_id: str, reply: ModelReply, outcome: ToolOutcome, *, build: bool = False
) -> tuple[int, int | None] | None:
    """The step's reply and its first call's result in one AppendMessage (`following`, issue 45):
    the tokens each took (0 when context_svc had it), the result's None when the reply landed
    alone (a context_svc of an earlier release: the caller appends the result as usual). None
    when nothing is known to have landed: FAILED_PRECONDITION (the caller appends both as usual,
    where each conflict is handled), or a result read back already."""
    session_id = down.state.record.session_id
    if outcome.tool_call_id in down.state.read_back:
        return None
    build_tokens = down.build_tokens(build)
    down.state.next_view = None
    try:
        appended = await down.call(
            f"AppendMessage(reply, {outcome.tool_name})",
            lambda o: down.ports.context.append_message(
                session_id,
                "assistant",
                reply.text,
                reply.tool_calls,
                o,
                client_message_id=reply_id,
                build_tokens=build_tokens,
                following=(outcome,),
            ),
            retry_on=UNCERTAIN_CODES,
        )
    except PortFailure as failure:
        if failure.error.code != ErrorCode.FAILED_PRECONDITION:
            raise
        return None
    reply_tokens = down.appended("AppendMessage(reply)", replace(appended, view=None, following=()))
    if not appended.following:
        return reply_tokens, None  # an earlier release: the reply alone (its view predates the result)
    result = replace(appended.following[0], view=appended.view)
    return reply_tokens, down.appended(f"AppendToolResult({outcome.tool_name})", result)
