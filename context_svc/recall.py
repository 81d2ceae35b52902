"""Recall: the older turns the newest user message needs, shown verbatim (docs/design.md §4, issue 37).

A summary keeps what an old span says in general; a question about one detail ("what did Caroline
paint last summer?") needs the turn that says it. Every user and assistant message older than the
recent window is a candidate; each is scored (`agentmesh.retrieval`, BM25 with CJK bigrams, behind
the `Retriever` interface a semantic retriever can implement) against the newest user message and
the goal, and the best are shown verbatim with a neighbour turn (the one before, else the one after)
and their position, in log order, inside the summary block's share.

The index of a session grows with its log (messages are immutable): each build adds the messages it
already holds (its tail and recent window) and reads only what it never saw, so a build costs the
query's postings, not the session's length. Indexes are kept per (session, epoch) in a small LRU.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from agentmesh.retrieval import BM25, Hit, Retriever, tokenize
from context_svc.lru import LRU
from context_svc.model import Message, Role
from context_svc.tokens import TokenCounter

__all__ = ["RECALL_HEADER", "STRONG_OVERLAP", "FocusedRetriever", "Recall", "Recalled", "newest_user_text", "query_of"]

RECALL_HEADER = "Earlier turns relevant to the newest message (verbatim, [#position role]):"
_TEXT_CHARS = 1200
"""A recalled turn longer than this is shown clipped (its start), so one long turn cannot take the block."""
_MAX_HITS = 256
_MIN_TOKENS = 24
_MIN_QUERY_CHARS = 2
_MIN_LINE_TOKENS = 6
"""No recalled line costs less ("[#1 user] x" and its newline)."""
_ROLES = (Role.USER, Role.ASSISTANT)
STRONG_OVERLAP = 0.6
"""A hit holding at least this share of the newest message's distinct terms answers it, not just the
goal's words: it is ranked first and may be reserved room before the summary's user lines (issue 37)."""
STRONG_MAX = 3
"""More strong hits than this are a recurring phrasing ("pod X keeps restarting", asked about many
pods), not the one turn the newest message needs: none is reserved room."""

Fetch = Callable[[int, int], Awaitable[list[Message]]]


@runtime_checkable
class FocusedRetriever(Protocol):
    """A retriever that also takes the newest message alone (context_svc/semantic_recall.py embeds it
    without the goal, which would otherwise dominate a sentence embedding)."""

    def search_focused(
        self, query: str, focus: str, k: int, *, allow: Callable[[int], bool] | None = None
    ) -> list[Hit[int]]: ...

    def prepare(self) -> None:
        """The slow part of indexing what was added (embedding), which `Recall` runs off the event loop."""


@dataclass
class _Index:
    retriever: Retriever[int] = field(default_factory=BM25)
    texts: dict[int, tuple[str, str]] = field(default_factory=dict)
    """index -> (role, content clipped) of the indexed user/assistant messages."""
    upto: int = 0
    """Messages 0..upto-1 have been seen (indexed or skipped)."""
    costs: dict[int, int] = field(default_factory=dict)
    """index -> tokens of its rendered line (counted once)."""
    terms: dict[int, frozenset[str]] = field(default_factory=dict)
    """index -> its distinct retrieval terms."""


@dataclass(frozen=True)
class Recalled:
    """The recall part of the summary block."""

    text: str
    tokens: int
    shown: tuple[int, ...]


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _TEXT_CHARS else text[: _TEXT_CHARS - 1] + "…"


def newest_user_text(messages: Sequence[Message]) -> str:
    """The newest user message's text ("" when none)."""
    return next((m.content for m in reversed(messages) if m.role is Role.USER and m.content.strip()), "")


def query_of(goal: str, messages: Sequence[Message]) -> str:
    """The newest user message (and the goal): what the recalled turns must be relevant to."""
    return f"{newest_user_text(messages)}\n{goal}".strip()


class Recall:
    """Per-session retrieval indexes and the recall block (see the module docstring)."""

    def __init__(self, entries: int = 256, *, retriever: Callable[[], Retriever[int]] = BM25) -> None:
        # A semantic or hybrid retriever (agentmesh/semantic.py) can replace BM25 (issue 51).
        self._retriever = retriever
        self._indexes: LRU[tuple[str, str], _Index] = LRU(entries)
        # A build repeated on an unchanged session (same window, budget and question) reuses its block.
        self._blocks: LRU[tuple[object, ...], tuple[Recalled | None]] = LRU(entries * 4)
        # One build asks for its strong hits and then for all: one search serves both.
        self._hits: LRU[tuple[object, ...], tuple[list[Hit[int]], frozenset[int]]] = LRU(entries)

    async def _index(self, session_id: str, epoch: str, upto: int, held: dict[int, Message], fetch: Fetch) -> _Index:
        """The session's index covering messages 0..upto-1 (reading only what it never saw)."""
        key = (session_id, epoch)
        index = self._indexes.get(key)
        if index is None:
            index = self._indexes.put(key, _Index(retriever=self._retriever()))
        if index.upto >= upto:
            return index
        missing = [i for i in range(index.upto, upto) if i not in held]
        read: dict[int, Message] = {}
        if missing:
            read = {m.index: m for m in await fetch(missing[0], missing[-1])}
        for i in range(index.upto, upto):
            message = held.get(i) or read.get(i)
            if message is None or message.role not in _ROLES or not message.content.strip():
                continue
            index.retriever.add(i, message.content)
            index.terms[i] = frozenset(tokenize(message.content))
            index.texts[i] = (message.role.value, _clip(message.content))
        index.upto = max(index.upto, upto)
        if isinstance(index.retriever, FocusedRetriever):
            await asyncio.to_thread(index.retriever.prepare)
        return index

    async def block(
        self,
        *,
        session_id: str,
        epoch: str,
        message_count: int,
        first_kept: int,
        query: str,
        budget: int,
        counter: TokenCounter,
        held: dict[int, Message],
        fetch: Fetch,
        count: Callable[[str], int],
        focus: str = "",
        strong_only: bool = False,
    ) -> Recalled | None:
        """The best of messages 0..first_kept-1 for `query`, within `budget` tokens (None: nothing).
        Hits holding `STRONG_OVERLAP` of `focus`'s (the newest message's) terms rank first;
        `strong_only` shows only those."""
        if first_kept <= 0 or budget < _MIN_TOKENS or len(query.strip()) < _MIN_QUERY_CHARS:
            return None
        key = (session_id, epoch, message_count, first_kept, budget, counter.name, query, focus, strong_only)
        cached = self._blocks.get(key)
        if cached is not None:
            return cached[0]
        index = await self._index(session_id, epoch, message_count, held, fetch)
        hits_key = (session_id, epoch, message_count, first_kept, query, focus)
        ranked = self._hits.get(hits_key)
        if ranked is None:
            ranked = self._hits.put(hits_key, self._rank(index, first_kept, query, focus))
        hits, strong = ranked
        if strong_only:
            if len(strong) > STRONG_MAX:
                return self._blocks.put(key, (None,))[0]
            hits = [h for h in hits if h.key in strong]
        return self._blocks.put(key, (self._render(index, first_kept, hits, budget, counter, count),))[0]

    @staticmethod
    def _rank(index: _Index, first_kept: int, query: str, focus: str) -> tuple[list[Hit[int]], frozenset[int]]:
        """The hits for `query` older than the window, strong ones first (each part in score order),
        and the strong ones' keys."""
        retriever = index.retriever
        if focus.strip() and isinstance(retriever, FocusedRetriever):
            hits = retriever.search_focused(query, focus, _MAX_HITS, allow=lambda i: i < first_kept)
        else:
            hits = retriever.search(query, _MAX_HITS, allow=lambda i: i < first_kept)
        terms = frozenset(tokenize(focus))
        need = STRONG_OVERLAP * len(terms)
        strong = frozenset(h.key for h in hits if terms and len(terms & index.terms.get(h.key, frozenset())) >= need)
        hits.sort(key=lambda h: h.key not in strong)  # stable
        return hits, strong

    def _render(
        self,
        index: _Index,
        first_kept: int,
        hits: list[Hit[int]],
        budget: int,
        counter: TokenCounter,
        count: Callable[[str], int],
    ) -> Recalled | None:
        if not hits:
            return None
        overhead = counter.message(Role.SYSTEM.value, "") + count(RECALL_HEADER) + 2
        spent, shown = overhead, set[int]()

        def line(i: int) -> str:
            role, text = index.texts[i]
            return f"[#{i} {role}] {text}"

        def cost_of(i: int) -> int:
            cost = index.costs.get(i)
            if cost is None:
                cost = index.costs[i] = count(line(i)) + 1
            return cost

        for hit in hits:
            if budget - spent < _MIN_LINE_TOKENS:
                break  # full: no line is shorter than this
            pick = [hit.key]
            neighbour = next((j for j in (hit.key - 1, hit.key + 1) if j in index.texts and j < first_kept), None)
            if neighbour is not None:
                pick.append(neighbour)
            new = [i for i in pick if i not in shown]
            cost = sum(cost_of(i) for i in new)
            if spent + cost > budget:
                # The neighbour does not fit: the hit alone may.
                new = [i for i in new if i == hit.key]
                cost = sum(cost_of(i) for i in new)
                if spent + cost > budget:
                    continue
            shown.update(new)
            spent += cost
        if not shown:
            return None
        order = sorted(shown)
        text = "\n".join([RECALL_HEADER, *(line(i) for i in order)])
        tokens = counter.message(Role.SYSTEM.value, "") + counter.count(text)
        while tokens > budget and order:
            # Joined text may count a little differently from its lines: the lowest-ranked goes first.
            ranked = [h.key for h in hits if h.key in shown]
            drop = ranked[-1] if ranked else order[-1]
            shown.discard(drop)
            shown.discard(drop - 1)
            shown.discard(drop + 1)
            order = sorted(shown)
            text = "\n".join([RECALL_HEADER, *(line(i) for i in order)])
            tokens = counter.message(Role.SYSTEM.value, "") + counter.count(text)
        if not order:
            return None
        return Recalled(text, tokens, tuple(order))
