"""The context's recall with a hybrid retriever (issue 51): `Recall(retriever=...)` takes any `Retriever`,
and BM25 fused with the offline embedder finds the old turn a question asks about by meaning, where the
lexical recall finds nothing (no shared word)."""

from __future__ import annotations

from agentmesh.config import ContextSettings
from agentmesh.embeddings import CachedEmbedder, OfflineEmbedder
from agentmesh.semantic import Hybrid
from agentmesh.store import Store
from context_svc.engine import ContextEngine
from context_svc.model import Caller, Message, Role
from context_svc.recall import RECALL_HEADER, Recall
from tests.unit.context.test_issue37_window import chatter

OPERATOR = Caller("oncall", is_operator=True)
NEEDLE = "I am allergic to peanuts, they make me sick."
QUESTION = "Order me a snack with nuts"


async def _recalled(engine: ContextEngine, sid: str) -> str:
    await engine.create_session(OPERATOR, session_id=sid, goal="keep the conversation going")
    lines = [chatter(i) for i in range(120)]
    lines.insert(30, (Role.USER, NEEDLE))
    for role, text in [*lines, (Role.USER, QUESTION)]:
        await engine.append_message(OPERATOR, sid, Message(role, text))
    view = await engine.build_context(OPERATOR, sid, budget_tokens=1500)
    text = view.messages[1].content
    return text.split(RECALL_HEADER, 1)[1] if RECALL_HEADER in text else ""


async def test_a_hybrid_recall_finds_the_turn_by_meaning_where_bm25_does_not(store: Store) -> None:
    lexical = ContextEngine(ContextSettings(), store)
    assert NEEDLE not in await _recalled(lexical, "lex")
    hybrid = ContextEngine(ContextSettings(), store)
    embedder = CachedEmbedder(OfflineEmbedder())
    hybrid.assembly.recall = Recall(retriever=lambda: Hybrid[int](embedder, min_score=0.2))
    assert f"[#30 user] {NEEDLE}" in await _recalled(hybrid, "hyb")
