"""Issue 37's build: the budget is filled before anything is summarised (a view under budget with turns
left out is a bug), and the older turns the newest user message needs are shown verbatim with a
neighbour and their position, inside the summary block."""

from __future__ import annotations

import pytest

from agentmesh.config import ContextSettings
from agentmesh.store import Store
from context_svc.engine import ContextEngine
from context_svc.model import BlockKind, Caller, Message, Role, ToolCall, ToolOutcome
from context_svc.recall import RECALL_HEADER

OPERATOR = Caller("oncall", is_operator=True)
TOPICS = ["pottery", "camping", "running", "painting", "adoption", "guitar", "hiking", "baking", "chess", "swimming"]


def chatter(i: int) -> tuple[Role, str]:
    role = Role.USER if i % 2 == 0 else Role.ASSISTANT
    topic = TOPICS[i % len(TOPICS)]
    return role, f"Turn {i}: I spent some time on {topic} again this week, it was relaxing and fun {'!' * (i % 3)}"


async def _session(engine: ContextEngine, lines: list[tuple[Role, str]], sid: str = "s1") -> None:
    await engine.create_session(OPERATOR, session_id=sid, goal="keep the conversation going")
    for role, text in lines:
        await engine.append_message(OPERATOR, sid, Message(role, text))


@pytest.mark.parametrize("turns", [30, 120, 400])
@pytest.mark.parametrize("budget", [600, 1500, 4000, 8000])
async def test_a_view_that_leaves_turns_out_uses_its_budget(store: Store, turns: int, budget: int) -> None:
    engine = ContextEngine(ContextSettings(), store)
    sid = f"s-{turns}-{budget}"
    await _session(engine, [chatter(i) for i in range(turns)] + [(Role.USER, "What did I do on Sunday?")], sid)
    view = await engine.build_context(OPERATOR, sid, budget_tokens=budget)
    assert view.total_tokens <= budget
    verbatim = [m.index for m in view.messages if m.role is not Role.SYSTEM]
    if view.summarized_messages + view.dropped_messages > 0:
        assert view.total_tokens >= 0.9 * budget, (turns, budget, view.total_tokens)
    else:
        assert verbatim == list(range(turns + 1))  # nothing left out: every turn verbatim, in order


async def test_the_window_holds_tool_results_with_their_calls_past_keep_recent_messages(store: Store) -> None:
    engine = ContextEngine(ContextSettings(keep_recent_messages=2), store)
    await engine.create_session(OPERATOR, session_id="s1", goal="g")
    for i in range(8):
        await engine.append_message(OPERATOR, "s1", Message(Role.USER, f"check pod {i}"))
        call = ToolCall(f"c{i}", "kubectl_get", f'{{"pod": "{i}"}}')
        await engine.append_message(OPERATOR, "s1", Message(Role.ASSISTANT, tool_calls=(call,)))
        await engine.append_tool_result(OPERATOR, "s1", ToolOutcome(f"c{i}", "kubectl_get", inline=f"pod {i} ok"))
    view = await engine.build_context(OPERATOR, "s1", budget_tokens=4000)
    assert view.summarized_messages == 0 and len(view.messages) == 1 + 24  # all 24 messages, not 2
    calls = {c.id for m in view.messages for c in m.tool_calls}
    assert {m.tool_call_id for m in view.messages if m.role is Role.TOOL} <= calls


async def test_an_old_turn_the_newest_message_asks_about_is_recalled_verbatim(store: Store) -> None:
    engine = ContextEngine(ContextSettings(), store)
    needle = "My sister adopted a golden retriever puppy named Biscuit last spring."
    lines = [chatter(i) for i in range(300)]
    lines.insert(40, (Role.USER, needle))
    lines.insert(41, (Role.ASSISTANT, "That is lovely news, congratulations to her!"))
    lines.append((Role.USER, "What was the name of the puppy my sister adopted?"))
    await _session(engine, lines)
    for budget in (1000, 2000, 4000):
        view = await engine.build_context(OPERATOR, "s1", budget_tokens=budget)
        summary = next(b for b in view.blocks if b.kind is BlockKind.SUMMARY)
        assert summary.tokens <= summary.budget_tokens
        text = view.messages[1].content
        assert RECALL_HEADER in text, budget
        recalled = text.split(RECALL_HEADER, 1)[1]
        assert f"[#40 user] {needle}" in recalled  # verbatim, with its position
        assert "[#41 assistant] That is lovely news" in recalled or "[#39 " in recalled  # and a neighbour


async def test_recall_never_repeats_the_window_and_needs_a_query(store: Store) -> None:
    engine = ContextEngine(ContextSettings(), store)
    await _session(engine, [chatter(i) for i in range(200)] + [(Role.USER, "pottery pottery pottery")])
    view = await engine.build_context(OPERATOR, "s1", budget_tokens=1500)
    window = {m.index for m in view.messages if m.role is not Role.SYSTEM}
    text = view.messages[1].content
    assert RECALL_HEADER in text
    shown = [int(line.split()[0][2:]) for line in text.split(RECALL_HEADER, 1)[1].strip().splitlines()]
    assert shown and not set(shown) & window and max(shown) < min(window)
    # Nothing in common with the newest message: no recall block, the summary and older turns fill the room.
    await _session(engine, [chatter(i) for i in range(200)] + [(Role.USER, "zzz qqq")], "s2")
    view = await engine.build_context(OPERATOR, "s2", budget_tokens=1500)
    assert RECALL_HEADER not in view.messages[1].content
    assert view.total_tokens >= 0.9 * 1500
