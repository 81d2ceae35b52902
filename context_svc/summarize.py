"""Structured summaries of older turns (docs/design.md §4): user intent, key data, open questions, actions.

- `ExtractiveSummarizer` (the default) is deterministic: every fact of every summarised message
  (numbers, dates, identifiers, ref_ids; see facts.py) goes into `key_data` inside the clause it
  came from, once; so it keeps every fact by construction. Rolling: a new summary extends the
  previous one, so the facts of earlier compactions are carried forward.
- `LLMSummarizer` asks a model (through a `SummaryModel`, provided by server.py over gRPC to
  provider_svc) for the same four fields as JSON, then checks the result on text: if any fact of the
  source is missing, the summary is rejected (`SummaryRejectedError`) and the caller falls back to
  the extractive one.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from agentmesh.chat import lone_surrogate_path
from agentmesh.retrieval import tokenize
from context_svc.facts.facts import Fact, find_facts, missing_facts
from context_svc.model import Message, OpenItem, Role, Summary

__all__ = [
    "ExtractiveSummarizer",
    "LLMSummarizer",
    "MessageNotes",
    "SummaryModel",
    "SummaryRejectedError",
    "check_faithful",
    "known_facts",
    "message_notes",
    "salient_clause",
    "source_texts",
]

_MAX_INTENTS = 4
_INTENT_CHARS = 200
_CLAUSE_CHARS = 220
_WINDOW_CHARS = 60
_ACTION_ARGS_CHARS = 100
_QUESTION_CHARS = 200

# Clause ends: newline, CJK and ASCII sentence punctuation ("." only before whitespace: decimals,
# versions and hosts keep their dots).
_CLAUSE_RE = re.compile(r"[^\n。！？；!?;]+?(?:[。！？；!?;]|\.(?=\s)|(?=\n)|$)")
# A clause that is only a greeting, thanks or filler ("Hey Sam!", "Wow, great!", "谢谢！") never
# stands for what the user wants (issue 37: LoCoMo's summaries were each session's "Hey Sam!").
_FILLER_RE = re.compile(
    r"(?i)^\W*(?:(?:hi|hey|hello|yo|thanks|thank\s+you|wow|great|awesome|cool|nice|ok(?:ay)?|sure|yes|yeah|yep|"
    r"no|nope|haha|lol|oh|ah|hmm|well|good\s+(?:morning|afternoon|evening|night)|bye|see\s+you|"
    r"你好|您好|谢谢|多谢|好的|好吧|嗯|哈哈|太好了|没问题|早上好|晚上好|再见)\b\W*)+(?:\w+\W*)?$"
)
_QUESTION_RE = re.compile(r"[?？]|[吗呢么][。.!！]?\s*$|^\s*(?:请问|是否|能否|能不能|为什么|怎么)", re.M)


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _args_text(arguments_json: str) -> str:
    """Tool-call arguments as compact `k=v` text (the raw text if not a JSON object)."""
    try:
        value = json.loads(arguments_json) if arguments_json else {}
    except (ValueError, RecursionError):
        return arguments_json
    if lone_surrogate_path(arguments_json, value) is not None:
        # A "\\ud800" escape decodes to text Redis cannot store: keep the escaped original.
        return arguments_json
    if isinstance(value, dict):
        return ", ".join(
            f"{k}={v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}" for k, v in value.items()
        )
    return json.dumps(value, ensure_ascii=False)


def source_texts(message: Message) -> list[str]:
    """The texts of a message whose facts a summary must keep: content and tool-call arguments."""
    texts = [message.content] if message.content else []
    texts += [_args_text(call.arguments_json) for call in message.tool_calls]
    return texts


def _label(message: Message) -> str:
    if message.role is Role.TOOL:
        return f"tool {message.name or '?'}"
    return message.role.value


@dataclass(frozen=True)
class _Piece:
    """One text of a message with its facts, ready to cut into snippets."""

    label: str
    text: str
    facts: tuple[Fact, ...]


@dataclass(frozen=True)
class MessageNotes:
    """What the extractive summarizer takes from one message (computed once, cacheable)."""

    index: int
    role: Role
    pieces: tuple[_Piece, ...] = ()
    intent: str = ""
    question: str = ""
    calls: tuple[tuple[str, str, str], ...] = ()
    """(call id, tool name, short args) of an assistant message."""
    answers_user: bool = False
    """An assistant message with text: it answers the user's open questions."""
    tool_name: str = ""
    tool_call_id: str = ""
    outcome: str = ""
    error_code: str = ""
    fallback_tool: str = ""
    facts: tuple[str, ...] = field(default=())


def salient_clause(text: str, facts: Sequence[Fact] | None = None) -> str:
    """The clause of `text` that says the most: distinct content words, facts weighing more and a
    question a little; greetings and fillers weigh nothing; ties go to the earliest clause. Empty
    when every clause is a greeting or filler: such a message states no intent. `facts`: those of
    `text` when the caller found them already (positions in `text`)."""
    starts = sorted(f.start for f in (find_facts(text) if facts is None else facts))
    best, best_weight, fillers = "", -1, True
    for match in _CLAUSE_RE.finditer(text):
        clause = match.group().strip()
        if not clause:
            continue
        if _FILLER_RE.match(clause):
            weight = 0
        else:
            fillers = False
            in_clause = bisect.bisect_left(starts, match.end()) - bisect.bisect_left(starts, match.start())
            weight = len(set(tokenize(clause))) + 3 * in_clause + 2 * bool(_QUESTION_RE.search(clause))
        if weight > best_weight:
            best, best_weight = clause, weight
    if best_weight < 0:
        return text
    return "" if fillers else best


def message_notes(message: Message) -> MessageNotes:
    """The notes of one message (its index must be set)."""
    pieces: list[_Piece] = []
    label = _label(message)
    if message.content:
        pieces.append(_Piece(label, message.content, tuple(find_facts(message.content))))
    calls = []
    for call in message.tool_calls:
        args = _args_text(call.arguments_json)
        pieces.append(_Piece(f"call {call.name}", args, tuple(find_facts(args))))
        calls.append((call.id, call.name, _clip(args, _ACTION_ARGS_CHARS)))
    facts = tuple(dict.fromkeys(f.text for p in pieces for f in p.facts))
    intent = question = outcome = ""
    if message.role is Role.USER and message.content:
        intent = _clip(salient_clause(message.content, pieces[0].facts), _INTENT_CHARS)
        if _QUESTION_RE.search(message.content):
            question = _clip(message.content, _QUESTION_CHARS)
    if message.role is Role.TOOL:
        if message.error_code:
            outcome = f"error {message.error_code}"
        elif message.content.startswith("[tool ") and "approval" in message.content.split("\n", 1)[0]:
            outcome = "awaiting approval"
        else:
            outcome = "ok" + (f", output in {message.ref.ref_id}" if message.ref is not None else "")
    return MessageNotes(
        index=message.index,
        role=message.role,
        pieces=tuple(pieces),
        intent=intent,
        question=question,
        calls=tuple(calls),
        answers_user=message.role is Role.ASSISTANT and bool(message.content.strip()),
        tool_name=message.name if message.role is Role.TOOL else "",
        tool_call_id=message.tool_call_id,
        outcome=outcome,
        error_code=message.error_code,
        fallback_tool=message.fallback_tool,
        facts=facts,
    )


def _windows(text: str, facts: Sequence[Fact], wanted: Iterable[Fact], start: int, end: int) -> str:
    """Windows of `text[start:end]` around the `wanted` facts, merged; no window cuts a fact."""
    windows: list[list[int]] = []
    # Only a fact starting less than the longest fact's length before a window edge can span it:
    # look those up by start (bisect) instead of scanning every fact per window (quadratic on a
    # long text full of numbers).
    ordered = sorted(facts, key=lambda f: f.start)
    starts = [f.start for f in ordered]
    longest = max((f.end - f.start for f in ordered), default=0)

    def spanning(edge: int) -> list[Fact]:
        first = bisect.bisect_left(starts, edge - longest)
        last = bisect.bisect_left(starts, edge)
        return [f for f in ordered[first:last] if f.start < edge < f.end]

    for fact in wanted:
        lo, hi = max(start, fact.start - _WINDOW_CHARS), min(end, fact.end + _WINDOW_CHARS)
        for other in spanning(lo):
            lo = min(lo, other.start)
        for other in spanning(hi):
            hi = max(hi, other.end)
        if windows and lo <= windows[-1][1]:
            windows[-1][1] = max(windows[-1][1], hi)
        else:
            windows.append([lo, hi])
    return " … ".join(" ".join(text[lo:hi].split()) for lo, hi in windows)


def _snippets(piece: _Piece, wanted: set[str]) -> list[str]:
    """Clauses of `piece` holding a wanted fact; long clauses cut to windows around those facts.
    No fact is cut in two, and a fact spanning clauses (a URL with "?") gets its own window."""
    out: list[str] = []
    covered: set[int] = set()
    for clause in _CLAUSE_RE.finditer(piece.text):
        start, end = clause.span()
        inside = [f for f in piece.facts if f.start >= start and f.end <= end]
        hits = [f for f in inside if f.text in wanted]
        if not hits:
            continue
        covered.update(f.start for f in hits)
        if end - start <= _CLAUSE_CHARS:
            out.append(" ".join(clause.group().split()))
        else:
            out.append(_windows(piece.text, inside, hits, start, end))
    rest = [f for f in piece.facts if f.text in wanted and f.start not in covered]
    if rest:
        out.append(_windows(piece.text, piece.facts, rest, 0, len(piece.text)))
    return out


class _Builder:
    """Accumulates a rolling summary."""

    def __init__(self, previous: Summary | None, first_index: int, seen: set[str] | None = None) -> None:
        self.intents = list(previous.intents) if previous else []
        self.key_data = list(previous.key_data) if previous else []
        self.open_items = list(previous.open_items) if previous else []
        self.actions = list(previous.actions_taken) if previous else []
        self.first_index = previous.first_index if previous else first_index
        # Facts already in the previous key data (shared, read-only) and those added here.
        self.known: set[str] = seen if seen is not None else (known_facts(previous) if previous else set())
        self.seen: set[str] = set()
        self.pending_calls: dict[str, int] = {}

    def add(self, notes: MessageNotes) -> None:
        if notes.intent:
            self.intents.append(notes.intent)
            # The first request states the task; the latest ones where it stands now.
            if len(self.intents) > _MAX_INTENTS:
                self.intents = [self.intents[0], *self.intents[-(_MAX_INTENTS - 1) :]]
        for piece in notes.pieces:
            wanted = {f.text for f in piece.facts if f.text not in self.known} - self.seen
            if not wanted:
                continue
            # One line per message part: its clauses that hold new facts.
            self.key_data.append(f"{piece.label}: {' … '.join(_snippets(piece, wanted))}")
            self.seen |= wanted
        if notes.answers_user:
            self.open_items = [item for item in self.open_items if item.kind != "question"]
        if notes.question:
            self.open_items.append(OpenItem("question", notes.index, notes.question))
        for call_id, name, args in notes.calls:
            self.pending_calls[call_id] = len(self.actions)
            self.actions.append(f"{name}({args}) -> no result yet")
        if notes.role is Role.TOOL:
            self._tool_result(notes)

    def _tool_result(self, notes: MessageNotes) -> None:
        position = self.pending_calls.pop(notes.tool_call_id, None)
        if position is not None:
            self.actions[position] = self.actions[position].replace("-> no result yet", f"-> {notes.outcome}")
        else:
            self.actions.append(f"{notes.tool_name} result ({notes.tool_call_id or 'no call id'}) -> {notes.outcome}")
        if notes.error_code:
            self.open_items.append(
                OpenItem("tool_error", notes.index, notes.error_code, notes.tool_name, notes.fallback_tool)
            )
        else:
            # A success of the same tool, or of the fallback an error named, resolves that error.
            self.open_items = [
                item
                for item in self.open_items
                if not (item.kind == "tool_error" and notes.tool_name in (item.tool, item.fallback_tool))
            ]

    def build(self, last_index: int, summarizer: str) -> Summary:
        return Summary(
            intents=tuple(self.intents),
            key_data=tuple(self.key_data),
            open_items=tuple(self.open_items),
            actions_taken=tuple(self.actions),
            first_index=self.first_index,
            last_index=last_index,
            summarizer=summarizer,
        )


class ExtractiveSummarizer:
    """Deterministic, keeps every fact (see the module docstring)."""

    name = "extractive"

    def summarize(
        self, previous: Summary | None, notes: Sequence[MessageNotes], *, seen: set[str] | None = None
    ) -> Summary:
        """`previous` extended with `notes` (messages in log order, right after previous.last_index).
        `seen`: `known_facts(previous)` when the caller has it cached."""
        if not notes:
            if previous is None:
                raise ValueError("nothing to summarise")
            return previous
        builder = _Builder(previous, notes[0].index, seen)
        for item in notes:
            builder.add(item)
        return builder.build(notes[-1].index, self.name)


class SummaryModel(Protocol):
    """A chat model reachable by the summarizer (server.py implements it over provider_svc)."""

    async def complete(self, *, model: str, system: str, user: str, agent_id: str, timeout_s: float) -> str:
        """The model's reply text."""
        ...


class SummaryRejectedError(Exception):
    """An LLM summary was rejected; `missing` lists the facts it dropped (empty: unusable reply)."""

    def __init__(self, reason: str, missing: Sequence[str] = ()) -> None:
        super().__init__(reason)
        self.reason = reason
        self.missing = list(missing)


LLM_SYSTEM_PROMPT = """You compress the older turns of an agent's conversation into a structured summary.
Reply with one JSON object and nothing else:
{"user_intent": "...", "key_data": ["..."], "open_questions": ["..."], "actions_taken": ["..."]}
- user_intent: what the user wants.
- key_data: facts, each with what it refers to. Copy EVERY number, amount, discount, percentage, date,
  time, identifier (order ids, pod and host names, versions, IPs, URLs) and every ref_id (pl_...) of the
  previous summary's key data and of the new messages VERBATIM, in their original form: keep 85折 as
  85折 (never 8.5折 or 15% off), 2025年6月1日 as 2025年6月1日, 三千元 as 三千元, ¥3,000 as ¥3,000.
  Never generalise a number into words like "a discount".
- open_questions: user questions not yet answered; tool errors not yet resolved.
- actions_taken: tool calls made and their outcomes."""


def _render_for_llm(messages: Sequence[Message]) -> str:
    lines = []
    for m in messages:
        head = f"[{m.index}] {_label(m)}"
        if m.tool_call_id and m.role is Role.TOOL:
            head += f" (call {m.tool_call_id})"
        body = m.content
        for call in m.tool_calls:
            body += f"\n  calls {call.name}({call.arguments_json}) id={call.id}"
        lines.append(f"{head}: {body}")
    return "\n".join(lines)


def _parse_reply(reply: str) -> dict[str, object]:
    text = reply.strip()
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, re.S)
    if fenced:
        text = fenced.group(1).strip()
    start, end = text.find("{"), text.rfind("}")
    if start == -1 or end <= start:
        raise SummaryRejectedError("the model's reply holds no JSON object")
    try:
        value = json.loads(text[start : end + 1])
    except ValueError as exc:
        raise SummaryRejectedError(f"the model's reply is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise SummaryRejectedError("the model's reply is not a JSON object")
    return value


def _strings(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,) if value.strip() else ()
    if isinstance(value, list):
        return tuple(str(v) for v in value if str(v).strip())
    return ()


class LLMSummarizer:
    """Summaries by a model, accepted only if they keep every fact of their source."""

    name = "llm"

    def __init__(self, model: SummaryModel, model_name: str, *, timeout_s: float = 30.0) -> None:
        self.model = model
        self.model_name = model_name
        self.timeout_s = timeout_s

    async def summarize(self, previous: Summary | None, messages: Sequence[Message], *, agent_id: str = "") -> Summary:
        """The model's summary of `previous` + `messages`; SummaryRejectedError if it drops a fact
        or cannot be parsed. Errors of the model call itself propagate (the caller falls back)."""
        if not messages:
            raise ValueError("nothing to summarise")
        prior = "\n".join(f"- {line}" for line in previous.key_data) if previous else ""
        user = (
            f"Previous summary:\n{previous.render()}\n\n" if previous else ""
        ) + f"New messages [{messages[0].index}-{messages[-1].index}]:\n{_render_for_llm(messages)}"
        reply = await self.model.complete(
            model=self.model_name, system=LLM_SYSTEM_PROMPT, user=user, agent_id=agent_id, timeout_s=self.timeout_s
        )
        data = _parse_reply(reply)
        summary = Summary(
            intents=_strings(data.get("user_intent")),
            key_data=_strings(data.get("key_data")),
            open_items=tuple(
                OpenItem("note", messages[-1].index, text) for text in _strings(data.get("open_questions"))
            ),
            actions_taken=_strings(data.get("actions_taken")),
            first_index=previous.first_index if previous else messages[0].index,
            last_index=messages[-1].index,
            summarizer=self.name,
        )
        sources: list[str] = [prior]
        for message in messages:
            sources += source_texts(message)
        missing = check_faithful(sources, summary)
        if missing:
            raise SummaryRejectedError(f"the summary drops {len(missing)} facts of its source", missing)
        return summary


def known_facts(summary: Summary) -> set[str]:
    """The facts a summary's key data already holds (a rolling summary adds only new ones)."""
    return {f.text for line in summary.key_data for f in find_facts(line)}


def check_faithful(sources: Iterable[str], summary: Summary) -> list[str]:
    """Facts of `sources` missing from the summary's text (empty: faithful)."""
    return missing_facts(sources, summary.render())
