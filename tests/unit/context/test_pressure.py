"""Priority under pressure (issue 23), on the test Redis without gRPC: unused budget is lent before
anything is cut, the user's lines outrank assistant narration, near-duplicates fold into one line,
a full context keeps the default ratios, and a later correction says what it corrects."""

from __future__ import annotations

import math
import re

from agentmesh.config import ContextSettings
from agentmesh.store import Store
from context_svc.budget import BlockBudgets
from context_svc.engine import ContextEngine
from context_svc.model import BlockKind, Caller, Message, Role

OPERATOR = Caller("oncall", is_operator=True)
CONSTRAINTS = [
    "The refund cap is 250 USD, not 400 USD.",
    "退款金额是两千五百元。",
    "The deadline is June first.",
    "折扣是85折，不是8折。",
    "Yesterday about three thousand two hundred requests failed.",
]


def narration(i: int) -> str:
    # Different wording each time: these cannot fold, only be cut.
    verbs = ["inspected", "restarted", "drained", "cordoned", "scaled", "patched", "probed", "tailed"]
    return (
        f"I {verbs[i % 8]} pod checkout-{i:04d}-abcde on node-{i % 5} and saw {i * 7} errors in {i % 50} s window {i}."
    )


async def _session(engine: ContextEngine, sid: str, messages: list[tuple[Role, str]], prompt: str = "") -> None:
    await engine.create_session(
        OPERATOR, session_id=sid, goal="settle the refund for ORD-2025-0042", system_prompt=prompt
    )
    for role, text in messages:
        await engine.append_message(OPERATOR, sid, Message(role, text))


async def test_unused_window_budget_is_lent_to_the_summary_before_lines_are_cut(store: Store) -> None:
    engine = ContextEngine(ContextSettings(keep_recent_messages=4, summary_trigger_tokens=100_000), store)
    messages = [(Role.USER, c) for c in CONSTRAINTS] + [(Role.ASSISTANT, narration(i)) for i in range(40)]
    await _session(engine, "s1", messages)
    view = await engine.build_context(OPERATOR, "s1", budget_tokens=1500)
    blocks = {b.kind: b for b in view.blocks}
    # The summary gets its share (225 tokens) and what the window and the system block leave.
    assert blocks[BlockKind.SUMMARY].budget_tokens > 225 < blocks[BlockKind.SUMMARY].tokens
    assert 1500 * 0.9 <= view.total_tokens <= 1500 - 75
    summary = view.messages[1].content
    for fact in ("250 USD", "400 USD", "两千五百元", "June first", "85折", "three thousand two hundred"):
        assert fact in summary


async def test_the_users_lines_outrank_assistant_narration(store: Store) -> None:
    engine = ContextEngine(ContextSettings(keep_recent_messages=4, summary_trigger_tokens=100_000), store)
    # The constraints come first (oldest), then a long run of narration: newest-first would keep only narration.
    messages = [(Role.USER, c) for c in CONSTRAINTS] + [(Role.ASSISTANT, narration(i)) for i in range(120)]
    await _session(engine, "s1", messages)
    view = await engine.build_context(OPERATOR, "s1", budget_tokens=3000)
    summary = view.messages[1].content
    assert "not shown here" in summary  # under pressure: narration was cut...
    for constraint in CONSTRAINTS:  # ...the user's lines were not
        assert constraint in summary
    assert "- assistant" in summary  # and the rest of the room still goes to narration


async def test_near_duplicate_lines_fold_into_one_listing_the_varying_parts(store: Store) -> None:
    engine = ContextEngine(ContextSettings(keep_recent_messages=4, summary_trigger_tokens=100_000), store)
    same = [f"Checked pod checkout-{i:04d}-abcde: restarted {i + 3} times, memory {256 + i}Mi." for i in range(300)]
    await _session(engine, "s1", [(Role.ASSISTANT, text) for text in same])
    view = await engine.build_context(OPERATOR, "s1", budget_tokens=8000)
    summary = view.messages[1].content
    folded = [line for line in summary.splitlines() if line.startswith("- assistant")]
    assert len(folded) == 1, summary
    match = re.match(r'- assistant ×(\d+): "Checked pod \{\}: restarted \{\} times, memory \{\}\." with ', folded[0])
    assert match is not None and int(match.group(1)) > 50, folded[0][:200]
    rows = re.findall(r"\(checkout-(\d{4})-abcde, (\d+), (\d+)Mi\)", folded[0])
    assert len(rows) == int(match.group(1))  # one row per message, its facts verbatim and together
    assert all(int(n) + 3 == int(restarts) and int(n) + 256 == int(mem) for n, restarts, mem in rows)


async def test_a_full_context_keeps_the_default_ratios(store: Store) -> None:
    settings = ContextSettings(keep_recent_messages=1, summary_trigger_tokens=100_000)
    engine = ContextEngine(settings, store)
    long = "lorem ipsum dolor sit amet, " * 12
    messages = []
    for i in range(200):
        messages.append(
            (
                Role.USER,
                f"The order amount of order {i} is {100 + i} USD; the deadline {i} is June {i % 28 + 1}. {long}",
            )
        )
        messages.append((Role.ASSISTANT, f"{narration(i)} {long}"))
    await _session(engine, "s1", messages, prompt="Follow the runbook. " * 2000)  # over its share: full
    total = 12000
    view = await engine.build_context(OPERATOR, "s1", budget_tokens=total)
    plan = BlockBudgets.of(total, (await engine.get_session(OPERATOR, "s1"))[0].budget)
    blocks = {b.kind: b for b in view.blocks}
    biggest = max(m.token_count for m in view.messages[2:])
    assert blocks[BlockKind.SYSTEM].budget_tokens == plan.system >= blocks[BlockKind.SYSTEM].tokens > plan.system - 8
    assert blocks[BlockKind.RECENT].budget_tokens == plan.recent == math.floor(total * 0.65)
    assert plan.recent - biggest < blocks[BlockKind.RECENT].tokens <= plan.recent
    # The summary gets its share, plus what no ratio assigns (2.5 %, for tool results; there are
    # none here) and the window's last partial message: nothing is taken from a full block.
    unassigned = total - plan.system - plan.recent - plan.summary - plan.reply
    assert plan.summary <= blocks[BlockKind.SUMMARY].budget_tokens < plan.summary + unassigned + biggest
    assert view.total_tokens <= total - plan.reply


async def test_a_later_correction_says_what_it_corrects(store: Store) -> None:
    engine = ContextEngine(ContextSettings(), store)
    await _session(
        engine,
        "s1",
        [
            (Role.USER, "订单ORD-2025-0001的折扣是8折，退款上限是300元而不是500元。"),
            (Role.ASSISTANT, "好的，我来核对。"),
            (Role.USER, "更正：折扣改为85折。"),
        ],
    )
    view = await engine.build_context(OPERATOR, "s1")
    system = view.messages[0].content
    assert "- discount: 85折 (corrected from 8折) [#2" in system
    assert "- refund cap: 300元 (not 500元) [#0" in system
    _, entities = await engine.get_session(OPERATOR, "s1")
    assert entities["discount"] == "85折" and entities["refund cap"] == "300元"
    assert "500元" not in entities.values() and "8折" not in entities.values()
