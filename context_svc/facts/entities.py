"""Entity state: the known facts of a session, each with its provenance (§4, issue 23).

Extracted from what the user and the assistant say (content and tool-call arguments) when a message
is appended, and stored per key in the session's entity hash (the store keeps the latest record of
a key and the index of the message it came from). A record is a `KnownFact`: the value verbatim,
the words it came from, the values its own sentence rejects ("300 USD, not 500 USD"), the value it
corrects ("从8折改为85折", or, for "更正：折扣是85折", the key's previous value, read at append
time), and who said it. Nothing rejected or replaced is ever a record's current value.

Keys: a label read from the words before the value (labels.py: "order amount", "refund cap"); else
what the value's own form says it is (an order id, a pod, a host, an IP, a discount); else the value
is "uncertain": kept under `~<kind>` and shown as a quote of its clause, never under an invented key.
Tool outputs are not mined: their facts are in the digests, the summaries and the payloads.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from context_svc.facts.facts import Fact, find_facts
from context_svc.facts.labels import (
    Segment,
    compatible,
    is_change,
    is_correction,
    is_question,
    label_before,
    read_segment,
)

__all__ = [
    "MAX_ENTITIES_SHOWN",
    "KnownFact",
    "decode_entity",
    "extract_entities",
    "extract_known",
    "label_for",
    "pending_corrections",
    "with_previous",
]

MAX_ENTITIES_SHOWN = 32
"""Known facts rendered into the system block at most (the user's first, then the newest)."""

_QUOTE_CHARS = 160
_OPENING_CHARS = 16
_MINED_CHARS = 16 * 1024
_UNCERTAIN = "~"

_PREFIXED_ID = re.compile(r"([A-Z][A-Z0-9]{1,7})[-_]\S*\d")
_POD_HINT = re.compile(r"(?i)\bpods?\b|容器|实例")
_HOST_HINT = re.compile(r"(?i)\b(?:host|node|server|db|database)\b|主机|节点|服务器")
_VERSION = re.compile(r"[vV]?\d+(?:\.\d+)+(?:[-+][0-9A-Za-z.]+)?")
_POD_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*-[a-z0-9]{5,10}-[a-z0-9]{5}")
# Values whose form says what they are; the others (an amount, a date) need a label to mean something.
_LABEL_BY_KIND = {"ref_id": "ref_id", "url": "url", "ip": "ip", "discount": "discount", "service": "service",
                  "person": "person"}  # fmt: skip
_UNCERTAIN_KINDS = frozenset({"datetime", "date", "time", "amount", "percent"})
_VALUE_KINDS = _UNCERTAIN_KINDS | {"discount", "number"}
# Clauses: sentence punctuation and newlines ("." only before whitespace: decimals and hosts keep theirs).
_CLAUSE_RE = re.compile(r"[^\n。！？；!?;]+?(?:[。！？；!?;]|\.(?=\s)|(?=\n)|$)")


@dataclass(frozen=True)
class KnownFact:
    """One known fact: its current value (if any), where it came from, what it is not."""

    key: str
    """The hash field: a label, a form label ("ord_id"), or "~<kind>" for an uncertain one."""
    value: str
    """The current value, verbatim; "" when the source only rejects values ("不是85折")."""
    kind: str
    quote: str
    """The source clause (clipped around the value)."""
    role: str = "user"
    negated: tuple[str, ...] = ()
    corrected_from: str = ""
    correction: bool = False
    """The source says it corrects something ("更正", "correction"): the key's previous value is
    looked up at append time (`with_previous`) when the source does not name it."""
    labelled: bool = False
    """The key comes from label words ("refund cap is"), not from the value's form: a stated
    constraint, shown before the ids and names a message merely mentions."""
    index: int = -1
    """The source message (from the store; -1 until stored)."""

    @property
    def uncertain(self) -> bool:
        return self.key.startswith(_UNCERTAIN)

    def encode(self) -> str:
        data: dict[str, object] = {"v": self.value, "k": self.kind, "q": self.quote, "r": self.role[:1]}
        if self.negated:
            data["n"] = list(self.negated)
        if self.corrected_from:
            data["f"] = self.corrected_from
        if self.correction:
            data["c"] = 1
        if self.labelled:
            data["l"] = 1
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


@functools.lru_cache(maxsize=16384)
def decode_entity(key: str, raw: str, index: int = -1) -> KnownFact:
    """The record stored under `key`; a plain value (written before issue 23) is a fact without
    provenance beyond its index."""
    if raw.startswith('{"v":'):
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        if isinstance(data, dict):
            return KnownFact(
                key=key,
                value=str(data.get("v", "")),
                kind=str(data.get("k", "")),
                quote=str(data.get("q", "")),
                role="assistant" if data.get("r") == "a" else "user",
                negated=tuple(str(v) for v in data.get("n", ())),
                corrected_from=str(data.get("f", "")),
                correction=bool(data.get("c")),
                labelled=bool(data.get("l")),
                index=index,
            )
    return KnownFact(key=key, value=raw, kind="", quote="", index=index)


def label_for(fact: Fact, text: str) -> str | None:
    """The key a fact's form gives it, "~<kind>" for values that need a label, None for plain numbers."""
    if fact.kind in _LABEL_BY_KIND:
        return _LABEL_BY_KIND[fact.kind]
    if fact.kind in _UNCERTAIN_KINDS:
        return _slot(fact.kind)
    if fact.kind not in ("id", "name"):
        return None
    prefixed = _PREFIXED_ID.fullmatch(fact.text)
    if prefixed:
        # ORD-2025-0001 -> ord_id, INC-4412 -> inc_id: the prefix says what kind of id it is.
        return f"{prefixed.group(1).lower()}_id"
    if _VERSION.fullmatch(fact.text):
        return "version"
    before = text[max(0, fact.start - 24) : fact.start]
    if _POD_NAME.fullmatch(fact.text) or _POD_HINT.search(before):
        return "pod"
    if ("." in fact.text and not fact.text[0].isdigit()) or _HOST_HINT.search(before):
        return "host"
    return "id"


def _quote(clause: str, fact: Fact) -> str:
    """The clause, whitespace collapsed, clipped around the fact when long (never cutting it)."""
    if len(clause) <= 2 * _QUOTE_CHARS:  # (a long clause is never collapsed whole: once per value)
        text = " ".join(clause.split())
        if len(text) <= _QUOTE_CHARS:
            return text
    start = max(0, min(fact.start - _QUOTE_CHARS // 2, len(clause) - _QUOTE_CHARS))
    end = max(start + _QUOTE_CHARS, fact.end)
    head = "…" if start else ""
    return head + " ".join(clause[start:end].split()) + ("…" if end < len(clause) else "")


@dataclass
class _Draft:
    key: str
    kind: str
    quote: str
    value: str = ""
    negated: list[str] = field(default_factory=list)
    corrected_from: str = ""
    correction: bool = False
    labelled: bool = False
    asked: bool = False


def _slot(kind: str) -> str:
    return _UNCERTAIN + ("date" if kind == "datetime" else kind)


def _key_of(fact: Fact, clause: str, label: str) -> str | None:
    if label and compatible(label, fact.kind):
        return label
    return label_for(fact, clause)


def _joined_key(
    fact: Fact, segment: Segment, previous: tuple[Fact, str, bool, bool] | None, drafts: dict[str, _Draft]
) -> str:
    """The key a value shares with the one before it ("300 USD, not 500 USD"), or ""."""
    if previous is None or not segment.joins:
        return ""
    prev_fact, prev_key, prev_negated, prev_replaced = previous
    if segment.joins == "neg" or (segment.joins == "but" and prev_negated) or (segment.joins == "to" and prev_replaced):
        return prev_key
    if segment.joins == "or":
        # "85折还是8折": neither is known; the first one stops being a current value.
        draft = drafts.get(prev_key)
        if draft is not None and draft.value == prev_fact.text and not prev_key.startswith(_UNCERTAIN):
            draft.value = ""
        return _slot(fact.kind)
    return ""


def _clause_facts(clause: str, correcting: bool, drafts: dict[str, _Draft]) -> None:
    """Reads one clause's values into `drafts` (one per key; a later value of a key wins)."""
    question = is_question(clause)
    changing = is_change(clause)
    # "Correction: ..." / "更正：..." opening the clause (or the message) corrects its labelled values;
    # a marker right before a value ("改为85折", "changed to 250 USD") corrects that value only.
    correcting = correcting or is_correction(clause[:_OPENING_CHARS])
    previous: tuple[Fact, str, bool, bool] | None = None  # fact, key, negated, replaced
    for fact in find_facts(clause):
        before = clause[previous[0].end if previous else 0 : fact.start]
        segment = read_segment(before)
        if segment.replaced and not changing:
            # "went from X", "Alice from billing-svc": X is a value like any other, not a replaced one.
            segment = Segment(segment.label)
        key = _joined_key(fact, segment, previous, drafts)
        negated, replaced = segment.negated, segment.replaced
        # A value joined to the one before ("not X but Y") is labelled as that one was.
        labelled = key in drafts and drafts[key].labelled
        if not key:
            label = segment.label if segment.joins in ("", "neg") else label_before(before)
            key = _key_of(fact, clause, label) or ""
            labelled = bool(label) and key == label
        if not key:
            previous = None  # a plain number: nothing to join to
            continue
        if question and fact.kind in _VALUE_KINDS and not negated:
            # Asked about, not stated: the question is quoted, and no value is current.
            asked = drafts.setdefault(_slot(fact.kind), _Draft(_slot(fact.kind), fact.kind, ""))
            asked.quote, asked.asked = _quote(clause, fact), True
            previous = (fact, asked.key, False, False)
            continue
        draft = drafts.get(key) or drafts.setdefault(
            key, _Draft(key, fact.kind, _quote(clause, fact), labelled=labelled)
        )
        if negated or replaced:
            if replaced:
                draft.corrected_from = fact.text
            elif fact.text not in draft.negated:
                draft.negated.append(fact.text)
            if draft.value == fact.text:
                draft.value = ""
        else:
            draft.value, draft.kind, draft.quote = fact.text, fact.kind, _quote(clause, fact)
            corrects = labelled and (correcting or is_correction(before))
            draft.correction = draft.correction or corrects or bool(draft.corrected_from)
            draft.labelled = draft.labelled or labelled
            if fact.text in draft.negated:
                draft.negated.remove(fact.text)
        previous = (fact, key, negated, replaced)


def extract_known(texts: Iterable[str], role: str = "user") -> list[KnownFact]:
    """The known facts `texts` (one message's content and tool-call arguments) state, one per key."""
    drafts: dict[str, _Draft] = {}
    for whole in texts:
        # What people state fits in a message; a megabyte of tool-call arguments is data, mined by
        # the summary, not read clause by clause on the event loop.
        text = whole[:_MINED_CHARS]
        opening = is_correction(text[:_OPENING_CHARS])
        for clause in _CLAUSE_RE.finditer(text):
            _clause_facts(clause.group(), opening, drafts)
    out = []
    for draft in drafts.values():
        if not draft.value and not draft.negated and not draft.corrected_from and not draft.asked:
            continue
        if draft.corrected_from == draft.value:
            draft.corrected_from = ""
        out.append(
            KnownFact(
                key=draft.key,
                value=draft.value,
                kind=draft.kind,
                quote=draft.quote,
                role=role,
                negated=tuple(v for v in draft.negated if v != draft.value),
                corrected_from=draft.corrected_from,
                correction=draft.correction and bool(draft.value),
                labelled=draft.labelled,
            )
        )
    return out


def extract_entities(texts: Iterable[str], role: str = "user") -> list[tuple[str, str]]:
    """(key, encoded record) pairs for the store, in text order (a later pair of a key wins)."""
    return [(fact.key, fact.encode()) for fact in extract_known(texts, role)]


def pending_corrections(pairs: Iterable[tuple[str, str]]) -> list[str]:
    """Keys whose record corrects an earlier value it does not name: their previous value is read."""
    keys = []
    for key, raw in pairs:
        fact = decode_entity(key, raw)
        if fact.correction and not fact.corrected_from and not fact.uncertain:
            keys.append(key)
    return keys


def with_previous(pairs: list[tuple[str, str]], previous: dict[str, str]) -> list[tuple[str, str]]:
    """`pairs` with "corrected from" filled from the keys' stored values (`previous`: key -> the
    stored record, as written by the store: {"v": record, "i": index} JSON)."""
    out = []
    for key, raw in pairs:
        record = raw
        stored = previous.get(key)
        if stored:
            try:
                before = decode_entity(key, str(json.loads(stored)["v"]))
            except (ValueError, KeyError, TypeError):
                before = None
            fact = decode_entity(key, raw)
            if before is not None and before.value and before.value != fact.value and not fact.corrected_from:
                record = replace(fact, corrected_from=before.value).encode()
        out.append((key, record))
    return out
