"""Facts a summary must keep: numbers, dates, identifiers and ref_ids, Chinese forms included.

One regular expression finds them; its alternatives are ordered most specific first, so at any
position a date beats the number it starts with ("2025年6月1日" is one fact, not three numbers), a
discount beats its digits ("85折" vs "8折" stay distinct), an identifier is kept whole
("ORD-2025-0001"), and a ref id is one fact. The same extractor builds the extractive summary and
checks an LLM summary, so "faithful" means one thing: every fact string of the source occurs,
verbatim, in the summary text.

Wider forms (issue 23): English numbers, amounts, percentages and discounts in words ("three thousand
dollars", "fifteen percent off"; numbers.py), dates and times in words ("June first", "the 1st of June",
"5 pm", "下午三点"), money with a currency word or code ("300 USD", "USD 300", "三千美元"), "百分之十五",
service names without digits ("payment-svc", "checkout-api"), @handles and people named after a role
("owner Alice", "负责人张三"). Each fact has a normal form (`Fact.norm`, numbers.py) for comparisons and
retention checks; the text is always the verbatim source.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from context_svc.facts.numbers import EN_DAY, MONTHS, normalize, word_number_spans

__all__ = ["Fact", "fact_keys", "fact_strings", "find_facts", "kept", "missing_facts", "occurs"]

_CN_DIGITS = "〇零一二两三四五六七八九"
_CN_NUMERAL = _CN_DIGITS + "十百千万亿"
_CN_MAGNITUDE = frozenset("十百千万亿")
_CN_DAY = rf"(?:\d{{1,2}}|[{_CN_DIGITS}十]{{1,3}})"
_CN_HOUR = rf"(?:\d{{1,2}}|[{_CN_DIGITS}十]{{1,3}})"
_MONTH = "(?:" + "|".join([*MONTHS, *(m[:3] + r"\.?" for m in MONTHS if m != "May"), r"Sept\.?"]) + ")"
# Word edges for ASCII words only: \b fails between an ASCII letter and a CJK one ("dollars改为").
_S, _E = r"(?<![A-Za-z0-9])", r"(?![A-Za-z0-9])"
_CURRENCY_WORD = rf"(?:dollars?|bucks|euros?|pounds?|yuan|(?-i:USD|CNY|RMB|EUR|GBP|JPY|HKD)){_E}"
_SERVICE_SUFFIXES = frozenset(
    ["svc", "service", "api", "server", "srv", "db", "worker", "proxy", "gateway", "queue", "cache", "web", "app",
     "backend", "frontend", "job", "cron", "consumer", "producer", "broker", "mq", "redis", "mysql", "postgres", "pg",
     "kafka", "nginx", "ingress", "lb", "cluster", "daemon", "agent", "scheduler"]
)  # fmt: skip
_PERSON_CUE = re.compile(
    rf"{_S}(?:owner|assignee|on-?call|contact|approver|reporter|requester|engineer|manager|lead){_E}"
    r"|负责人|联系人|审批人|值班人?|对接人"
)
_PERSON_AFTER = re.compile(
    rf"(?:{_S}(?:not|but|instead\s+of|rather\s+than|from|to|is|be)|不是|而是|而不是|改为|改成|从|是|为)\s*"
    r"([A-Z][a-z]+)(?![A-Za-z])"
)
_PERSON_REACH = 80
"""Names after a role word are looked for this far (a clause of role words stays linear)."""
_CLAUSE_END = re.compile(r"[\n。！？；!?;]|\.(?=\s|$)")
_NOT_NAMES = frozenset({"The", "This", "That", "It", "He", "She", "They", "We", "I", "You", "Not", "But", "And"})
_PERSON_RE = re.compile(
    rf"{_S}(?:owner|assignee|on-?call|contact|approver|reporter|requester|customer|engineer|manager|lead)"
    rf"(?:\s+(?:is|was|will\sbe|should\sbe)|\s*[:=])?\s+(?P<en>[A-Z][a-z]+(?:\s[A-Z][a-z]+)?){_E}"
    r"|(?:负责人|联系人|审批人|值班人?|对接人)(?:是|为|：|:)?\s*"
    r"(?:(?P<enc>[A-Z][a-z]+)(?![A-Za-z])|(?P<cn>[\u4e00-\u9fff]{2,3})(?=[，。,.;；！？!?\s]|$))"
)

# (kind, pattern); order matters: the first alternative that matches at a position wins.
_PATTERNS: Final[tuple[tuple[str, str], ...]] = (
    ("ref_id", r"pl_[0-9a-f]{64}"),
    ("url", r"https?://[^\s<>\"'`，。；、）)\]]+"),
    ("datetime", r"\d{4}-\d{1,2}-\d{1,2}(?:[T ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"),
    ("date", r"\d{4}/\d{1,2}/\d{1,2}"),
    ("date", rf"(?:\d{{2,4}}|[{_CN_DIGITS}]{{2,4}})年{_CN_DAY}月(?:{_CN_DAY}[日号])?"),
    ("date", rf"{_CN_DAY}月{_CN_DAY}[日号]"),
    ("date", rf"{_S}{_MONTH}\s+{EN_DAY}(?:,?\s+\d{{4}}{_E})?"),
    ("date", rf"{_S}(?:the\s+)?{EN_DAY}\s+(?:of\s+)?{_MONTH}{_E}(?:,?\s+\d{{4}}{_E})?"),
    ("ip", r"\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?(?:/\d{1,2})?"),
    ("time", rf"{_S}\d{{1,2}}(?::\d{{2}})?\s?(?:[aApP]\.[mM]\.|[aApP][mM]{_E})"),
    ("time", r"\d{1,2}:\d{2}(?::\d{2})?"),
    ("time", rf"{_S}(?:noon|midnight){_E}"),
    (
        "time",
        rf"(?:凌晨|早上|上午|中午|下午|晚上){_CN_HOUR}点(?:半|{_CN_HOUR}分?)?|\d{{1,2}}点(?:半|\d{{1,2}}分?)?"
        rf"|{_CN_HOUR}点(?:半|{_CN_HOUR}分|钟)",
    ),
    ("amount", r"[¥￥$€£] ?\d[\d,]*(?:\.\d+)?(?:[kKmM万亿]|千万)?"),
    ("amount", rf"{_S}(?-i:USD|CNY|RMB|EUR|GBP|HKD) ?\d[\d,]*(?:\.\d+)?(?:[kKmM]{_E})?"),
    ("discount", rf"(?:\d+(?:\.\d+)?|[{_CN_DIGITS}]{{1,2}})折"),
    ("discount", rf"\d+(?:\.\d+)? ?(?:[%％]|(?:percent|per cent){_E}) ?off{_E}"),
    ("percent", rf"\d+(?:\.\d+)? ?(?:[%％]|(?:percent|per cent){_E})"),
    ("percent", rf"百分之(?:\d+(?:\.\d+)?|[{_CN_NUMERAL}点]+)"),
    (
        "amount",
        r"\d[\d,]*(?:\.\d+)? ?(?:万|亿|千|[kKmM] ?)?(?:元|块|美元|欧元|英镑|日元|港币|人民币|" + _CURRENCY_WORD + ")",
    ),
    ("amount", rf"[{_CN_NUMERAL}]+(?:元|块|美元|欧元|英镑|日元|港币)"),
    ("person", r"(?<![\w.@])@[A-Za-z][A-Za-z0-9_.-]*[A-Za-z0-9]"),
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
    """ref_id, url, datetime, date, ip, time, amount, discount, percent, number, id, name, service, person."""
    text: str
    start: int
    end: int

    @property
    def norm(self) -> str:
        """The normal form (numbers.py): what other spellings of the same value share."""
        return normalize(self.kind, self.text)


def _classify_chain(text: str) -> str | None:
    if _HAS_DIGIT.search(text):
        return "number" if _ONLY_DIGITS.fullmatch(text) else "id"
    # No digit: a multi-part name (host, dotted service, hyphenated pod set) is an identifier;
    # plain words and "api-gateway"-like pairs are prose.
    separators = sum(text.count(sep) for sep in "-.:@/#")
    if separators >= 2 and _HAS_ALPHA.search(text) and ("." in text or "-" in text):
        return "name"
    # payment-svc, checkout-api: a service by its suffix ("read-only", "follow-up" stay prose).
    if "-" in text and text.rsplit("-", 1)[1].lower() in _SERVICE_SUFFIXES and text[0].isalpha():
        return "service"
    return None


def _regex_facts(text: str) -> Iterator[Fact]:
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


def _extra_facts(text: str) -> list[Fact]:
    """Facts the one regular expression cannot find: numbers in words, people named after a role."""
    out = [Fact(kind, text[start:end], start, end) for kind, start, end in word_number_spans(text)]
    for match in _PERSON_RE.finditer(text):
        name = next(g for g in ("en", "enc", "cn") if match.group(g))
        out.append(Fact("person", match.group(name), match.start(name), match.end(name)))
    for cue in _PERSON_CUE.finditer(text):
        # "the owner is not Bob but Alice", "负责人从Bob改为Alice": names after a marker, same clause.
        clause_end = _CLAUSE_END.search(text, cue.end(), cue.end() + _PERSON_REACH)
        stop = clause_end.start() if clause_end else min(len(text), cue.end() + _PERSON_REACH)
        for match in _PERSON_AFTER.finditer(text, cue.end(), stop):
            if match.group(1) not in _NOT_NAMES:
                out.append(Fact("person", match.group(1), match.start(1), match.end(1)))
    return out


def find_facts(text: str) -> Iterator[Fact]:
    """Every fact in `text`, left to right, non-overlapping (a longer fact wins an overlap)."""
    extra = _extra_facts(text)
    if not extra:
        yield from _regex_facts(text)
        return
    found = sorted([*_regex_facts(text), *extra], key=lambda f: (f.start, f.start - f.end))
    end = -1
    for fact in found:
        if fact.start >= end:
            yield fact
            end = fact.end


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


def fact_keys(texts: Iterable[str]) -> set[str]:
    """The normal forms of the facts of `texts` (numbers.py), with their verbatim texts."""
    keys: set[str] = set()
    for text in texts:
        for fact in find_facts(text):
            keys.add(fact.norm)
            keys.add(fact.text)
    return keys


def kept(fact: Fact, text: str, keys: set[str] | None = None) -> bool:
    """Whether `text` keeps `fact`: verbatim, or in another spelling of the same value ("三千元" is
    kept by "3000元"). `keys`: fact_keys([text]) when the caller checks many facts against one text."""
    if occurs(fact.text, text):
        return True
    return fact.norm in (keys if keys is not None else fact_keys([text]))


def missing_facts(source_texts: Iterable[str], summary_text: str) -> list[str]:
    """Facts of the source that do not occur verbatim in `summary_text` (empty: faithful)."""
    return [fact for fact in fact_strings(source_texts) if not occurs(fact, summary_text)]
