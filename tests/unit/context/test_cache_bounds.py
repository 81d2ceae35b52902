"""Every in-process cache of the context engine has a configured bound and keeps to it (issue 19).

The caches (docs/design.md §4) and their `context:` keys:
- session_cache_entries: loaded session snapshots and their keys (sessions.py), encodings (engine.py);
- summary_cache_entries: persisted summaries and their facts (compaction.py), rendered summary
  views and summary payload refs (assembly.py);
- message_cache_entries: extraction notes per message (compaction.py);
- token_cache_entries: token counts per text (assembly.py).
"""

from __future__ import annotations

from collections.abc import Sized

from agentmesh.config import ContextSettings
from agentmesh.store import Store
from context_svc.engine import ContextEngine
from context_svc.lru import LRU
from tests.unit.context.test_engine import OPERATOR, play

BOUNDS = {
    "session_cache_entries": 3,
    "summary_cache_entries": 2,
    "message_cache_entries": 10,
    "token_cache_entries": 5,
}
SESSIONS = 6


def caches(engine: ContextEngine) -> dict[str, tuple[Sized, int]]:
    """Every per-process cache of the engine -> (the cache, its configured bound)."""
    s = engine.settings
    return {
        "sessions.known": (engine.sessions._known, s.session_cache_entries),
        "sessions.key_cache": (engine.sessions._key_cache, s.session_cache_entries),
        "engine.encodings": (engine.appends.encodings, s.session_cache_entries),
        "compaction.persisted": (engine.compaction.persisted, s.summary_cache_entries),
        "compaction.seen": (engine.compaction._seen, s.summary_cache_entries),
        "assembly.summary_views": (engine.assembly.summaries._views, s.summary_cache_entries),
        "assembly.persisted_refs": (engine.assembly.summaries._persisted_refs, s.summary_cache_entries),
        "compaction.notes": (engine.compaction._notes_cache, s.message_cache_entries),
        "assembly.tokens": (engine.assembly.counts.counts, s.token_cache_entries),
    }


def test_the_defaults_bound_every_cache() -> None:
    settings = ContextSettings()
    assert (
        settings.session_cache_entries,
        settings.summary_cache_entries,
        settings.message_cache_entries,
        settings.token_cache_entries,
    ) == (2000, 1024, 50_000, 8192)


async def test_caches_filled_past_their_bound_keep_their_size(store: Store) -> None:
    engine = ContextEngine(ContextSettings(summary_trigger_tokens=300, keep_recent_messages=4, **BOUNDS), store)
    # Real traffic: more sessions than the session bound, each long enough to be compacted.
    for i in range(SESSIONS):
        session = f"s{i}"
        await engine.create_session(OPERATOR, session_id=session, goal=f"goal {i}")
        await play(engine, session, 12, seed=i)
        assert (await engine.build_context(OPERATOR, session, budget_tokens=2000)).compacted
        await engine.build_context(OPERATOR, session, budget_tokens=1500)
    for name, (cache, bound) in caches(engine).items():
        assert len(cache) <= bound, f"{name}: {len(cache)} entries, bound {bound}"
    # The per-session snapshot, encodings, notes and token counts saw more keys than their bound.
    for name in ("sessions.known", "engine.encodings", "compaction.notes", "assembly.tokens"):
        cache, bound = caches(engine)[name]
        assert len(cache) == bound, name

    # Every LRU, filled directly far past its bound, stays at it.
    for name, (cache, bound) in caches(engine).items():
        if isinstance(cache, LRU):
            for key in range(bound * 3):
                cache.put(("filler", name, key), object())
            assert len(cache) == bound, name
    # And the engine still answers from Redis what its caches dropped.
    view = await engine.build_context(OPERATOR, "s0", budget_tokens=2000)
    assert view.messages and view.total_tokens <= 2000


def test_the_servicers_protobuf_message_cache_keeps_its_bound() -> None:
    from agentmesh.chat import Role
    from context_svc.model import Message
    from context_svc.server import ContextServicer

    servicer = ContextServicer(engine=None, message_cache_entries=3)  # type: ignore[arg-type]
    for index in range(10):
        servicer.messages.pb(Message(Role.USER, f"turn {index}", index=index))
    assert len(servicer.messages._data) == 3
