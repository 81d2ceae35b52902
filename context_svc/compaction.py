"""Compaction: folding older turns into a session's persisted rolling summary.

`Compactor` runs the configured LLM summarizer (falling back to the extractive one when the summary
is rejected or the model is unreachable) under the session's compaction lease and commits the
result. It also holds the per-process summary caches (message notes, known facts, persisted
summaries, keyed by the session's epoch and the summary version) that assembly reads as well.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from agentmesh.config import ContextSettings
from agentmesh.errors import AgentmeshError
from context_svc.lru import LRU
from context_svc.model import Message, Session, Summary
from context_svc.sessions import SessionStore
from context_svc.summarize import (
    ExtractiveSummarizer,
    LLMSummarizer,
    MessageNotes,
    SummaryModel,
    SummaryRejectedError,
    known_facts,
    message_notes,
)
from context_svc.tokens import counter_for

__all__ = ["Compactor"]

log = logging.getLogger("context_svc")


class Compactor:
    """Compacts older turns into the rolling summary; the summary caches (see the module docstring)."""

    def __init__(
        self, settings: ContextSettings, sessions: SessionStore, *, summary_model: SummaryModel | None = None
    ) -> None:
        self.settings = settings
        self.sessions = sessions
        self.extractive = ExtractiveSummarizer()
        self.summary_model = summary_model
        self.rejected_summaries = 0
        """LLM summaries rejected by this process (also counted per session in Redis)."""
        self._notes_cache: LRU[tuple[str, str, int], MessageNotes] = LRU(settings.message_cache_entries)
        self._seen: LRU[tuple[str, str, int], set[str]] = LRU(settings.summary_cache_entries)
        self.persisted: LRU[tuple[str, str, int], Summary] = LRU(settings.summary_cache_entries)
        """Persisted summaries by (session id, epoch, summary version)."""

    def notes(self, session: Session, message: Message) -> MessageNotes:
        """The extraction notes of a message, computed once per (session epoch, index)."""
        key = (session.session_id, session.epoch, message.index)
        notes = self._notes_cache.get(key)
        if notes is None:
            notes = self._notes_cache.put(key, message_notes(message))
        return notes

    def known(self, session: Session, version: int, summary: Summary) -> set[str]:
        """The facts a summary version already holds, computed once per version."""
        key = (session.session_id, session.epoch, version)
        seen = self._seen.get(key)
        if seen is None:
            seen = self._seen.put(key, known_facts(summary))
        return seen

    async def compact(self, session: Session, version: int, upto: int, last: int) -> tuple[int, Summary] | None:
        """Summarises messages upto+1..last into the persisted rolling summary. (version, summary),
        or None when another replica holds the lease or compacted first (the caller then renders
        the older turns from the summary it has, which covers the same messages)."""
        if last <= upto:
            return None
        token = await self.sessions.lease(session.session_id, self.settings.summary_timeout_s + 10)
        if token is None:
            return None
        try:
            previous = self.persisted.get((session.session_id, session.epoch, version)) if upto >= 0 else None
            if upto < 0 or previous is not None:
                # The commit below checks nothing moved since `upto`, so a cached summary is safe.
                messages = await self.sessions.messages(session.session_id, upto + 1, last)
            else:
                previous, version, messages = await self.sessions.summary_and_messages(
                    session.session_id, upto + 1, last
                )
            if (previous.last_index if previous is not None else -1) != upto or not messages:
                return None
            summary = await self._summarize(session, previous, version, messages)
            counter = counter_for(session.budget.encoding)
            summary = replace(summary, token_count=counter.count(summary.render()))
            new_version = await self.sessions.commit_summary(session.session_id, upto, summary)
            if new_version == 0:
                return None
            self.persisted.put((session.session_id, session.epoch, new_version), summary)
            if previous is not None and summary.summarizer == "extractive":
                # A rolling extractive summary only appends key data: extend the known facts.
                old = self._seen.get((session.session_id, session.epoch, version))
                if old is not None:
                    added = summary.key_data[len(previous.key_data) :]
                    self._seen.put(
                        (session.session_id, session.epoch, new_version),
                        old | known_facts(replace(summary, key_data=added)),
                    )
            log.info(
                "compacted session %s: messages %d-%d by %s, %d summary tokens",
                session.session_id, summary.first_index, summary.last_index, summary.summarizer, summary.token_count,
            )  # fmt: skip
            return new_version, summary
        finally:
            await self.sessions.release(session.session_id, token)

    async def _summarize(
        self, session: Session, previous: Summary | None, version: int, messages: list[Message]
    ) -> Summary:
        model = session.budget.summary_model
        if model and self.summary_model is not None:
            llm = LLMSummarizer(self.summary_model, model, timeout_s=self.settings.summary_timeout_s)
            try:
                return await llm.summarize(previous, messages, agent_id=session.agent_id)
            except SummaryRejectedError as exc:
                self.rejected_summaries += 1
                await self.sessions.count_rejection(session.session_id)
                log.warning(
                    "LLM summary of session %s rejected (%s); using the extractive one; missing: %s",
                    session.session_id, exc.reason, ", ".join(exc.missing[:20]),
                    extra={"session_id": session.session_id, "missing_facts": exc.missing[:50]},
                )  # fmt: skip
            except (AgentmeshError, TimeoutError, OSError) as exc:
                log.warning(
                    "LLM summarizer unavailable for session %s (%s); using the extractive one", session.session_id, exc
                )
        notes = [self.notes(session, m) for m in messages]
        seen = self.known(session, version, previous) if previous is not None else None
        return self.extractive.summarize(previous, notes, seen=seen)
