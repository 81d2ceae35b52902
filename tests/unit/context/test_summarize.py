"""Summarizers without gRPC: the extractive one keeps every fact; the LLM one is checked on text."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentmesh.errors import UnavailableError
from context_svc.facts.facts import fact_strings
from context_svc.model import Message, Role, ToolCall
from context_svc.summarize import (
    ExtractiveSummarizer,
    LLMSummarizer,
    SummaryRejectedError,
    check_faithful,
    message_notes,
    salient_clause,
    source_texts,
)

FACT_TOKENS = st.sampled_from(
    ["85折", "8折", "八五折", "2025年6月1日", "6月3日", "三千元", "¥3,000", "$12.50", "ORD-2025-0001",
     "checkout-6d5f8b7c9-x2x4q", "db-01.prod.internal", "10.0.3.12", "99.9%", "12", "3.5", "两千五百",
     "2025-06-01T10:00:00Z", "pl_" + "ab" * 32, "INC-4412", "v1.2.3", "https://x.io/a?b=1"]
)  # fmt: skip
WORDS = st.sampled_from(["the", "order", "订单", "退款", "pod", "restarted", "，", "。", "?", "\n", " ", "is", "金额"])


def messages_from(texts: list[tuple[int, str]]) -> list[Message]:
    roles = [Role.USER, Role.ASSISTANT, Role.TOOL]
    out = []
    for i, (kind, text) in enumerate(texts):
        role = roles[kind % 3]
        if role is Role.TOOL:
            out.append(Message(role, text, tool_call_id=f"c{i}", name="probe", index=i))
        elif kind == 4:
            args = json.dumps({"q": text})
            out.append(Message(Role.ASSISTANT, "", tool_calls=(ToolCall(f"c{i}", "probe", args),), index=i))
        else:
            out.append(Message(role, text, index=i))
    return out


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 4), st.lists(st.one_of(FACT_TOKENS, WORDS), min_size=1, max_size=40).map(" ".join)),
        min_size=1,
        max_size=12,
    ),
    st.integers(1, 11),
)
def test_extractive_summary_keeps_every_fact_also_when_rolling(texts: list[tuple[int, str]], split: int) -> None:
    messages = messages_from(texts)
    summarizer = ExtractiveSummarizer()
    split = min(split, len(messages))
    first = summarizer.summarize(None, [message_notes(m) for m in messages[:split]])
    rolled = summarizer.summarize(first, [message_notes(m) for m in messages[split:]])
    sources = [text for m in messages for text in source_texts(m)]
    assert check_faithful(sources, rolled) == []
    assert rolled.first_index == 0 and rolled.last_index == len(messages) - 1


def test_structured_fields() -> None:
    messages = [
        Message(Role.USER, "订单ORD-2025-0001的折扣是85折还是8折？", index=0),
        Message(Role.ASSISTANT, "", tool_calls=(ToolCall("c1", "query_orders", '{"id": "ORD-2025-0001"}'),), index=1),
        Message(
            Role.TOOL,
            "[tool query_orders failed: UPSTREAM_TIMEOUT]",
            tool_call_id="c1",
            name="query_orders",
            error_code="UPSTREAM_TIMEOUT",
            fallback_tool="orders_cache",
            index=2,
        ),
        Message(Role.USER, "Also check pod checkout-6d5f8b7c9-x2x4q?", index=3),
    ]
    summary = ExtractiveSummarizer().summarize(None, [message_notes(m) for m in messages])
    assert summary.user_intent.startswith("订单ORD-2025-0001的折扣是85折还是8折？")
    assert summary.actions_taken == ("query_orders(id=ORD-2025-0001) -> error UPSTREAM_TIMEOUT",)
    assert [item.kind for item in summary.open_items] == ["question", "tool_error", "question"]
    assert "tool query_orders failed (message 2): UPSTREAM_TIMEOUT" in summary.open_questions
    # A later success of the fallback tool resolves the error; an assistant answer the questions.
    later = [
        Message(Role.TOOL, "[tool orders_cache ok]\n85折", tool_call_id="c9", name="orders_cache", index=4),
        Message(Role.ASSISTANT, "It is 85折.", index=5),
    ]
    rolled = ExtractiveSummarizer().summarize(summary, [message_notes(m) for m in later])
    assert rolled.open_items == ()
    assert rolled.actions_taken[-1] == "orders_cache result (c9) -> ok"
    rendered = rolled.render()
    for part in ("User intent:", "Key data:", "Open questions:\n- none", "Actions taken:"):
        assert part in rendered


def test_long_clauses_are_cut_around_facts_without_cutting_a_fact() -> None:
    filler = "lorem ipsum " * 40
    text = f"{filler} the refund was ¥3,000 {filler} approved on 2025年6月1日 {filler}"
    summary = ExtractiveSummarizer().summarize(None, [message_notes(Message(Role.USER, text, index=0))])
    line = summary.key_data[0]
    assert "¥3,000" in line and "2025年6月1日" in line and " … " in line
    assert len(line) < len(text) / 2


class FakeModel:
    def __init__(self, reply: str | Exception) -> None:
        self.reply = reply
        self.calls: list[dict[str, object]] = []

    async def complete(self, *, model: str, system: str, user: str, agent_id: str, timeout_s: float) -> str:
        self.calls.append({"model": model, "user": user, "agent_id": agent_id})
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply


MESSAGES = [
    Message(Role.USER, "订单ORD-2025-0001改成85折，三千元，2025年6月1日生效", index=0),
    Message(Role.ASSISTANT, "已改为85折。", index=1),
]


async def test_llm_summary_accepted_when_faithful() -> None:
    reply = json.dumps({"user_intent": "改折扣", "key_data": ["ORD-2025-0001: 85折, 三千元, 2025年6月1日"],
                        "open_questions": [], "actions_taken": ["updated"]}, ensure_ascii=False)  # fmt: skip
    model = FakeModel(reply)
    summary = await LLMSummarizer(model, "m").summarize(None, MESSAGES, agent_id="a")
    assert summary.summarizer == "llm" and summary.key_data == ("ORD-2025-0001: 85折, 三千元, 2025年6月1日",)
    assert model.calls[0]["agent_id"] == "a" and "[0] user: 订单ORD-2025-0001" in str(model.calls[0]["user"])


@pytest.mark.parametrize(
    ("key_data", "missing"),
    [
        (["ORD-2025-0001: 一个折扣, 三千元, 2025年6月1日"], ["85折"]),  # the seed-001 failure
        (["ORD-2025-0001: 8折, 三千元, 2025年6月1日"], ["85折"]),
        (["ORD-2025-0001: 85折, 3000元, 6月1日"], ["三千元", "2025年6月1日"]),
        (["order 1: 85折, 三千元, 2025年6月1日"], ["ORD-2025-0001"]),
    ],
)
async def test_llm_summary_that_drops_a_fact_is_rejected(key_data: list[str], missing: list[str]) -> None:
    reply = json.dumps({"user_intent": "x", "key_data": key_data}, ensure_ascii=False)
    with pytest.raises(SummaryRejectedError) as info:
        await LLMSummarizer(FakeModel(reply), "m").summarize(None, MESSAGES)
    assert info.value.missing == missing


async def test_llm_rolling_summary_must_keep_the_previous_facts() -> None:
    previous = ExtractiveSummarizer().summarize(None, [message_notes(m) for m in MESSAGES])
    new = [Message(Role.USER, "and ORD-2025-0002 at 9折?", index=2)]
    reply = json.dumps({"key_data": ["ORD-2025-0002: 9折"]})
    with pytest.raises(SummaryRejectedError) as info:
        await LLMSummarizer(FakeModel(reply), "m").summarize(previous, new)
    assert set(info.value.missing) == set(fact_strings(previous.key_data))


@pytest.mark.parametrize("reply", ["no json here", "[1, 2]", "{broken", ""])
async def test_llm_reply_that_is_not_a_summary_is_rejected(reply: str) -> None:
    with pytest.raises(SummaryRejectedError):
        await LLMSummarizer(FakeModel(reply), "m").summarize(None, MESSAGES)


async def test_llm_call_failure_propagates_for_the_caller_to_fall_back() -> None:
    with pytest.raises(UnavailableError):
        await LLMSummarizer(FakeModel(UnavailableError("down")), "m").summarize(None, MESSAGES)


@pytest.mark.parametrize(
    ("text", "intent"),
    [
        # Issue 37: LoCoMo's extractive summary was each session's opening "Hey Sam!".
        (
            "Hey Sam! How are you? I just adopted a puppy named Max last week.",
            "I just adopted a puppy named Max last week.",
        ),
        ("Hi Mel, long time no see! I'm moving to Berlin on 2023-06-01.", "I'm moving to Berlin on 2023-06-01."),
        ("你好！我想退款1250元。", "我想退款1250元。"),
        ("订单ORD-2025-5337的状态怎么样？", "订单ORD-2025-5337的状态怎么样？"),
        # A message of greetings and thanks only states no intent.
        ("Wow, great! Thanks!", ""),
        ("谢谢！", ""),
    ],
)
def test_the_intent_is_the_clause_that_says_the_most_never_a_greeting(text: str, intent: str) -> None:
    assert salient_clause(text) == intent


def test_greetings_do_not_push_the_real_intents_out_of_the_summary() -> None:
    texts = ["Please migrate the billing database to Postgres 16.", "Hey!", "Thanks!", "Great, cheers!", "Hello Sam"]
    notes = [message_notes(Message(Role.USER, text, index=i)) for i, text in enumerate(texts)]
    summary = ExtractiveSummarizer().summarize(None, notes)
    assert summary.intents == ("Please migrate the billing database to Postgres 16.",)
