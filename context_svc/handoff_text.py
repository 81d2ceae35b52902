"""The text of a hop summary (handoff.py): the user's constraints, and the layout capped at max_tokens.

Domain code only: no grpc, no stubs (docs/design.md §1).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from context_svc.facts.lines import states_value
from context_svc.tokens import TokenCounter

__all__ = [
    "DROP_ORDER",
    "HOP_HEADER",
    "Constraint",
    "Layout",
    "Section",
    "fit",
    "one_line",
    "user_constraints",
    "user_words",
]

_MAX_CONSTRAINTS = 20
_MAX_CONSTRAINT_CHARS = 500
_KEPT_QUESTIONS = 3
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Constraint:
    """A user line that states a value or a constraint, verbatim, with its message index."""

    text: str
    index: int


# -- user constraints ----------------------------------------------------------------------------

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])|(?<=[。！？；])")


HOP_HEADER = "Handoff from session "
"""How a hop summary begins: the first message of a session a handoff created, sent as a user message."""
_CARRIED = re.compile(r'^- \[#\d+\] "(.*)"$')


def user_words(messages: Sequence[tuple[int, str]]) -> list[tuple[int, str]]:
    """The user's own words in (index, content) user messages: a hop summary (the first message of a
    session a handoff created) stands for the constraints it carried, not for its own lines, so each hop
    of a chain passes the original user's words on instead of quoting the previous summary again."""
    words: list[tuple[int, str]] = []
    for index, content in messages:
        if content.startswith(HOP_HEADER):
            carried = [m.group(1) for line in content.splitlines() if (m := _CARRIED.match(line))]
            words.append((index, "\n".join(carried)))
        else:
            words.append((index, content))
    return words


def user_constraints(messages: Sequence[tuple[int, str]]) -> list[Constraint]:
    """The user's lines (sentences) that state values or constraints, verbatim, newest first, once each."""
    found: list[Constraint] = []
    seen: set[str] = set()
    for index, content in messages:
        pieces = [p.strip() for line in content.splitlines() for p in _SENTENCE_END.split(line)]
        for piece in reversed(pieces):  # newest first within a message too: its last sentence
            if not piece or len(piece) > _MAX_CONSTRAINT_CHARS or piece in seen or not states_value(piece):
                continue
            seen.add(piece)
            found.append(Constraint(piece, index))
            if len(found) >= _MAX_CONSTRAINTS:
                return found
    return found


# -- rendering under the cap ---------------------------------------------------------------------


def one_line(text: str) -> str:
    """Model-written text on one line: a newline in it cannot start a section of its own."""
    return _SPACE.sub(" ", text).strip()


@dataclass
class Section:
    title: str
    items: list[tuple[int, str]]
    """(the item's position in its source list, its rendered line)."""


# (section, items it keeps at least, "clip" for the summary): what goes first when the hop is too long.
DROP_ORDER: tuple[tuple[str, int], ...] = (
    ("risks", 0),
    ("questions", _KEPT_QUESTIONS),
    ("inferred", 0),
    ("summary", 0),
    ("questions", 0),
    ("artifacts", 0),
    ("constraints", 0),
    ("confirmed", 0),
)


@dataclass
class Layout:
    header: str
    footer: str
    summary: str
    sections: dict[str, Section]
    omitted: int = 0
    clipped: bool = False

    def render(self) -> str:
        lines = [self.header]
        if self.summary:
            lines.append(f"Summary: {self.summary}")
        for section in self.sections.values():
            if section.items:
                lines.append(section.title)
                lines += [line for _, line in section.items]
        if self.omitted:
            lines.append(f"Left out to fit: {self.omitted} items (all in the full record).")
        lines.append(self.footer)
        return "\n".join(lines)


def fit(layout: Layout, counter: TokenCounter, max_tokens: int) -> str:
    """Drops by `DROP_ORDER` until the text fits; the header and the record's citation always stay."""
    text = layout.render()
    tokens = counter.count(text)
    for name, keep in DROP_ORDER:
        if tokens <= max_tokens:
            break
        if name == "summary":
            if layout.summary:
                # Clip to what is left once the rest is counted; "…" marks the cut.
                without = counter.count(replace(layout, summary="").render())
                room = max_tokens - without - 4
                clipped = counter.clip(layout.summary, room) if room >= 8 else ""
                layout.clipped = clipped != layout.summary
                layout.summary = clipped + "…" if clipped and layout.clipped else clipped
                text = layout.render()
                tokens = counter.count(text)
            continue
        items = layout.sections[name].items
        while tokens > max_tokens and len(items) > keep:
            # Cheap first: a line's own tokens (+1 for its newline) approximate what dropping it saves.
            saved = counter.count(items[-1][1]) + 1
            items.pop()
            layout.omitted += 1
            estimate = tokens - saved
            if estimate <= max_tokens or len(items) <= keep:
                text = layout.render()
                tokens = counter.count(text)
            else:
                tokens = estimate
    return text
