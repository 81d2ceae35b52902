"""context_svc's protobuf mappings: requests' messages to the context domain's values and back.

Part of the RPC edge with server.py (which calls these, one domain call per RPC) and server_memory.py
(the memory RPCs' own mappings): messages, sessions, summaries, views (with `MessageCache`, the
protobuf forms of log messages a view sends again and again), tool results and hop summaries.
Mapping only: the checks of what a value may hold are the domain's.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from agentmesh.chat import DEFAULT_MAX_JSON_DEPTH, json_depth_exceeds
from agentmesh.errors import InvalidRequestError
from agentmesh.rpc import codec
from agentmesh.rpc.status import checked_from_detail, to_detail
from agentmesh.v1 import common_pb2, context_pb2
from context_svc.handoff_model import Brief, Citation, Demotion, FactKind, Hop
from context_svc.handoff_model import Fact as HandoffFact
from context_svc.model import BlockKind, ContextView, Message, PendingInfo, Session, Summary, ToolOutcome

__all__ = [
    "MessageCache",
    "brief_domain",
    "citation_domain",
    "hop_pb",
    "message_domain",
    "message_pb",
    "range_domain",
    "session_pb",
    "summary_pb",
    "tool_outcome_domain",
    "tool_outcome_pb",
    "view_pb",
]

_BLOCK_TO_PB = {
    BlockKind.SYSTEM: context_pb2.CONTEXT_BLOCK_KIND_SYSTEM,
    BlockKind.SUMMARY: context_pb2.CONTEXT_BLOCK_KIND_SUMMARY,
    BlockKind.RECENT: context_pb2.CONTEXT_BLOCK_KIND_RECENT,
    BlockKind.OBSERVATIONS: context_pb2.CONTEXT_BLOCK_KIND_OBSERVATIONS,
}


def message_domain(message: common_pb2.Message, *, max_json_depth: int = DEFAULT_MAX_JSON_DEPTH) -> Message:
    """The domain message of an AppendMessage; InvalidRequestError naming the bad field.

    Tool-call arguments stay the model's raw text (not JSON is fine: the tool answers that in-band),
    but text nesting deeper than `max_json_depth` (`server.max_json_depth`) is refused before the
    fact extraction parses it."""
    for i, call in enumerate(message.tool_calls):
        if json_depth_exceeds(call.arguments_json, max_json_depth):
            raise InvalidRequestError(
                f"message.tool_calls[{i}].arguments_json",
                f"nests arrays/objects deeper than {max_json_depth} levels (server.max_json_depth)",
            )
    return Message(
        role=codec.role_from_pb(message.role, "message.role"),
        content=message.content,
        tool_calls=tuple(codec.tool_call_from_pb(c) for c in message.tool_calls),
        tool_call_id=message.tool_call_id,
        name=message.name,
        create_time=codec.seconds(message.create_time, "message.create_time")
        if message.HasField("create_time")
        else 0.0,
    )


def message_pb(message: Message) -> common_pb2.Message:
    return common_pb2.Message(
        role=codec.role_to_pb(message.role),
        content=message.content,
        tool_calls=[codec.tool_call_to_pb(c) for c in message.tool_calls],
        tool_call_id=message.tool_call_id,
        name=message.name,
        token_count=message.token_count,
        create_time=codec.timestamp(message.create_time),
        tool_error=to_detail(message.error) if message.error is not None else None,
        correction=codec.correction_to_pb(message.correction) if message.correction is not None else None,
    )


def session_pb(session: Session) -> context_pb2.Session:
    b = session.budget
    return context_pb2.Session(
        session_id=session.session_id,
        agent_id=session.agent_id,
        goal=session.goal,
        sub_goals=list(session.sub_goals),
        system_prompt=session.system_prompt,
        budget=context_pb2.BudgetSettings(
            max_context_tokens=b.max_context_tokens,
            reserve_system_prompt_tokens=b.reserve_system_prompt_tokens,
            summary_trigger_tokens=b.summary_trigger_tokens,
            keep_recent_messages=b.keep_recent_messages,
            encoding=b.encoding,
        ),
        message_count=session.message_count,
        total_tokens=session.total_tokens,
        summary_count=session.summary_count,
        create_time=codec.timestamp(session.create_time),
        newest_task_id=session.newest_task_id or session.session_id,
    )


def summary_pb(summary: Summary) -> context_pb2.Summary:
    return context_pb2.Summary(
        user_intent=summary.user_intent,
        key_data=list(summary.key_data),
        open_questions=list(summary.open_questions),
        actions_taken=list(summary.actions_taken),
        first_index=summary.first_index,
        last_index=summary.last_index,
        summarizer=summary.summarizer,
        token_count=summary.token_count,
    )


class MessageCache:
    """Protobuf forms of log messages (immutable, and most of a view is the same window again)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._data: OrderedDict[Message, common_pb2.Message] = OrderedDict()

    def pb(self, message: Message) -> common_pb2.Message:
        if message.index < 0:  # assembled for this view (system block, summary)
            return message_pb(message)
        found = self._data.get(message)
        if found is None:
            found = self._data[message] = message_pb(message)
            if len(self._data) > self.size:
                self._data.popitem(last=False)
        else:
            self._data.move_to_end(message)
        return found


def view_pb(view: ContextView, messages: MessageCache) -> context_pb2.ContextView:
    return context_pb2.ContextView(
        messages=[messages.pb(m) for m in view.messages],
        blocks=[
            context_pb2.ContextBlock(
                kind=_BLOCK_TO_PB[b.kind],
                tokens=b.tokens,
                budget_tokens=b.budget_tokens,
                message_count=b.message_count,
                text=b.text,
            )
            for b in view.blocks
        ],
        total_tokens=view.total_tokens,
        budget_tokens=view.budget_tokens,
        summarized_messages=view.summarized_messages,
        dropped_messages=view.dropped_messages,
        compacted=view.compacted,
        debug_text=view.debug_text,
    )


def tool_outcome_domain(result: common_pb2.ToolResult) -> ToolOutcome:
    kind = result.WhichOneof("outcome")
    base: dict[str, Any] = {"tool_call_id": result.tool_call_id, "tool_name": result.tool_name}
    if kind == "output":
        output = result.output
        structured = {
            common_pb2.RESULT_TYPE_STRUCTURED: True,
            common_pb2.RESULT_TYPE_TEXT: False,
        }.get(output.result_type)
        content = output.WhichOneof("content")
        if content == "ref":
            return ToolOutcome(
                **base,
                ref=codec.payload_ref_from_pb(output.ref, "result.output.ref"),
                digest=output.digest,
                structured=structured,
                redacted=output.redacted,
            )
        return ToolOutcome(**base, inline=output.inline, structured=structured, redacted=output.redacted)
    if kind == "error":
        return ToolOutcome(
            **base,
            error=checked_from_detail(result.error, "result.error"),
            correction=codec.correction_from_pb(result.correction, "result.correction"),
        )
    if kind == "pending_approval":
        pending = result.pending_approval
        return ToolOutcome(
            **base,
            pending=PendingInfo(
                approval_id=pending.approval_id,
                impact=pending.impact,
                expire_at=codec.seconds(pending.expire_time, "result.pending_approval.expire_time")
                if pending.HasField("expire_time")
                else 0.0,
            ),
        )
    raise InvalidRequestError("result.outcome", "one of output, error or pending_approval is required")


def tool_outcome_pb(outcome: ToolOutcome) -> common_pb2.ToolResult:
    """A result read back from the log (GetToolResult) as a ToolResult."""
    pb = common_pb2.ToolResult(tool_call_id=outcome.tool_call_id, tool_name=outcome.tool_name)
    if outcome.error is not None:
        pb.error.CopyFrom(to_detail(outcome.error))
        if outcome.correction is not None:
            pb.correction.CopyFrom(codec.correction_to_pb(outcome.correction))
    elif outcome.pending is not None:
        pending = outcome.pending
        pb.pending_approval.approval_id = pending.approval_id
        pb.pending_approval.impact = pending.impact
        if pending.expire_at:
            pb.pending_approval.expire_time.CopyFrom(codec.timestamp(pending.expire_at))
    else:
        result_type = {True: common_pb2.RESULT_TYPE_STRUCTURED, False: common_pb2.RESULT_TYPE_TEXT}
        pb.output.result_type = result_type.get(outcome.structured, common_pb2.RESULT_TYPE_UNSPECIFIED)  # type: ignore[arg-type]
        pb.output.redacted = outcome.redacted
        if outcome.ref is not None:
            pb.output.ref.CopyFrom(codec.payload_ref_to_pb(outcome.ref))
            pb.output.digest = outcome.digest
        else:
            pb.output.inline = outcome.inline or ""
    return pb


def range_domain(message: context_pb2.LineRange | context_pb2.ByteRange) -> tuple[int, int]:
    return int(message.start), int(message.end)


_DEMOTION_TO_PB = {
    Demotion.CITATION_NOT_FOUND: context_pb2.HANDOFF_DEMOTION_REASON_CITATION_NOT_FOUND,
    Demotion.VALUE_NOT_IN_SOURCE: context_pb2.HANDOFF_DEMOTION_REASON_VALUE_NOT_IN_SOURCE,
    Demotion.NO_ACCESS: context_pb2.HANDOFF_DEMOTION_REASON_NO_ACCESS,
    Demotion.MALFORMED: context_pb2.HANDOFF_DEMOTION_REASON_MALFORMED,
}
_FACT_KIND_TO_PB = {
    FactKind.CONFIRMED: context_pb2.HANDOFF_FACT_KIND_CONFIRMED,
    FactKind.INFERRED: context_pb2.HANDOFF_FACT_KIND_INFERRED,
}


def citation_domain(citation: context_pb2.HandoffCitation) -> Citation:
    source, selector = citation.WhichOneof("source"), citation.WhichOneof("selector")
    return Citation(
        ref_id=citation.ref_id if source == "ref_id" else None,
        message_index=int(citation.message_index) if source == "message_index" else None,
        json_path=citation.json_path if selector == "json_path" else None,
        line_range=range_domain(citation.line_range) if selector == "line_range" else None,
    )


def brief_domain(brief: context_pb2.HandoffBrief) -> Brief:
    facts = []
    for fact in brief.facts:
        support = fact.WhichOneof("support")
        facts.append(
            HandoffFact(
                statement=fact.statement,
                value=fact.value,
                citation=citation_domain(fact.citation) if support == "citation" else None,
                basis=fact.basis if support == "basis" else None,
            )
        )
    return Brief(
        summary=brief.summary,
        facts=tuple(facts),
        open_questions=tuple(brief.open_questions),
        risks=tuple(brief.risks),
        artifacts=tuple(brief.artifacts),
    )


def hop_pb(hop: Hop, request: context_pb2.BuildHandoffRequest) -> context_pb2.BuildHandoffResponse:
    return context_pb2.BuildHandoffResponse(
        text=hop.text,
        token_count=hop.token_count,
        facts=[
            context_pb2.CheckedHandoffFact(
                fact=given,
                kind=_FACT_KIND_TO_PB[checked.kind],
                demotion_reason=_DEMOTION_TO_PB[checked.reason] if checked.reason is not None else None,
                detail=checked.detail,
                shown=checked.shown,
            )
            for given, checked in zip(request.brief.facts, hop.facts, strict=True)
        ],
        confirmed_count=hop.confirmed,
        inferred_count=hop.inferred,
        demoted_count=hop.demoted,
        record_ref_id=hop.record_ref_id,
        user_constraints=list(hop.user_constraints),
        granted_ref_ids=list(hop.granted_ref_ids),
        missing_artifacts=list(hop.missing_artifacts),
        omitted_count=hop.omitted,
        summary_clipped=hop.summary_clipped,
    )
