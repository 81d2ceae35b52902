"""Block budgets and the recent window (docs/design.md §4), as pure functions over index entries.

Priority: the system block (system prompt, goal, known facts) first, within `system_ratio` of the
budget and at most `reserve_system_prompt_tokens`; then the recent turns, newest first, their
user/assistant messages within `recent_ratio` and their tool results (observations) in what the
other blocks leave; the summary of older turns within `summary_ratio`; `reply_ratio` is held back
for the reply. The window is filled by tokens (issue 37); `keep_recent_messages` is a floor (the newest
messages kept while they fit), not a ceiling, and room the other blocks leave unused is lent to older
turns (`extend_window`).

A turn group is the unit of selection: an assistant message with tool calls and the tool results
answering them (and anything logged between them) are kept or left out together, so a tool result
is never separated from its call.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from context_svc.model import Budget, IndexEntry, Role

__all__ = ["MIN_BUDGET_TOKENS", "BlockBudgets", "Group", "Window", "extend_window", "group_entries", "select_window"]

MIN_BUDGET_TOKENS = 256
"""Below this a context cannot hold a system prompt and a turn; the request is refused."""


@dataclass(frozen=True)
class BlockBudgets:
    """Token budgets of the blocks for one total budget."""

    total: int
    system: int
    recent: int
    summary: int
    reply: int

    @classmethod
    def of(cls, total: int, budget: Budget) -> BlockBudgets:
        return cls(
            total=total,
            system=min(budget.reserve_system_prompt_tokens, math.floor(total * budget.system_ratio)),
            recent=math.floor(total * budget.recent_ratio),
            summary=math.floor(total * budget.summary_ratio),
            reply=math.floor(total * budget.reply_ratio),
        )


@dataclass(frozen=True, slots=True)
class Group:
    """A run of messages kept or dropped together (indexes inclusive)."""

    start: int
    end: int
    conversation_tokens: int
    """Tokens of user, assistant and system messages (the recent block)."""
    tool_tokens: int
    """Tokens of tool results (the observations block)."""

    @property
    def count(self) -> int:
        return self.end - self.start + 1

    @property
    def tokens(self) -> int:
        return self.conversation_tokens + self.tool_tokens


def group_entries(entries: Sequence[IndexEntry], base: int) -> list[Group]:
    """Groups of the messages `base`, `base + 1`, ... described by `entries`.

    A tool result joins the assistant message that made its call and everything between them. A
    result whose call is not among `entries` (already summarised, or never logged) stands alone.
    """
    owner: dict[str, int] = {}
    # reach[i]: the last position that must stay with position i's group.
    reach = list(range(len(entries)))
    for i, entry in enumerate(entries):
        for call_id in entry.call_ids:
            owner[call_id] = i
        if entry.tool_call_id:
            j = owner.get(entry.tool_call_id)
            if j is not None and reach[j] < i:
                reach[j] = i
    groups: list[Group] = []
    i, n = 0, len(entries)
    while i < n:
        end, k, conversation, tools = reach[i], i, 0, 0
        while k <= end:  # spans inside the span extend it
            entry = entries[k]
            end = max(end, reach[k])
            if entry.role is Role.TOOL:
                tools += entry.tokens
            else:
                conversation += entry.tokens
            k += 1
        groups.append(Group(base + i, base + end, conversation, tools))
        i = end + 1
    return groups


@dataclass(frozen=True)
class Window:
    """The recent window: groups[first:] are kept verbatim."""

    first: int
    """Position in the group list of the oldest group kept (len(groups) when none)."""
    clipped: bool
    """The newest group alone exceeds the budget and is kept with its content clipped."""


def select_window(groups: Sequence[Group], *, recent_budget: int, available: int, keep: int) -> Window:
    """Newest groups first while the recent block stays within `recent_budget` tokens and all kept
    messages within `available` (issue 37: tokens decide, not a message count); `keep` is a floor:
    the newest `keep` messages are kept while they fit in `available`, whatever the recent block's
    share."""
    conversation = total = count = 0
    first = len(groups)
    for position in range(len(groups) - 1, -1, -1):
        group = groups[position]
        if total + group.tokens > available:
            break
        if conversation + group.conversation_tokens > recent_budget and count >= keep:
            break
        conversation += group.conversation_tokens
        total += group.tokens
        count += group.count
        first = position
    if first == len(groups) and groups:
        return Window(len(groups) - 1, clipped=True)
    return Window(first, clipped=False)


def extend_window(groups: Sequence[Group], first: int, room: int) -> int:
    """The window's new first group when the groups before `first` take up to `room` more tokens
    (unused room of the other blocks is lent to older turns: a view under budget leaves none out)."""
    while first > 0 and groups[first - 1].tokens <= room:
        room -= groups[first - 1].tokens
        first -= 1
    return first
