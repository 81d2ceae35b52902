"""Facts a summary must keep: numbers, dates, identifiers and ref_ids, Chinese forms included.

One regular expression finds them; its alternatives are ordered most specific first, so at any
position a date beats the number it starts with ("2025年6月1日" is one fact, not three numbers), a
discount beats its digits ("85折" vs "8折" stay distinct), an identifier is kept whole
("ORD-2025-0001"), and a ref id is one fact. The same extractor builds the extractive summary and
checks an LLM summary, so "faithful" means one thing: every fact string of the source occurs,
verbatim, in the summary text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final

__all__ = ["Fact", "fact_strings", "find_facts", "missing_facts", "occurs"]

_CN_DIGITS = "〇零一二两三四五六七八九"
_CN_NUMERAL = _CN_DIGITS + "十百千万亿"
_CN_MAGNITUDE = frozenset("十百千万亿")
_CN_DAY = rf"(?:\d{{1,2}}|[{_CN_DIGITS}十]{{1,3}})"

# (kind, pattern); order matters: the first alternative that matches at a position wins.
_PATTERNS: Final[tuple[tuple[str, str], ...]] = (
    ("ref_id", r"pl_[0-9a-f]{64}"),
    ("url", r"https?://[^\s<>\"'`，。；、）)\]]+"),
    ("datetime", r"\d{4}-\d{1,2}-\d{1,2}(?:[T ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"),
    ("date", r"\d{4}/\d{1,2}/\d{1,2}"),
    ("date", rf"(?:\d{{2,4}}|[{_CN_DIGITS}]{{2,4}})年{_CN_DAY}月(?:{_CN_DAY}[日号])?"),
    ("date", rf"{_CN_DAY}月{_CN_DAY}[日号]"),
    ("ip", r"\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?(?:/\d{1,2})?"),
    ("time", r"\d{1,2}:\d{2}(?::\d{2})?"),
    ("amount", r"[¥￥$€£] ?\d[\d,]*(?:\.\d+)?(?:[kKmM万亿]|千万)?"),
    ("discount", rf"(?:\d+(?:\.\d+)?|[{_CN_DIGITS}]{{1,2}})折"),
    ("percent", r"\d+(?:\.\d+)? ?[%％]"),
    ("amount", r"\d[\d,]*(?:\.\d+)? ?(?:万|亿|千)?(?:元|块|美元|人民币|(?-i:USD|CNY|RMB|EUR)\b)"),
    ("amount", rf"[{_CN_NUMERAL}]+(?:元|块)"),
    ("number", rf"[{_CN_NUMERAL}]{{2,}}"),
    ("number", r"\d{1,3}(?:,\d{3})+(?:\.\d+)?"),
    # A chain of ASCII words joined by - . _ : @ / #: an identifier if it has a digit (or is a
    # multi-part name such as db.prod.internal), a number if it is only digits. CJK letters are
    # not in the class, so "订单ORD-2025-0001已退款" yields the id alone.
    ("chain", r"[A-Za-z0-9_]+(?:[-.:@/#][A-Za-z0-9_]+)*"),
)

_FACT_RE = re.compile("|".join(f"(?P<k{i}>{pattern})" for i, (_, pattern) in enumerate(_PATTERNS)))
_KINDS = [kind for kind, _ in _PATTERNS]
_HAS_DIGIT = re.compile(r"\d")
_HAS_ALPHA = re.compile(r"[A-Za-z]")
_ONLY_DIGITS = re.compile(r"[\d.,]+")


@dataclass(frozen=True, slots=True)
class Fact:
    """One fact: its kind, its exact text and where it is in the source."""

    kind: str
    """ref_id, url, datetime, date, ip, time, amount, discount, percent, number, id, name."""
    text: str
    start: int
    end: int


def _classify_chain(text: str) -> str | None:
    if _HAS_DIGIT.search(text):
        return "number" if _ONLY_DIGITS.fullmatch(text) else "id"
    # No digit: a multi-part name (host, dotted service, hyphenated pod set) is an identifier;
    # plain words and "api-gateway"-like pairs are prose.
    separators = sum(text.count(sep) for sep in "-.:@/#")
    if separators >= 2 and _HAS_ALPHA.search(text) and ("." in text or "-" in text):
        return "name"
    return None


def find_facts(text: str) -> Iterator[Fact]:
    """Every fact in `text`, left to right, non-overlapping."""
    for match in _FACT_RE.finditer(text):
        group = match.lastgroup
        if group is None:  # pragma: no cover - every alternative is a named group
            continue
        kind = _KINDS[int(group[1:])]
        value = match.group()
        if kind == "chain":
            classified = _classify_chain(value)
            if classified is None:
                continue
            kind = classified
        elif kind == "number" and not (_CN_MAGNITUDE & set(value)):
            # "一一对应" is prose; a Chinese numeral needs a magnitude (三千, 十五) to be a number.
            continue
        yield Fact(kind, value, match.start(), match.end())


def fact_strings(texts: Iterable[str]) -> list[str]:
    """The distinct fact strings of `texts`, in order of first appearance."""
    seen: dict[str, None] = {}
    for text in texts:
        for fact in find_facts(text):
            seen.setdefault(fact.text, None)
    return list(seen)


def occurs(fact: str, text: str) -> bool:
    """Whether `fact` occurs in `text` as a whole (not as part of a longer ASCII word or number:
    "12" does not occur in "120", "8折" does not occur in "85折")."""
    start = text.find(fact)
    while start != -1:
        end = start + len(fact)
        before = text[start - 1] if start else ""
        after = text[end] if end < len(text) else ""
        if not (_edge_joins(before, fact[0]) or _edge_joins(fact[-1], after)):
            return True
        start = text.find(fact, start + 1)
    return False


def _edge_joins(left: str, right: str) -> bool:
    # Two ASCII alphanumerics side by side would make one longer word or number.
    return bool(left) and bool(right) and left.isascii() and right.isascii() and left.isalnum() and right.isalnum()


def missing_facts(source_texts: Iterable[str], summary_text: str) -> list[str]:
    """Facts of the source that do not occur verbatim in `summary_text` (empty: faithful)."""
    return [fact for fact in fact_strings(source_texts) if not occurs(fact, summary_text)]
