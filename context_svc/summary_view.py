"""The summary block of a view: the persisted rolling summary extended with the older turns not
compacted yet, cut to its budget, with a footer naming the payload that holds the rest.

`SummaryViews` renders it for one budget: everything verbatim when it fits; otherwise the lines that
matter most (facts/lines.py: the user's lines stating values or constraints first, near-duplicates
folded) and a footer pointing at the full summary, written once per version as a payload. A view whose
cut lines belong to turns not compacted yet says so (`needs_compaction`): those lines are in no payload.
Renderings are cached per (session, epoch, version, span, budget), re-rendered when half the payload
TTL has passed so the payload they point to stays readable.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from agentmesh.config import ContextSettings
from agentmesh.payloads import MEDIA_TEXT, PayloadStore, StoredPayload
from context_svc.compaction import Compactor
from context_svc.facts.lines import choose_lines
from context_svc.lru import LRU
from context_svc.model import Message, Role, Session, Summary
from context_svc.sessions import SessionStore
from context_svc.tokens import CountCache, TokenCounter

__all__ = ["SummaryView", "SummaryViews"]

_INTENT_VIEW_CHARS = 400
_OPEN_VIEW_CHARS = 200
_MIN_SUMMARY_TOKENS = 48
_OPEN_VIEW_ITEMS = 5


@dataclass(frozen=True)
class SummaryView:
    """The summary block as rendered for one view."""

    text: str
    tokens: int
    covered: int
    """Messages the summary covers (0 .. covered-1)."""
    omitted: int
    """Lines of the summary left out of this view (the footer names the payload holding them)."""
    needs_compaction: bool = False
    """Lines of turns not compacted yet were cut: they are in no payload, so compact first."""


def _now() -> float:
    return time.time()


class SummaryViews:
    """Renders and caches the summary block of a session's views (see the module docstring)."""

    def __init__(
        self,
        settings: ContextSettings,
        sessions: SessionStore,
        payloads: PayloadStore,
        compaction: Compactor,
        counts: CountCache,
    ) -> None:
        self.settings = settings
        self.sessions = sessions
        self.payloads = payloads
        self.compaction = compaction
        self.counts = counts
        self._views: LRU[tuple[object, ...], tuple[SummaryView, float]] = LRU(settings.summary_cache_entries)
        self._persisted_refs: LRU[tuple[str, str, int], StoredPayload] = LRU(settings.summary_cache_entries)

    async def view(
        self,
        session: Session,
        version: int,
        upto: int,
        last: int,
        budget: int,
        counter: TokenCounter,
        held: dict[int, Message],
        user_budget: int = 0,
    ) -> SummaryView | None:
        """The summary block: the persisted summary (up to `upto`) extended with the turns
        upto+1..last not compacted yet, cut to `budget` (the user's stated values and constraints
        to `user_budget` when larger); what is cut is one read_payload away."""
        key = (session.session_id, session.epoch, version, upto, last, budget, user_budget)
        cached = self._views.get(key)
        # Re-rendered when half the payload TTL has passed: that refreshes the payload it points to.
        if cached is not None and _now() - cached[1] < self.settings.payload_ttl_s / 2:
            return cached[0]
        # The persisted summary is read once per version, and the turns after it usually are among
        # the messages the load just returned: then this needs no Redis read at all.
        persisted = self.compaction.persisted.get((session.session_id, session.epoch, version)) if upto >= 0 else None
        stored_version = version
        hole_or_none = [held.get(index) for index in range(upto + 1, last + 1)]
        if (upto >= 0 and persisted is None) or any(m is None for m in hole_or_none):
            persisted, stored_version, hole = await self.sessions.summary_and_messages(
                session.session_id, upto + 1, last
            )
            if persisted is not None:
                self.compaction.persisted.put((session.session_id, session.epoch, stored_version), persisted)
        else:
            hole = [m for m in hole_or_none if m is not None]
        covered_upto = persisted.last_index if persisted is not None else -1
        hole = [m for m in hole if m.index > covered_upto]
        summary = persisted
        if hole:
            seen = self.compaction.known(session, stored_version, persisted) if persisted is not None else None
            summary = self.compaction.extractive.summarize(
                persisted, [self.compaction.notes(session, m) for m in hole], seen=seen
            )
        if summary is None:
            return None
        view = await self._render(session, summary, persisted, stored_version, budget, counter, user_budget)
        if view is not None and not view.needs_compaction:
            self._views.put(key, (view, _now()))
        return view

    async def _persisted_ref(self, session: Session, version: int, persisted: Summary) -> StoredPayload:
        """The persisted summary's full text as a payload: written once per version (and again when
        half its TTL has passed), so a view that cuts it can point to it."""
        key = (session.session_id, session.epoch, version)
        cached = self._persisted_refs.get(key)
        if cached is not None and cached.expire_at - _now() > self.settings.payload_ttl_s / 2:
            return cached
        ref = await self.payloads.put(session.session_id, persisted.render().encode("utf-8"), MEDIA_TEXT)
        return self._persisted_refs.put(key, ref)

    async def _render(
        self,
        session: Session,
        summary: Summary,
        persisted: Summary | None,
        version: int,
        budget: int,
        counter: TokenCounter,
        user_budget: int = 0,
    ) -> SummaryView | None:
        overhead = counter.message(Role.SYSTEM.value, "")
        top = max(budget, user_budget)
        if top < _MIN_SUMMARY_TOKENS:
            return None
        head = [
            f"Summary of earlier messages {summary.first_index}-{summary.last_index} ({summary.summarizer})",
            f"User intent: {_clip(summary.user_intent, _INTENT_VIEW_CHARS) or '-'}",
        ]
        open_questions = summary.open_questions
        if open_questions:
            # The newest few: a long list of old unanswered questions must not crowd out the facts.
            head.append("Open questions (newest last):")
            head += [f"- {_clip(q, _OPEN_VIEW_CHARS)}" for q in open_questions[-_OPEN_VIEW_ITEMS:]]
        open_omitted = max(0, len(open_questions) - _OPEN_VIEW_ITEMS)
        key_data, actions_taken = summary.key_data, summary.actions_taken

        def assemble(key_lines: list[str], actions: list[str], footer: str) -> str:
            parts = list(head)
            if key_lines:
                parts.append("Key data (oldest first):")
                parts += [f"- {line}" for line in key_lines]
            if actions:
                parts.append("Actions taken:")
                parts += [f"- {line}" for line in actions]
            if footer:
                parts.append(footer)
            return "\n".join(parts)

        def cost(line: str) -> int:
            return self.counts.count(counter, line) + 3  # "- ", the newline

        if not open_omitted:
            # Everything, verbatim, when it fits (counted line by line, newest first, stopping early:
            # a long session's summary has thousands of lines and only the newest fit).
            room, spent, fits = budget - overhead - self.counts.count(counter, assemble([], [], "")) - 16, 0, True
            for line in (*reversed(key_data), *reversed(actions_taken)):
                spent += cost(line)
                if spent > room:
                    fits = False
                    break
            if fits:
                text = assemble(list(key_data), list(actions_taken), "")
                tokens = overhead + self.counts.count(counter, text)
                if tokens <= budget:
                    return SummaryView(text, tokens, summary.last_index + 1, 0)

        # Too long: the lines that matter most (lines.py), and a footer naming the full summary's ref.
        ref = await self._persisted_ref(session, version, persisted) if persisted is not None else None

        def footer(keys: int, actions: int) -> str:
            where = "they are compacted next"
            if persisted is not None and ref is not None:
                span = f"{persisted.first_index}-{persisted.last_index}"
                where = f'the summary of messages {span} is read_payload(ref_id="{ref.ref_id}")'
            return (
                f"[not shown here: {len(key_data) - keys} key-data lines, {len(actions_taken) - actions} "
                f"actions, {open_omitted} older open questions; {where}]"
            )

        fixed = overhead + self.counts.count(counter, assemble([], [], footer(0, 0))) + 16
        choice, taken = choose_lines(key_data, actions_taken, budget - fixed, cost, user_room=top - fixed)

        def text_of() -> str:
            shown_actions = [actions_taken[i] for i in sorted(choice.actions)]
            return assemble(choice.key_lines(key_data), shown_actions, footer(len(choice.keys), len(choice.actions)))

        text = text_of()
        tokens = overhead + self.counts.count(counter, text)
        # Joined text can count a little differently from its lines: drop the least important until it fits.
        while tokens > top and taken:
            kind, index = taken.pop()
            if kind == "a":
                choice.actions.discard(index)
            else:
                for key, members in list(choice.groups.items()):
                    if index in members:
                        members.remove(index)
                        if not members:
                            del choice.groups[key]
            text = text_of()
            tokens = overhead + self.counts.count(counter, text)
        if tokens > top:
            text = counter.clip(text, top - overhead)
            tokens = overhead + self.counts.count(counter, text)
        # Lines of turns not compacted yet are in no payload: if any is cut, compact now.
        persisted_keys = len(persisted.key_data) if persisted is not None else 0
        persisted_actions = len(persisted.actions_taken) if persisted is not None else 0
        shown_keys = choice.keys
        needs_compaction = any(i not in shown_keys for i in range(persisted_keys, len(key_data))) or any(
            i not in choice.actions for i in range(persisted_actions, len(actions_taken))
        )
        omitted = len(key_data) - len(shown_keys) + len(actions_taken) - len(choice.actions) + open_omitted
        return SummaryView(text, tokens, summary.last_index + 1, omitted, needs_compaction)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
