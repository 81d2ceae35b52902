"""Wider fact detection (issue 23): numbers, money, dates and times in words, percentages, discounts,
service and people's names; verbatim in text, one normal form per value for comparisons. Before
the issue none of these was a fact, or each had only its own spelling."""

from __future__ import annotations

import pytest

from context_svc.facts.facts import Fact, fact_keys, find_facts, kept, missing_facts
from context_svc.facts.numbers import normalize


def found(text: str) -> list[tuple[str, str, str]]:
    return [(f.kind, f.text, f.norm) for f in find_facts(text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("refund three thousand dollars", [("amount", "three thousand dollars", "3000 USD")]),
        ("about forty-two requests", [("number", "forty-two", "42")]),
        ("fifteen percent off today", [("discount", "fifteen percent off", "15% off")]),
        ("error rate five percent", [("percent", "five percent", "5%")]),
        ("starts at five pm", [("time", "five pm", "17:00")]),
        ("due June first", [("date", "June first", "06-01")]),
        ("due the 1st of June 2025", [("date", "the 1st of June 2025", "2025-06-01")]),
        ("due June 21, 2025", [("date", "June 21, 2025", "2025-06-21")]),
        ("USD 300 or 3k USD or 300 dollars", [("amount", "USD 300", "300 USD"), ("amount", "3k USD", "3000 USD"),
                                              ("amount", "300 dollars", "300 USD")]),
        ("退款三千美元，百分之十五，下午三点半", [("amount", "三千美元", "3000 USD"), ("percent", "百分之十五", "15%"),
                                           ("time", "下午三点半", "15:30")]),
        ("打八五折或85折或8.5折", [("discount", "八五折", "15% off"), ("discount", "85折", "15% off"),
                                ("discount", "8.5折", "15% off")]),
        ("payment-svc calls checkout-api", [("service", "payment-svc", "payment-svc"),
                                            ("service", "checkout-api", "checkout-api")]),
        ("the owner is Alice; cc @bob.smith", [("person", "Alice", "Alice"), ("person", "@bob.smith", "@bob.smith")]),
        ("负责人张三。", [("person", "张三", "张三")]),
        ("从seven thousand dollars改为9850美元", [("amount", "seven thousand dollars", "7000 USD"),
                                                ("amount", "9850美元", "9850 USD")]),
    ],
)  # fmt: skip
def test_facts_in_words_and_names(text: str, expected: list[tuple[str, str, str]]) -> None:
    assert found(text) == expected


@pytest.mark.parametrize("text", ["one of them", "two options", "a well-known read-only follow-up", "一点点"])
def test_prose_stays_prose(text: str) -> None:
    assert found(text) == []


def test_one_value_many_spellings_share_a_normal_form() -> None:
    assert {normalize("amount", t) for t in ("三千元", "3000元", "¥3,000", "3,000 CNY", "3k RMB")} == {"3000 CNY"}
    assert {normalize("discount", t) for t in ("85折", "八五折", "8.5折", "15% off")} == {"15% off"}
    assert normalize("discount", "8折") == "20% off" and normalize("discount", "九五折") == "5% off"
    assert {normalize("date", t) for t in ("2025年6月1日", "二〇二五年六月一日", "June 1, 2025")} == {"2025-06-01"}
    assert {normalize("time", t) for t in ("5 pm", "five pm", "下午五点", "17:00")} == {"17:00"}


def test_retention_is_checked_on_the_normal_form_but_summaries_stay_verbatim() -> None:
    fact = Fact("amount", "三千元", 0, 3)
    assert kept(fact, "refund 3000元 approved") and not kept(fact, "refund 300元 approved")
    assert "3000 CNY" in fact_keys(["refund ¥3,000"])
    # The LLM summary check stays verbatim: a model must copy 三千元 as written.
    assert missing_facts(["退款三千元"], "refund 3000元") == ["三千元"]
