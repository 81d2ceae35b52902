"""Which summary lines a view shows under pressure, and near-duplicates folded into one (§4, issue 23).

A summary cut to its block used to keep the newest lines whoever wrote them, so a long run of
near-identical assistant narration pushed the user's own constraints out. Now the order is: the
user's lines that state values (amounts, dates, discounts, counts) or constraints and preferences in
plain words ("not", "must", "prefer"; newest first), the user's other
lines, the newest actions (up to a quarter of the room), tool calls and results, then the
assistant's narration, then older actions. Lines that differ only in their facts
("Order ORD-1: ¥1,000 charged ..." / "Order ORD-2: ¥2,500 charged ...") are shown once, with the
varying parts listed in order, so every fact stays verbatim at a fraction of the tokens:

    assistant ×2: "Order {}: {} charged ..." with (ORD-1, ¥1,000); (ORD-2, ¥2,500)

Work is proportional to the lines shown (a long session's summary has thousands), not to all.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from context_svc.facts.facts import find_facts

__all__ = ["Choice", "choose_lines", "render_group", "skeleton", "states_value"]

_USER, _USER_REFS, _TOOLS, _ASSISTANT = 0, 1, 2, 3
# What a user states (an amount, a date, a discount, a count) before what a user only points at (an
# order id, a pod): the Known-facts lines hold the latest ids anyway.
_VALUE_KINDS = frozenset({"amount", "discount", "percent", "date", "datetime", "time", "number", "person", "service"})


# A user's plain-word constraint, preference or decision ("on the Pro plan, not Enterprise", "we must
# not restart prod", "I prefer email") counts as a value (issue 37).
_CONSTRAINT = re.compile(
    r"(?i)\b(?:not|never|must|mustn't|don't|do\s+not|cannot|can't|only|always|prefer(?:s|red)?|"
    r"decided|decision|plan|require[sd]?|need(?:s|ed)?\s+to|should(?:n't)?|avoid|instead)\b|"
    r"不是|不要|必须|只能|不能|别|希望|偏好|决定|需要|要求|而是|禁止"
)


@functools.lru_cache(maxsize=32768)
def _tier(line: str) -> int:
    if line.startswith("user: "):
        body = line[6:]
        stated = any(f.kind in _VALUE_KINDS for f in find_facts(body)) or _CONSTRAINT.search(body) is not None
        return _USER if stated else _USER_REFS
    if line.startswith("assistant: "):
        return _ASSISTANT
    return _TOOLS  # calls, tool results, an LLM summary's lines


def states_value(user_line: str) -> bool:
    """Whether a user's line states a value or a constraint (the lines a summary keeps first; also
    the user constraints a hop summary adds verbatim, handoff.py)."""
    return _tier("user: " + user_line) == _USER


@functools.lru_cache(maxsize=32768)
def skeleton(line: str) -> tuple[str, str, tuple[str, ...]]:
    """(who, the text with each fact replaced by {}, the facts in order) of a key-data line."""
    who, sep, body = line.partition(": ")
    if not sep:
        who, body = "", line
    parts: list[str] = []
    pieces: list[str] = []
    last = 0
    for fact in find_facts(body):
        pieces.append(body[last : fact.start].replace("{", "(").replace("}", ")"))
        pieces.append("{}")
        parts.append(fact.text)
        last = fact.end
    pieces.append(body[last:].replace("{", "(").replace("}", ")"))
    return who, "".join(pieces), tuple(parts)


def render_group(lines: Sequence[str]) -> str:
    """One line for near-duplicate `lines` (in log order): the shared wording once, then the parts."""
    if len(lines) == 1:
        return lines[0]
    who, template, _ = skeleton(lines[0])
    rows = "; ".join("(" + ", ".join(skeleton(line)[2]) + ")" for line in lines)
    return f'{who} ×{len(lines)}: "{template}" with {rows}'


@dataclass
class Choice:
    """The lines a view shows: key-data groups (indexes into key_data) and action indexes."""

    groups: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    actions: set[int] = field(default_factory=set)

    @property
    def keys(self) -> set[int]:
        return {i for members in self.groups.values() for i in members}

    def key_lines(self, key_data: Sequence[str]) -> list[str]:
        """The shown key data in log order (a group where its newest member is)."""
        ordered = sorted(self.groups.values(), key=max)
        return [render_group([key_data[i] for i in sorted(members)]) for members in ordered]


def _row_cost(line: str, cost: Callable[[str], int]) -> int:
    return cost("(" + ", ".join(skeleton(line)[2]) + ");") + 1


def _group_key(line: str, index: int) -> tuple[str, str]:
    who, template, parts = skeleton(line)
    # A line without facts has nothing to list: it is its own group.
    return (who, template) if parts else (who, f"\0{index}")


def choose_lines(
    key_data: Sequence[str],
    actions: Sequence[str],
    room: float,
    cost: Callable[[str], int],
    *,
    user_room: float | None = None,
) -> tuple[Choice, list[tuple[str, int]]]:
    """The lines that fit `room` tokens by the order of the module docstring, near-duplicates
    folded; the user's lines that state values or constraints may use up to `user_room` (issue 37:
    they come before recalled turns, the other lines after). Also returns the order they were taken
    in ((kind, index): "k" key data, "a" action), so
    a caller that must trim drops the least important first."""
    choice = Choice()
    taken: list[tuple[str, int]] = []
    group_cost: dict[tuple[str, str], int] = {}
    spent = 0.0

    def take_key(index: int, limit: float) -> bool:
        nonlocal spent
        line = key_data[index]
        key = _group_key(line, index)
        members = choice.groups.get(key)
        # Costs add up piece by piece (each piece's count is cached by its text; counting every
        # rendering whole would encode thousands of long strings); a piece boundary may be off by
        # a token, which the row's "+ 1" covers and the caller's final count settles.
        if members is None:
            extra = cost(line)
        elif len(members) == 1:
            who, template, _ = skeleton(line)
            folded = cost(f'{who} ×00: "{template}" with') + _row_cost(key_data[members[0]], cost)
            extra = folded + _row_cost(line, cost) - group_cost[key]
        else:
            extra = _row_cost(line, cost)
        if spent + extra > limit:
            return False
        spent += extra
        group_cost[key] = group_cost.get(key, 0) + extra
        choice.groups.setdefault(key, []).append(index)
        taken.append(("k", index))
        return True

    def take_action(index: int, limit: float) -> bool:
        nonlocal spent
        extra = cost(actions[index])
        if spent + extra > limit:
            return False
        spent += extra
        choice.actions.add(index)
        taken.append(("a", index))
        return True

    newest_first = range(len(key_data) - 1, -1, -1)
    tiers = (_USER, _USER_REFS, _TOOLS, _ASSISTANT)
    by_tier: dict[int, list[int]] = {tier: [] for tier in tiers}
    for i in newest_first:
        by_tier[_tier(key_data[i])].append(i)
    # A user line that does not fit does not stop the others: a shorter older one may.
    for tier in (_USER, _USER_REFS):
        misses = 0
        limit = max(room, user_room) if tier == _USER and user_room is not None else room
        for i in by_tier[tier]:
            if not take_key(i, limit):
                misses += 1
                if misses > 8:
                    break
    next_action = len(actions) - 1
    action_limit = min(room, spent + room / 4)
    while next_action >= 0 and take_action(next_action, action_limit):
        next_action -= 1
    for tier in (_TOOLS, _ASSISTANT):
        for i in by_tier[tier]:
            if not take_key(i, room):
                break
    while next_action >= 0 and take_action(next_action, room):
        next_action -= 1
    return choice, taken
