"""Assembly: the budgeted context view BuildContext returns.

`Assembler` splits a budget into blocks and fills them: the system block (prompt, goal, sub-goals,
known facts), the summary block (the persisted rolling summary extended with the older turns not
compacted yet, cut to its share, with a footer naming the payload that holds the rest), and the
recent turns and tool observations of the window, clipped when the newest group alone is over
budget; then the view with its blocks and, on request, a debug rendering. When the turns outside
the window are over the trigger it has the `Compactor` fold them into the summary first.

Unused budget is lent before anything is cut (issue 23): what the recent window leaves goes to the
summary, and what both leave to the known facts of the system block when some did not fit; a block
never takes more than its ratio from a block that needs it, so a full context keeps the ratios.
Under pressure the summary shows the user's lines before the assistant's and folds near-duplicates
(lines.py); the known facts are entities.py's records with their provenance (known.py).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

from agentmesh.config import ContextSettings
from agentmesh.payloads import MEDIA_TEXT, PayloadStore, StoredPayload
from context_svc.budget import BlockBudgets, extend_window, group_entries, select_window
from context_svc.compaction import Compactor
from context_svc.facts.known import known_facts, render_known
from context_svc.facts.lines import choose_lines
from context_svc.lru import LRU
from context_svc.memories import Memories, Prefetch
from context_svc.model import Block, BlockKind, ContextView, Message, Role, Session, Summary
from context_svc.recall import Recall, Recalled, newest_user_text, query_of
from context_svc.semantic_recall import turn_retriever
from context_svc.sessions import Loaded, SessionStore
from context_svc.tokens import TokenCounter, counter_for

__all__ = ["Assembler", "SummaryView"]

_INTENT_VIEW_CHARS = 400
_OPEN_VIEW_CHARS = 200
_MIN_SUMMARY_TOKENS = 48
_OPEN_VIEW_ITEMS = 5
RECALL_SHARE = 0.75
"""Of the summary block, what recall (older turns relevant to the newest message) may take."""
STRONG_RECALL_SHARE = 0.25
"""Of the summary block, what recall's strong hits (turns holding most of the newest message's words,
recall.STRONG_OVERLAP) are reserved before the user's lines stating values or constraints; those
lines take the rest of the block first, and recall fills what they leave (issue 37: a planted user
fact must not give way to turns that only share the goal's words)."""
_RESERVE_STEP = 64
"""Recall's reserve is rounded up to this, so the summary's budget (a cache key) changes seldom."""


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
        self._summary_views: LRU[tuple[object, ...], tuple[SummaryView, float]] = LRU(settings.summary_cache_entries)
        self._persisted_refs: LRU[tuple[str, str, int], StoredPayload] = LRU(settings.summary_cache_entries)
        self._tokens: LRU[tuple[str, str], int] = LRU(settings.token_cache_entries)
        self.recall = Recall(retriever=turn_retriever(settings))
        self._held: LRU[tuple[str, str, int], Message] = LRU(settings.token_cache_entries)

    def _count(self, counter: TokenCounter, text: str) -> int:
        key = (counter.name, text)
        cached = self._tokens.get(key)
        if cached is None:
            cached = self._tokens.put(key, counter.count(text))
        return cached

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
            summary_view = await self._summary_view(
                session, version, upto, first_kept - 1, rest, counter, loaded.tail, user_budget
            )
            if summary_view is not None and summary_view.needs_compaction and not compacted:
                result = await self.compaction.compact(session, version, upto, first_kept - 1)
                if result is not None:
                    version, upto, compacted = result[0], first_kept - 1, True
                    summary_view = await self._summary_view(
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
        return self._assemble(
            session, budgets, counter, system_text, system_tokens, summary_view, kept, first_kept, compacted, debug
        )

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

    async def _summary_view(
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
        cached = self._summary_views.get(key)
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
        view = await self._render_summary(session, summary, persisted, stored_version, budget, counter, user_budget)
        if view is not None and not view.needs_compaction:
            self._summary_views.put(key, (view, _now()))
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

    async def _render_summary(
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
            return self._count(counter, line) + 3  # "- ", the newline

        if not open_omitted:
            # Everything, verbatim, when it fits (counted line by line, newest first, stopping early:
            # a long session's summary has thousands of lines and only the newest fit).
            room, spent, fits = budget - overhead - self._count(counter, assemble([], [], "")) - 16, 0, True
            for line in (*reversed(key_data), *reversed(actions_taken)):
                spent += cost(line)
                if spent > room:
                    fits = False
                    break
            if fits:
                text = assemble(list(key_data), list(actions_taken), "")
                tokens = overhead + self._count(counter, text)
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

        fixed = overhead + self._count(counter, assemble([], [], footer(0, 0))) + 16
        choice, taken = choose_lines(key_data, actions_taken, budget - fixed, cost, user_room=top - fixed)

        def text_of() -> str:
            shown_actions = [actions_taken[i] for i in sorted(choice.actions)]
            return assemble(choice.key_lines(key_data), shown_actions, footer(len(choice.keys), len(choice.actions)))

        text = text_of()
        tokens = overhead + self._count(counter, text)
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
            tokens = overhead + self._count(counter, text)
        if tokens > top:
            text = counter.clip(text, top - overhead)
            tokens = overhead + self._count(counter, text)
        # Lines of turns not compacted yet are in no payload: if any is cut, compact now.
        persisted_keys = len(persisted.key_data) if persisted is not None else 0
        persisted_actions = len(persisted.actions_taken) if persisted is not None else 0
        shown_keys = choice.keys
        needs_compaction = any(i not in shown_keys for i in range(persisted_keys, len(key_data))) or any(
            i not in choice.actions for i in range(persisted_actions, len(actions_taken))
        )
        omitted = len(key_data) - len(shown_keys) + len(actions_taken) - len(choice.actions) + open_omitted
        return SummaryView(text, tokens, summary.last_index + 1, omitted, needs_compaction)

    def _assemble(
        self,
        session: Session,
        plan: BlockBudgets,
        counter: TokenCounter,
        system_text: str,
        system_tokens: int,
        summary_view: SummaryView | None,
        kept: list[Message],
        first_kept: int,
        compacted: bool,
        debug: bool,
    ) -> ContextView:
        now = _now()
        messages = [Message(Role.SYSTEM, system_text, token_count=system_tokens, create_time=now)]
        summary_tokens = 0
        if summary_view is not None:
            summary_tokens = summary_view.tokens
            messages.append(Message(Role.SYSTEM, summary_view.text, token_count=summary_tokens, create_time=now))
        messages += kept
        recent = [m for m in kept if m.role is not Role.TOOL]
        observations = [m for m in kept if m.role is Role.TOOL]
        recent_tokens = sum(m.token_count for m in recent)
        observation_tokens = sum(m.token_count for m in observations)
        observation_budget = plan.total - system_tokens - summary_tokens - recent_tokens - plan.reply
        blocks = [
            Block(BlockKind.SYSTEM, system_tokens, plan.system, 1, system_text if debug else ""),
            Block(
                BlockKind.SUMMARY,
                summary_tokens,
                plan.summary,
                1 if summary_view else 0,
                summary_view.text if debug and summary_view else "",
            ),
            Block(
                BlockKind.RECENT,
                recent_tokens,
                plan.recent,
                len(recent),
                "\n\n".join(_render(m) for m in recent) if debug else "",
            ),
            Block(
                BlockKind.OBSERVATIONS,
                observation_tokens,
                observation_budget,
                len(observations),
                "\n\n".join(_render(m) for m in observations) if debug else "",
            ),
        ]
        summarized = first_kept if summary_view is not None else 0
        view = ContextView(
            messages=tuple(messages),
            blocks=tuple(blocks),
            total_tokens=sum(m.token_count for m in messages),
            budget_tokens=plan.total,
            summarized_messages=summarized,
            dropped_messages=first_kept - summarized,
            compacted=compacted,
        )
        if debug:
            view = replace(view, debug_text=_debug_text(view, plan, summary_view))
        return view


# -- rendering helpers -------------------------------------------------------------------------


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _render(m: Message) -> str:
    label = m.role.value
    if m.role is Role.TOOL:
        label = f"tool {m.name} {m.tool_call_id}"
    head = f"[{label} #{m.index}] ({m.token_count} tokens)"
    body = m.content
    for call in m.tool_calls:
        body += f"\ntool_call {call.id}: {call.name}({call.arguments_json})"
    return f"{head}\n{body}".rstrip()


def _debug_text(view: ContextView, plan: BlockBudgets, summary: SummaryView | None) -> str:
    blocks = {b.kind: b for b in view.blocks}
    lines = []
    system, summary_block = blocks[BlockKind.SYSTEM], blocks[BlockKind.SUMMARY]
    lines.append(f"### SYSTEM block: {system.tokens}/{system.budget_tokens} tokens")
    lines.append(f"[system] ({view.messages[0].token_count} tokens)\n{view.messages[0].content}")
    position = 1
    if summary is not None:
        lines.append(
            f"### SUMMARY block: {summary_block.tokens}/{summary_block.budget_tokens} tokens, "
            f"covers messages 0-{summary.covered - 1}, {summary.omitted} lines only in the full summary"
        )
        lines.append(f"[system] ({summary.tokens} tokens)\n{summary.text}")
        position = 2
    recent, observations = blocks[BlockKind.RECENT], blocks[BlockKind.OBSERVATIONS]
    lines.append(
        f"### RECENT {recent.tokens}/{recent.budget_tokens} tokens ({recent.message_count} messages) + "
        f"OBSERVATIONS {observations.tokens}/{observations.budget_tokens} tokens "
        f"({observations.message_count} messages), in log order"
    )
    lines += [_render(m) for m in view.messages[position:]]
    lines.append(
        f"### total {view.total_tokens}/{view.budget_tokens} tokens ({plan.reply} held back for the reply); "
        f"{view.summarized_messages} messages summarised, {view.dropped_messages} dropped"
        + (", compacted during this build" if view.compacted else "")
    )
    return "\n\n".join(lines)
