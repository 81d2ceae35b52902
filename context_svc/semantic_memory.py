"""Semantic long-term memory recall (issue 51): records found by meaning, hybrid with the lexical ranking.

`SemanticMemoryRecall` implements `memory.MemoryRecall`. A record's relevance to the query is its cosine
with the query (vectors of `agentmesh.embeddings`, the offline multilingual model by default) plus half
its BM25 score relative to the best lexical match; a record is a candidate when its cosine reaches
`min_score` or it shares a word with the query, so "以后发票都用欧元" is recalled for "Make an invoice for
ACME" (no shared word) and lexical exact matches still count. The relevance is weighted by recency as
in `LexicalMemoryRecall` (a record `half_life_days` old counts 3/4, a very old one 1/2).

Vectors are kept per subject (subject -> memory id -> (text hash, vector)) in a bounded LRU, so a build
embeds only records it never saw and the query (the newest user turn, also kept per subject); `forget_memory`
and `forget_subject` drop them with the records (a user's erasure leaves no vector in the process).
`prepare` embeds what is missing in a worker thread (a first build over 500 records is ~0.7 s of CPU),
so `rank` on the event loop only multiplies vectors.

The min score 0.25 comes from the offline model's cosines on short statements: an English or Chinese
request and a preference on its topic 0.25-0.55, unrelated topics below 0.2 (docs/memory.md).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from agentmesh.embeddings import Embedder, Vectors
from agentmesh.retrieval import BM25, tokenize
from context_svc.lru import LRU
from context_svc.memory import MemoryRecord, RankedMemory, Subject

__all__ = ["ErasableRecall", "SemanticMemoryRecall"]

_DAY_S = 86400.0
_SUBJECTS = 2048
_QUERIES = 8


@runtime_checkable
class ErasableRecall(Protocol):
    """A recall that keeps derived state per record (vectors): prepared before ranking, erased with it."""

    async def prepare(self, records: Sequence[MemoryRecord], query: str) -> None:
        """Computes, off the event loop, what `rank` will need for these records and this query."""

    def forget_memory(self, subject: Subject, memory_id: str) -> None:
        """Drops everything kept for one record of `subject`."""

    def forget_subject(self, subject: Subject) -> None:
        """Drops everything kept for a subject's records and queries."""


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class _Kept:
    """One subject's vectors: its records' (memory id -> (text hash, vector)) and its recent queries'."""

    def __init__(self) -> None:
        self.records: dict[str, tuple[str, Vectors]] = {}
        self.queries: LRU[str, Vectors] = LRU(_QUERIES)


class SemanticMemoryRecall:
    """Cosine + lexical relevance, times recency (see the module docstring); a `MemoryRecall`."""

    def __init__(
        self,
        embedder: Embedder,
        *,
        half_life_days: float = 30.0,
        min_score: float = 0.25,
        lexical_weight: float = 0.5,
        subjects: int = _SUBJECTS,
    ) -> None:
        self.embedder = embedder
        self.half_life_days = half_life_days
        self.min_score = min_score
        self.lexical_weight = lexical_weight
        self._kept: LRU[Subject, _Kept] = LRU(subjects)

    def _missing(self, records: Sequence[MemoryRecord], query: str) -> tuple[list[MemoryRecord], bool]:
        """The records whose vector is not kept (or whose text changed), and whether the query's is missing."""
        if not records:
            return [], False
        kept = self._kept.get(records[0].subject)
        if kept is None:
            return list(records), bool(query)
        missing = [r for r in records if kept.records.get(r.memory_id, ("",))[0] != _digest(r.text)]
        return missing, bool(query) and kept.queries.get(_digest(query)) is None

    def _embed(self, records: Sequence[MemoryRecord], query: str) -> None:
        missing, need_query = self._missing(records, query)
        if not missing and not need_query:
            return
        texts = [r.text for r in missing] + ([query] if need_query else [])
        vectors = self.embedder.embed(texts)
        by_subject: dict[Subject, _Kept] = {}
        for record, vector in zip(missing, vectors, strict=False):
            kept = by_subject.get(record.subject) or self._kept.get(record.subject)
            if kept is None:
                kept = self._kept.put(record.subject, _Kept())
            by_subject[record.subject] = kept
            kept.records[record.memory_id] = (_digest(record.text), vector)
        if need_query:
            subject = records[0].subject
            kept = self._kept.get(subject) or self._kept.put(subject, _Kept())
            kept.queries.put(_digest(query), vectors[-1])

    async def prepare(self, records: Sequence[MemoryRecord], query: str) -> None:
        missing, need_query = self._missing(records, query)
        if missing or need_query:
            await asyncio.to_thread(self._embed, records, query)

    def rank(self, records: Sequence[MemoryRecord], query: str, *, now: float, limit: int) -> list[RankedMemory]:
        active = [r for r in records if r.active(now)]
        if not active or limit <= 0 or not query.strip():
            return []
        self._embed(active, query)
        kept = self._kept.get(active[0].subject)
        query_vector = kept.queries.get(_digest(query)) if kept is not None else None
        if kept is None or query_vector is None:
            return []
        matrix = np.stack([kept.records[r.memory_id][1] for r in active])
        cosines = matrix @ query_vector
        lexical = BM25[str]((r.memory_id, r.text) for r in active).scores(tokenize(query))
        best_lexical = max(lexical.values(), default=0.0)
        ranked = []
        for record, cosine in zip(active, cosines, strict=True):
            words = lexical.get(record.memory_id, 0.0)
            if cosine < self.min_score and words <= 0:
                continue
            relevance = max(float(cosine), 0.0) + (self.lexical_weight * words / best_lexical if words > 0 else 0.0)
            age_days = max(0.0, now - record.created_at) / _DAY_S
            recency = 0.5 ** (age_days / self.half_life_days)
            ranked.append(RankedMemory(record, relevance * (0.5 + 0.5 * recency)))
        ranked.sort(key=lambda m: (-m.score, -m.record.created_at, m.record.memory_id))
        return ranked[:limit]

    def forget_memory(self, subject: Subject, memory_id: str) -> None:
        kept = self._kept.get(subject)
        if kept is not None:
            kept.records.pop(memory_id, None)

    def forget_subject(self, subject: Subject) -> None:
        self._kept.forget(subject)

    def vectors_of(self, subject: Subject) -> int:
        """Vectors kept for `subject` (its records' and queries'): what an erasure must bring to 0."""
        kept = self._kept.get(subject)
        return 0 if kept is None else len(kept.records) + len(kept.queries)
