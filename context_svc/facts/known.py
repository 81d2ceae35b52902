"""The "Known facts" lines of the system block, and the entity map GetSession returns (§4, issue 23).

The model trusts this part of the prompt more than any other, so it states only what entities.py
recorded as current, each with its source message (`[#12]`): a corrected value says "corrected from
X", a value its sentence rejected alongside says "(not X)", a key whose latest word only rejects
says "no current value", and an uncertain value is a quote of its clause, never `key=value`. The
user's facts come first, then the newest; under pressure the quotes of labelled facts go first, then
the facts at the end of that order.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from context_svc.facts.entities import MAX_ENTITIES_SHOWN, KnownFact, decode_entity

__all__ = ["KNOWN_FACTS_HEADER", "known_facts", "public_entities", "render_known"]

KNOWN_FACTS_HEADER = "Known facts (latest values; [#n] is the message each comes from):"
_MAX_NEGATED_SHOWN = 3


def _priority(fact: KnownFact) -> tuple[int, int, int, str]:
    # Stated constraints ("the refund cap is ..."), then values named by their form (ids, hosts),
    # then keys whose latest word only rejects, then quotes. Facts of one message in the order of
    # their keys: never the order a Redis hash returns them in, which its encoding decides (and a
    # process that holds the facts does not read them back, issue 45).
    tier = 3 if fact.uncertain else 2 if not fact.value else 0 if fact.labelled else 1
    return (0 if fact.role == "user" else 1, tier, -fact.index, fact.key)


def known_facts(entities: Mapping[str, tuple[str, int]]) -> list[KnownFact]:
    """The stored records (key -> (encoded record, message index)), most important first: the
    user's before the assistant's, labelled before named by form before rejections-only before
    quotes, newest first."""
    facts = [decode_entity(key, raw, index) for key, (raw, index) in entities.items()]
    return sorted(facts, key=_priority)[:MAX_ENTITIES_SHOWN]


@functools.lru_cache(maxsize=16384)
def _line(fact: KnownFact, quote: bool) -> str:
    who = "" if fact.role == "user" else ", assistant"
    source = f"[#{fact.index}{who}" + (f': "{fact.quote}"]' if quote and fact.quote else "]")
    if fact.uncertain:
        # The label is not certain: the clause speaks for itself.
        return f'- [#{fact.index}{who}: "{fact.quote or fact.value}"]'
    notes = []
    if fact.corrected_from:
        notes.append(f"corrected from {fact.corrected_from}")
    if fact.negated:
        notes.append("not " + ", ".join(fact.negated[:_MAX_NEGATED_SHOWN]))
    if not fact.value:
        return f"- {fact.key}: (no current value; {'; '.join(notes)}) {source}"
    note = f" ({'; '.join(notes)})" if notes else ""
    return f"- {fact.key}: {fact.value}{note} {source}"


def render_known(facts: list[KnownFact], *, quotes: bool) -> str:
    """The Known-facts section for `facts` (uncertain ones are always quoted)."""
    if not facts:
        return ""
    return "\n".join([KNOWN_FACTS_HEADER, *(_line(fact, quotes) for fact in facts)])


def public_entities(entities: Mapping[str, str]) -> dict[str, str]:
    """GetSession's map: key -> current value. Keys without a current value are left out; an
    uncertain value shows under its kind ("date") unless a labelled fact holds that key."""
    out: dict[str, str] = {}
    uncertain: dict[str, str] = {}
    for key, raw in entities.items():
        fact = decode_entity(key, raw)
        if not fact.value:
            continue
        if fact.uncertain:
            uncertain[key[1:]] = fact.value
        else:
            out[key] = fact.value
    for key, value in uncertain.items():
        out.setdefault(key, value)
    return out
