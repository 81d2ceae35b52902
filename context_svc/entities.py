"""Entity state: labelled facts (ids, amounts, dates, hosts...) with their latest values.

Extracted from what the user and the assistant say (content and tool-call arguments) when a message
is appended; a later value of the same label replaces the earlier one ("updated as they change":
the discount that was 8折 and is now 85折 reads 85折). Tool outputs are not mined: their facts are in
the digests, the summaries and the payloads, and a list of 50 pods would only churn the labels.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from context_svc.facts import Fact, find_facts

__all__ = ["MAX_ENTITIES_SHOWN", "extract_entities", "label_for"]

MAX_ENTITIES_SHOWN = 24
"""Labels rendered into the system block, most recently updated first."""

_PREFIXED_ID = re.compile(r"([A-Z][A-Z0-9]{1,7})[-_]\S*\d")
_POD_HINT = re.compile(r"(?i)\bpods?\b|容器|实例")
_HOST_HINT = re.compile(r"(?i)\b(?:host|node|server|db|database)\b|主机|节点|服务器")
_VERSION = re.compile(r"[vV]?\d+(?:\.\d+)+(?:[-+][0-9A-Za-z.]+)?")
_POD_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*-[a-z0-9]{5,10}-[a-z0-9]{5}")
_LABEL_BY_KIND = {
    "ref_id": "ref_id",
    "url": "url",
    "datetime": "date",
    "date": "date",
    "time": "time",
    "ip": "ip",
    "amount": "amount",
    "discount": "discount",
    "percent": "percent",
}


def label_for(fact: Fact, text: str) -> str | None:
    """The entity label of a fact, or None for facts that are not entities (plain numbers)."""
    if fact.kind in _LABEL_BY_KIND:
        return _LABEL_BY_KIND[fact.kind]
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


def extract_entities(texts: Iterable[str]) -> list[tuple[str, str]]:
    """(label, value) pairs in text order; later pairs of a label override earlier ones."""
    pairs: list[tuple[str, str]] = []
    for text in texts:
        for fact in find_facts(text):
            label = label_for(fact, text)
            if label is not None:
                pairs.append((label, fact.text))
    # Only the last value of each label matters; keep the order of those last values.
    last = {label: value for label, value in pairs}
    return list(last.items())
