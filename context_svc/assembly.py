"""Assembly: the budgeted context view BuildContext returns.

`Assembler` splits a budget into blocks and fills them: the system block (prompt, goal, sub-goals,
known facts), the summary block (summary_view.py: the persisted rolling summary extended with the older
turns not compacted yet, cut to its share, with a footer naming the payload that holds the rest), and
the recent turns and tool observations of the window, clipped when the newest group alone is over
budget; view.py lays the blocks out as the view with, on request, a debug rendering. When the turns
outside the window are over the trigger it has the `Compactor` fold them into the summary first.

Unused budget is lent before anything is cut (issue 23): what the recent window leaves goes to the
summary, and what both leave to the known facts of the system block when some did not fit; a block
never takes more than its ratio from a block that needs it, so a full context keeps the ratios.
Under pressure the summary shows the user's lines before the assistant's and folds near-duplicates
(lines.py); the known facts are entities.py's records with their provenance (known.py).
"""

from __future__ import annotations

import math
from dataclasses import replace

from agentmesh.config import ContextSettings
from agentmesh.payloads import PayloadStore
from context_svc.budget import BlockBudgets, extend_window, group_entries, select_window
from context_svc.compaction import Compactor
from context_svc.facts.known import known_facts, render_known
from context_svc.lru import LRU
from context_svc.memories import Memories, Prefetch
from context_svc.model import ContextView, Message, Role, Session
from context_svc.recall import Recall, Recalled, newest_user_text, query_of
from context_svc.semantic_recall import turn_retriever
from context_svc.sessions import Loaded, SessionStore
from context_svc.summary_view import SummaryView, SummaryViews
from context_svc.tokens import CountCache, TokenCounter, counter_for
from context_svc.view import assemble_view

__all__ = ["Assembler"]

RECALL_SHARE = 0.75
"""Of the summary block, what recall (older turns relevant to the newest message) may take."""
STRONG_RECALL_SHARE = 0.25
"""Of the summary block, what recall's strong hits (turns holding most of the newest message's words,
recall.STRONG_OVERLAP) are reserved before the user's lines stating values or constraints; those
lines take the rest of the block first, and recall fills what they leave (issue 37: a planted user
fact must not give way to turns that only share the goal's words)."""
_RESERVE_STEP = 64
"""Recall's reserve is rounded up to this, so the summary's budget (a cache key) changes seldom."""


class Assembler:
    """Builds the budgeted context view of a loaded session (see the module docstring)."""

    def __init__(
        self,
        settings: ContextSettings,
        sessions: SessionStore,
        payloads: PayloadStore,
        compaction: Compactor,
        *,
        memory: Memories | None = None,
    ) -> None:
        self.settings = settings
        self.memory = memory
        self.sessions = sessions
        self.payloads = payloads
        self.compaction = compaction
        self.counts = CountCache(settings.token_cache_entries)
        self.summaries = SummaryViews(settings, sessions, payloads, compaction, self.counts)  # summary_view.py
        self.recall = Recall(retriever=turn_retriever(settings))
        self._held: LRU[tuple[str, str, int], Message] = LRU(settings.token_cache_entries)

    def _count(self, counter: TokenCounter, text: str) -> int:
        return self.counts.count(counter, text)

    def _message_tokens(self, counter: TokenCounter, role: Role, text: str) -> int:
        return counter.message(role.value, "") + self._count(counter, text)

    async def build(
        self, loaded: Loaded, total: int, *, debug: bool = False, memories: Prefetch | None = None
    ) -> ContextView:
        """The context of `loaded` that fits `total` tokens (the caller checked access and the budget);
        `memories`: the owner's memories, read while the session loaded."""
        session = loaded.session
        counter = counter_for(session.budget.encoding)
        plan = BlockBudgets.of(total, session.budget)
        memory = ""
        if self.memory is not None:
            # The user's long-term memories (issue 51) take at most a third of the system block.
            query = query_of(session.goal, [loaded.tail[i] for i in sorted(loaded.tail)])
            memory = await self.memory.recall_text(
                session, query, plan.system // 3, lambda text: self._count(counter, text), prefetched=memories
            )
        system_text, system_tokens, facts_cut = self._system(session, loaded.entities, plan.system, counter, memory)

        base = session.summarized_upto + 1
        groups = group_entries(loaded.entries, base)
        recent_budget = plan.recent
        available = total - system_tokens - plan.reply
        window = select_window(groups, recent_budget=recent_budget, available=available,
                               keep=session.budget.keep_recent_messages)  # fmt: skip
        if session.summarized_upto >= 0 or window.first > 0:
            # Older turns exist: the summary block gets its share before the recent window.
            available -= plan.summary
            window = select_window(groups, recent_budget=recent_budget, available=available,
                                   keep=session.budget.keep_recent_messages)  # fmt: skip
        first_kept = groups[window.first].start if window.first < len(groups) else session.message_count
        hole_tokens = sum(g.tokens for g in groups[: window.first])

        kept = await self._window_messages(loaded, first_kept)
        if window.clipped:
            kept = self._clip_group(kept, counter, recent_budget, available)
        window_tokens = sum(m.token_count for m in kept)
        # Lending: the summary gets its share, and whatever the window and the reply leave.
        summary_budget = max(plan.summary, total - plan.reply - system_tokens - window_tokens)

        compacted = False
        version = loaded.summary_version
        upto = session.summarized_upto
        if hole_tokens > session.budget.summary_trigger_tokens:
            result = await self.compaction.compact(session, version, upto, first_kept - 1)
            if result is not None:
                version, _ = result
                upto = first_kept - 1
                compacted = True

        summary_view: SummaryView | None = None
        if first_kept > 0:
            # Recall's strong hits are reserved up to their share (only what they need); the user's
            # lines stating values or constraints take the rest first, the other summary lines up to
            # what recall may leave them; recall fills what is left.
            strong_share = math.floor(summary_budget * STRONG_RECALL_SHARE)
            strong = await self._recall(loaded, kept, first_kept, strong_share, strong_only=True)
            reserve = -(-strong.tokens // _RESERVE_STEP) * _RESERVE_STEP if strong is not None else 0
            user_budget = summary_budget - min(reserve, strong_share)
            recalled = await self._recall(loaded, kept, first_kept, math.floor(summary_budget * RECALL_SHARE))
            reserve = -(-recalled.tokens // _RESERVE_STEP) * _RESERVE_STEP if recalled is not None else 0
            rest = min(user_budget, summary_budget - min(reserve, math.floor(summary_budget * RECALL_SHARE)))
            summary_view = await self.summaries.view(
                session, version, upto, first_kept - 1, rest, counter, loaded.tail, user_budget
            )
            if summary_view is not None and summary_view.needs_compaction and not compacted:
                result = await self.compaction.compact(session, version, upto, first_kept - 1)
                if result is not None:
                    version, upto, compacted = result[0], first_kept - 1, True
                    summary_view = await self.summaries.view(
                        session, version, upto, first_kept - 1, rest, counter, loaded.tail, user_budget
                    )
            room = summary_budget - (summary_view.tokens if summary_view is not None else 0) - 8
            if recalled is not None and room != recalled.tokens:
                recalled = await self._recall(loaded, kept, first_kept, room)
            if recalled is not None and recalled.tokens <= room:
                summary_view = self._with_recall(summary_view, recalled, first_kept, counter)
        summary_tokens = summary_view.tokens if summary_view is not None else 0
        spare = total - plan.reply - system_tokens - summary_tokens - window_tokens
        if spare > 0 and 0 < window.first < len(groups) and not window.clipped:
            # Room no block used goes to older turns: a view under budget leaves none out (issue 37).
            first = extend_window(groups, window.first, spare)
            if first < window.first:
                start = groups[first].start
                older = await self._window_messages(loaded, start, first_kept)
                kept = older + kept
                first_kept = start
                window_tokens = sum(m.token_count for m in kept)
                spare = total - plan.reply - system_tokens - summary_tokens - window_tokens
        if facts_cut and spare > 0:
            # Known facts that did not fit their share borrow what every other block left.
            system_text, system_tokens, _ = self._system(
                session, loaded.entities, system_tokens + spare, counter, memory
            )
        budgets = replace(plan, summary=summary_budget if summary_view is not None else plan.summary,
                          system=max(plan.system, system_tokens))  # fmt: skip
        return assemble_view(budgets, system_text, system_tokens, summary_view, kept, first_kept, compacted, debug)

    async def _recall(
        self, loaded: Loaded, kept: list[Message], first_kept: int, budget: int, *, strong_only: bool = False
    ) -> Recalled | None:
        """Older turns relevant to the newest user message, within `budget` tokens (`strong_only`:
        only those holding most of its words)."""
        session = loaded.session
        held = dict(loaded.tail)
        held.update((m.index, m) for m in kept)
        newest = kept or [held[i] for i in sorted(held)]
        sid = session.session_id

        async def fetch(start: int, end: int) -> list[Message]:
            return await self.sessions.messages(sid, start, end)

        return await self.recall.block(
            session_id=sid,
            epoch=session.epoch,
            message_count=session.message_count,
            first_kept=first_kept,
            query=query_of(session.goal, newest),
            focus=newest_user_text(newest),
            strong_only=strong_only,
            budget=budget,
            counter=counter_for(session.budget.encoding),
            held=held,
            fetch=fetch,
            count=lambda text: self._count(counter_for(session.budget.encoding), text),
        )

    def _with_recall(
        self, summary_view: SummaryView | None, recalled: Recalled, first_kept: int, counter: TokenCounter
    ) -> SummaryView:
        """The summary block with the recalled turns after the summary."""
        if summary_view is None:
            return SummaryView(recalled.text, recalled.tokens, first_kept, 0)
        text = summary_view.text + "\n\n" + recalled.text
        tokens = counter.message(Role.SYSTEM.value, "") + self._count(counter, text)
        return replace(summary_view, text=text, tokens=tokens)

    def system_block(
        self, session: Session, entities: dict[str, tuple[str, int]], budget: int, counter: TokenCounter
    ) -> tuple[str, int]:
        """The system message: prompt, goal, sub-goals, known facts; facts and then the prompt are
        cut to fit `budget`."""
        text, tokens, _ = self._system(session, entities, budget, counter)
        return text, tokens

    def _system(
        self,
        session: Session,
        entities: dict[str, tuple[str, int]],
        budget: int,
        counter: TokenCounter,
        memory: str = "",
    ) -> tuple[str, int, bool]:
        """`system_block`, and whether known facts were left out (or shown without their quotes);
        `memory` (the user's recalled memories, already cut to its share) follows the goal."""
        goal = [f"Goal: {session.goal}"]
        if session.sub_goals:
            goal += ["Sub-goals:", *(f"- {g}" for g in session.sub_goals)]
        if memory:
            goal += ["", memory]
        facts = known_facts(entities)
        prompt = session.system_prompt

        def render(prompt_text: str, shown: int, quotes: bool = True) -> str:
            parts = [prompt_text] if prompt_text else []
            parts.append("\n".join(goal))
            if shown:
                parts.append(render_known(facts[:shown], quotes=quotes))
            return "\n\n".join(parts)

        shown, quotes = len(facts), True
        text = render(prompt, shown)
        tokens = self._message_tokens(counter, Role.SYSTEM, text)
        if tokens > budget and shown:
            # The labelled facts' quotes go before any fact does.
            quotes = False
            text = render(prompt, shown, quotes)
            tokens = self._message_tokens(counter, Role.SYSTEM, text)
        while tokens > budget and shown:
            shown = shown - max(1, shown // 4)
            text = render(prompt, shown, quotes)
            tokens = self._message_tokens(counter, Role.SYSTEM, text)
        cut = shown < len(facts) or not quotes
        if tokens > budget:
            cut = False  # the prompt itself is over its share: it keeps its share, facts borrow nothing
            # The system prompt itself is too long for its share: keep its start, say it was cut.
            goal_tokens = self._message_tokens(counter, Role.SYSTEM, render("", 0))
            note = "\n[system prompt cut to fit the context budget]"
            room = max(0, budget - goal_tokens - counter.count(note) - 4)
            text = render(counter.clip(prompt, room) + note, 0)
            tokens = self._message_tokens(counter, Role.SYSTEM, text)
            if tokens > budget:
                text = counter.clip(text, max(0, budget - counter.message(Role.SYSTEM.value, "")))
                tokens = self._message_tokens(counter, Role.SYSTEM, text)
        return text, tokens, cut

    async def _window_messages(self, loaded: Loaded, first_kept: int, end: int | None = None) -> list[Message]:
        """Messages first_kept..end-1 of the log (default: to the newest); the load read the last
        ones, this process holds those it read before (immutable per epoch), the rest is read now."""
        session = loaded.session
        n = session.message_count if end is None else end
        key = (session.session_id, session.epoch)
        held = [loaded.tail.get(index) or self._held.get((*key, index)) for index in range(first_kept, n)]
        missing = [first_kept + i for i, m in enumerate(held) if m is None]
        if missing:
            for message in await self.sessions.messages(session.session_id, missing[0], missing[-1]):
                held[message.index - first_kept] = message
                self._held.put((*key, message.index), message)
        return [m for m in held if m is not None]

    def _clip_group(self, kept: list[Message], counter: TokenCounter, recent: int, available: int) -> list[Message]:
        """The newest group alone is over budget: clip each message's content proportionally."""
        conversation = sum(m.token_count for m in kept if m.role is not Role.TOOL)
        total = sum(m.token_count for m in kept)
        scale = min(available / total if total else 1.0, recent / conversation if conversation else 1.0, 1.0)
        clipped = []
        for m in kept:
            note = f"\n[clipped to fit the context budget; message {m.index} has {m.token_count} tokens]"
            room = max(0, math.floor(m.token_count * scale) - (m.token_count - counter.count(m.content)) - 24)
            content = counter.clip(m.content, room) + note
            extra = [c.name for c in m.tool_calls] + [c.arguments_json for c in m.tool_calls]
            tokens = counter.message(m.role.value, content, extra + ([m.name] if m.name else []))
            clipped.append(replace(m, content=content, token_count=tokens))
        return clipped
