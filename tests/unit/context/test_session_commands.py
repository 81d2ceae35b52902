"""What an append and a load cost Redis (issue 45): the session's TTLs are refreshed together, by the
append that creates a key or once per TTL_REFRESH_S, not by every append; a load of a session without
a summary reads neither the summary nor the log's length (the meta it reads holds both)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from agentmesh.chat import ToolCall
from agentmesh.config import ContextSettings
from agentmesh.store import Store
from context_svc.engine import ContextEngine
from context_svc.model import Caller, Message, Role, ToolOutcome
from context_svc.sessions import SessionStore

OPERATOR = Caller("oncall", is_operator=True)


async def commands(store: Store) -> Counter[str]:
    stats: Any = await store.redis.info("commandstats")
    return Counter({name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()})


async def spent(store: Store, before: Counter[str]) -> Counter[str]:
    used = await commands(store) - before
    used["info"] -= 1  # our own INFO
    return +used


async def test_only_the_append_that_creates_a_key_refreshes_the_ttls(store: Store) -> None:
    engine = ContextEngine(ContextSettings(), store)
    await engine.create_session(OPERATOR, session_id="s1", goal="g")
    await engine.append_message(OPERATOR, "s1", Message(Role.USER, "hello"))  # caches what the append reads
    before = await commands(store)
    await engine.append_message(OPERATOR, "s1", Message(Role.USER, "again"))
    assert (await spent(store, before))["expire"] == 0
    before = await commands(store)
    await engine.append_message_once(OPERATOR, "s1", Message(Role.USER, "first named"), client_message_id="m-1")
    assert (await spent(store, before))["expire"] == 6  # the dedupe hash is new: every key, together
    before = await commands(store)
    await engine.append_message_once(OPERATOR, "s1", Message(Role.USER, "second named"), client_message_id="m-2")
    assert (await spent(store, before))["expire"] == 0
    ttls = {part: await store.redis.ttl(f"am:sess:{{s1}}:{part}") for part in ("meta", "log", "idx", "dedupe")}
    assert all(ttl > 0 for ttl in ttls.values()) and max(ttls.values()) - min(ttls.values()) <= 1, ttls


async def test_a_load_without_a_summary_reads_neither_it_nor_the_log_length(store: Store) -> None:
    engine = ContextEngine(ContextSettings(), store)
    await engine.create_session(OPERATOR, session_id="s1", goal="g")
    for text in ("one", "two", "three"):
        await engine.append_message(OPERATOR, "s1", Message(Role.USER, text))
    sessions = SessionStore(store)  # a fresh process's: nothing cached
    before = await commands(store)
    loaded = await sessions.load("s1")
    used = await spent(store, before)
    assert used["llen"] == 0 and used["hmget"] == 1, used
    assert len(loaded.entries) == 3 and loaded.summary_version == 0 and loaded.session.message_count == 3


async def test_the_first_append_after_create_does_not_read_the_session_first(store: Store) -> None:
    engine = ContextEngine(ContextSettings(), store)
    await engine.create_session(OPERATOR, session_id="s1", goal="g")
    before = await commands(store)
    await engine.append_message(OPERATOR, "s1", Message(Role.USER, "hello"))
    used = await spent(store, before)
    assert used["evalsha"] == 1 and used["hmget"] == 1, used  # the append script's own read only


async def test_a_named_append_claims_its_dedupe_entry_in_one_command(store: Store) -> None:
    """HSETNX at the index the message takes, instead of HGET then HSET; a repeat still finds it."""
    engine = ContextEngine(ContextSettings(), store)
    await engine.create_session(OPERATOR, session_id="s1", goal="g")
    first = await engine.append_message_once(OPERATOR, "s1", Message(Role.USER, "first"), client_message_id="m-1")
    before = await commands(store)
    second = await engine.append_message_once(OPERATOR, "s1", Message(Role.USER, "second"), client_message_id="m-2")
    used = await spent(store, before)
    assert used["hsetnx"] == 1 and used["hget"] == 0 and used["hset"] == 1, used  # the meta's HSET
    again = await engine.append_message_once(OPERATOR, "s1", Message(Role.USER, "second"), client_message_id="m-2")
    assert again.index == second.index and again.already
    entries = await store.redis.hvals(engine.sessions.key("s1", "dedupe"))
    indexes = sorted(int(json.loads(e)["i"]) for e in entries)
    assert indexes == [first.index, second.index]


def _reply(*call_ids: str) -> Message:
    return Message(Role.ASSISTANT, "", tool_calls=tuple(ToolCall(c, "lookup", '{"id": 42}') for c in call_ids))


async def test_a_reply_and_its_results_are_one_script_reading_and_writing_the_meta_once(store: Store) -> None:
    """Issue 45: AppendMessage with following_results appends them all, and loads the view, in one
    EVALSHA; the session's meta hash is read by one HMGET and written by one HSET for all of them."""
    engine = ContextEngine(ContextSettings(), store)
    await engine.create_session(OPERATOR, session_id="s1", goal="g")
    await engine.append_message(OPERATOR, "s1", Message(Role.USER, "where is order 42?"))
    warm = [ToolOutcome("c0", "lookup", inline="found")]  # the script loaded, the dedupe hash made
    await engine.append_message_with_results(OPERATOR, "s1", _reply("c0"), warm, client_message_id="t:0", build=0)
    results = [ToolOutcome("c1", "lookup", inline="order 42: paid"), ToolOutcome("c2", "lookup", inline="in transit")]
    before = await commands(store)
    appended, following, view = await engine.append_message_with_results(
        OPERATOR, "s1", _reply("c1", "c2"), results, client_message_id="t:1:reply", build=0
    )
    used = await spent(store, before)
    # One HSET of the meta, one of the reply's label (its calls state id=42: facts/entities.py).
    assert used["evalsha"] == 1 and used["hmget"] == 1 and used["hset"] == 2, used
    assert used["hsetnx"] == 3, used  # one dedupe claim each
    assert used["rpush"] == 2, used  # the three messages: one RPUSH to the log, one to its index
    assert used["expire"] == 0, used  # every key existed: no TTL refresh
    assert used["hgetall"] == 1, used  # the owner's memories; the entities are held, not read again
    assert (appended.index, [f.index for f in following]) == (3, [4, 5])
    assert view is not None
    # The view is what a process holding nothing of the session builds (the snapshot was extended right).
    fresh = await ContextEngine(ContextSettings(), store).build_context(OPERATOR, "s1")
    assert [m.content for m in view.messages] == [m.content for m in fresh.messages]
    assert [m.tool_call_id for m in view.messages if m.role is Role.TOOL] == ["c0", "c1", "c2"]
    meta: Any = await store.redis.hgetall("am:sess:{s1}:meta")
    assert int(meta[b"message_count"]) == 6 == await store.redis.llen("am:sess:{s1}:log")
    assert int(meta[b"total_tokens"]) == sum(m.token_count for m in fresh.messages if m.role is not Role.SYSTEM)


async def test_a_repeated_reply_with_a_new_result_appends_only_the_result(store: Store) -> None:
    """The reply found under its id (the answer was lost), its next result new: one script still, the
    found reply answered as a repeat, the result appended after it, the view as a fresh process's."""
    engine = ContextEngine(ContextSettings(), store)
    await engine.create_session(OPERATOR, session_id="s1", goal="g")
    first = ToolOutcome("c1", "lookup", inline="order 42: paid")
    reply = _reply("c1", "c2")
    await engine.append_message_with_results(OPERATOR, "s1", reply, [first], client_message_id="r", build=0)
    second = ToolOutcome("c2", "lookup", inline="in transit")
    appended, following, view = await engine.append_message_with_results(
        OPERATOR, "s1", _reply("c1", "c2"), [first, second], client_message_id="r", build=0
    )
    assert appended.already and [(f.index, f.already) for f in following] == [(1, True), (2, False)]
    assert view is not None
    fresh = await ContextEngine(ContextSettings(), store).build_context(OPERATOR, "s1")
    assert [m.content for m in view.messages] == [m.content for m in fresh.messages]
    assert await store.redis.llen("am:sess:{s1}:log") == 3


async def test_a_result_appended_before_its_reply_is_found_after_the_reply_is_pushed(store: Store) -> None:
    """The reply's entries wait for one RPUSH per list; a result found under its dedupe key makes the script
    push what waits first (the log's order and length stay what one append at a time gives)."""
    engine = ContextEngine(ContextSettings(), store)
    await engine.create_session(OPERATOR, session_id="s1", goal="g")
    first = ToolOutcome("c1", "lookup", inline="order 42: paid")
    earlier = await engine.append_tool_result_once(OPERATOR, "s1", first)  # AppendToolResult, before the reply
    await engine.append_message_with_results(OPERATOR, "s1", _reply("c0"), [], client_message_id="warm", build=0)
    second = ToolOutcome("c2", "lookup", inline="in transit")
    before = await commands(store)
    appended, following, view = await engine.append_message_with_results(
        OPERATOR, "s1", _reply("c1", "c2"), [first, second], client_message_id="r", build=0
    )
    used = await spent(store, before)
    assert used["evalsha"] == 1 and used["rpush"] == 4, used  # the reply pushed before the lookup, then c2
    # The log: c1 (0), the warm reply (1), this reply (2), c2 (3); the goal is not in the log.
    assert earlier.index == 0 and not appended.already and appended.index == 2
    assert [(f.index, f.already) for f in following] == [(0, True), (3, False)]
    log = [json.loads(raw) for raw in await store.redis.lrange("am:sess:{s1}:log", 0, -1)]
    assert [(entry["r"], entry.get("id")) for entry in log] == [
        ("tool", "c1"),
        ("assistant", None),
        ("assistant", None),
        ("tool", "c2"),
    ], log
    assert [c[0] for c in log[2]["tc"]] == ["c1", "c2"]
    meta: Any = await store.redis.hgetall("am:sess:{s1}:meta")
    assert int(meta[b"message_count"]) == 4 == await store.redis.llen("am:sess:{s1}:idx")
    assert view is not None
    fresh = await ContextEngine(ContextSettings(), store).build_context(OPERATOR, "s1")
    assert [m.content for m in view.messages] == [m.content for m in fresh.messages]


async def test_a_reply_with_thousands_of_results_appends_every_one(store: Store) -> None:
    """More messages in one script than Lua unpacks at once (~8,000 values): the pushes go in chunks and the
    meta's repeated fields are written once each; the log, its index and message_count agree."""
    engine = ContextEngine(ContextSettings(), store)
    await engine.create_session(OPERATOR, session_id="s1", goal="g")
    await engine.append_message(OPERATOR, "s1", Message(Role.USER, "look them all up"))
    ids = [f"c{i}" for i in range(3000)]
    results = [ToolOutcome(call_id, "lookup", inline="ok") for call_id in ids]
    appended, following, _ = await engine.append_message_with_results(
        OPERATOR, "s1", _reply(*ids), results, client_message_id="r", build=0
    )
    assert appended.index == 1 and [f.index for f in following] == list(range(2, 3002))
    assert await store.redis.llen("am:sess:{s1}:log") == 3002 == await store.redis.llen("am:sess:{s1}:idx")
    meta: Any = await store.redis.hgetall("am:sess:{s1}:meta")
    assert int(meta[b"message_count"]) == 3002
