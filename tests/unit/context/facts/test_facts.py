"""The fact extractor: what a summary must keep, Chinese forms included."""

from __future__ import annotations

import pytest

from context_svc.facts.facts import fact_strings, find_facts, missing_facts, occurs


def kinds(text: str) -> list[tuple[str, str]]:
    return [(f.kind, f.text) for f in find_facts(text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("折扣是85折不是8折", [("discount", "85折"), ("discount", "8折")]),
        ("八五折还是七五折，8.5折", [("discount", "八五折"), ("discount", "七五折"), ("discount", "8.5折")]),
        ("2025年6月1日生效，6月3日到账", [("date", "2025年6月1日"), ("date", "6月3日")]),
        ("二〇二五年六月一日", [("date", "二〇二五年六月一日")]),
        (
            "金额三千元，退款两千五百元，共一万二千",
            [("amount", "三千元"), ("amount", "两千五百元"), ("number", "一万二千")],
        ),
        (
            "¥3,000 or $12.50 or 3000元 or 3,000 USD",
            [("amount", "¥3,000"), ("amount", "$12.50"), ("amount", "3000元"), ("amount", "3,000 USD")],
        ),
        ("订单ORD-2025-0001已退款", [("id", "ORD-2025-0001")]),
        ("pod checkout-6d5f8b7c9-x2x4q restarted 12 times", [("id", "checkout-6d5f8b7c9-x2x4q"), ("number", "12")]),
        ("db-01.prod.internal at 10.0.3.12:5432", [("id", "db-01.prod.internal"), ("ip", "10.0.3.12:5432")]),
        ("payments.prod.svc is up", [("name", "payments.prod.svc")]),
        ("at 2025-06-01T10:00:00Z, 99.9% ok", [("datetime", "2025-06-01T10:00:00Z"), ("percent", "99.9%")]),
        ("see pl_" + "0f" * 32, [("ref_id", "pl_" + "0f" * 32)]),
        ("https://status.example.com/i/4412?x=1。", [("url", "https://status.example.com/i/4412?x=1")]),
        ("version v1.2.3 and 512Mi", [("id", "v1.2.3"), ("id", "512Mi")]),
    ],
)
def test_extracts_each_kind_whole(text: str, expected: list[tuple[str, str]]) -> None:
    assert kinds(text) == expected


# "api-gateway" was prose here before issue 23; a service name is a fact now (test_wider_facts.py),
# hyphenated prose is not.
@pytest.mark.parametrize(
    "text", ["一一对应", "a read-only follow-up is fine", "the quick brown fox", "统一处理", "e.g. this"]
)
def test_prose_has_no_facts(text: str) -> None:
    assert kinds(text) == []


def test_occurs_respects_word_edges() -> None:
    assert occurs("12", "restarted 12 times")
    assert not occurs("12", "restarted 120 times")
    assert occurs("12", "2025-12-01")  # separators are edges
    assert not occurs("8折", "85折")  # 85折 and 8折 never stand in for each other
    assert not occurs("5折", "85折")
    assert occurs("8折", "从8折改为85折")
    assert occurs("三千元", "退款三千元")


def test_missing_facts_lists_what_a_summary_dropped() -> None:
    sources = ["订单ORD-2025-0001的折扣是85折，金额¥3,000，2025年6月1日生效", "ref pl_" + "a" * 64]
    assert fact_strings(sources) == ["ORD-2025-0001", "85折", "¥3,000", "2025年6月1日", "pl_" + "a" * 64]
    faithful = "ORD-2025-0001: 85折, ¥3,000 from 2025年6月1日; payload pl_" + "a" * 64
    assert missing_facts(sources, faithful) == []
    assert missing_facts(sources, faithful.replace("85折", "a discount")) == ["85折"]
    assert missing_facts(sources, faithful.replace("¥3,000", "¥3000")) == ["¥3,000"]
