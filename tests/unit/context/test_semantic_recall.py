"""Recall by words and meaning (context_svc/semantic_recall.py, issue 51): each turn is embedded with the
turn before it, lazily and in one batch; the semantic query is the newest message alone without its
speaker label (never the goal); BM25 and cosine are fused by standardised score; `Recall` hands a
`FocusedRetriever` the newest message."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import pytest

from agentmesh.config import ContextSettings
from agentmesh.embeddings import CachedEmbedder, OfflineEmbedder
from agentmesh.retrieval import BM25, Hit
from agentmesh.store import Store
from context_svc.engine import ContextEngine
from context_svc.model import Caller, Message, Role
from context_svc.recall import RECALL_HEADER, FocusedRetriever, Recall
from context_svc.semantic_recall import TurnRetriever, strip_label, turn_retriever
from tests.unit.context.test_issue37_window import chatter
from tests.unit.test_embeddings import HashEmbedder

OPERATOR = Caller("oncall", is_operator=True)
NEEDLE = "I am allergic to peanuts, they make me sick."
QUESTION = "Caroline: Order me a snack with nuts"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Caroline: when did you paint?", "when did you paint?"),
        ("Mary Ann Smith: hello there", "hello there"),
        ("when did you paint?", "when did you paint?"),
        ("Caroline:", "Caroline:"),  # nothing but the label: kept
        ("see http://x.y: no label", "see http://x.y: no label"),
    ],
)
def test_strip_label(text: str, expected: str) -> None:
    assert strip_label(text) == expected


def test_each_turn_is_embedded_with_the_one_before_lazily_in_one_batch() -> None:
    embedder = HashEmbedder()
    retriever = TurnRetriever(embedder)
    for key, text in enumerate(["red apples", "green pears", "blue plums"]):
        retriever.add(key, text)
    retriever.add(1, "ignored: a key is added once")
    assert embedder.calls == []
    retriever.search_focused("pears", "Bob: pears", 3)
    assert embedder.calls == [["red apples", "red apples green pears", "green pears blue plums"], ["pears"]]
    assert len(retriever) == 3


def test_the_semantic_query_is_the_focus_and_a_plain_search_uses_the_first_line() -> None:
    embedder = HashEmbedder()
    retriever = TurnRetriever(embedder)
    retriever.add(0, "red apples")
    retriever.search("Ann: ripe apples\nthe session goal", 5)
    assert embedder.calls[-1] == ["ripe apples"]


def test_fused_ranking_lifts_a_turn_near_in_meaning_and_filters() -> None:
    embedder = HashEmbedder()
    retriever = TurnRetriever(embedder, semantic_weight=1.0)
    turns = ["the weather is fine", "lunch was pasta", "my sister paints", "the train was late"]
    for key, text in enumerate(turns):
        retriever.add(key, text)
    hits = retriever.search_focused("what does she paint", "what does she paint", 4)
    assert hits[0].key == 2
    assert all(h.key != 2 for h in retriever.search_focused("paint", "paint", 4, allow=lambda k: k != 2))
    assert retriever.search_focused("paint", "paint", 0) == []


def test_without_a_semantic_query_it_is_bm25() -> None:
    turns = ["the weather is fine", "lunch was pasta", "pasta again"]
    retriever = TurnRetriever(HashEmbedder(), semantic_weight=0.0)
    bm25: BM25[int] = BM25(enumerate(turns))
    for key, text in enumerate(turns):
        retriever.add(key, text)
    assert retriever.search_focused("pasta", "pasta", 5) == bm25.search("pasta", 5)
    assert TurnRetriever(HashEmbedder()).search_focused("pasta", "pasta", 5) == []


class Recording(TurnRetriever):
    focuses: ClassVar[list[str]] = []

    def search_focused(
        self, query: str, focus: str, k: int, *, allow: Callable[[int], bool] | None = None
    ) -> list[Hit[int]]:
        self.focuses.append(focus)
        return super().search_focused(query, focus, k, allow=allow)


async def test_recall_finds_the_turn_by_meaning_asking_with_the_newest_message(store: Store) -> None:
    engine = ContextEngine(ContextSettings(), store)
    embedder = CachedEmbedder(OfflineEmbedder())
    engine.assembly.recall = Recall(retriever=lambda: Recording(embedder))
    sid = "fused"
    await engine.create_session(OPERATOR, session_id=sid, goal="Continue the conversation between Caroline and Mel")
    lines = [chatter(i) for i in range(120)]
    lines.insert(30, (Role.USER, NEEDLE))
    for role, text in [*lines, (Role.USER, QUESTION)]:
        await engine.append_message(OPERATOR, sid, Message(role, text))
    view = await engine.build_context(OPERATOR, sid, budget_tokens=1500)
    text = view.messages[1].content
    assert isinstance(Recording(embedder), FocusedRetriever)
    assert Recording.focuses and set(Recording.focuses) == {QUESTION}
    assert f"[#30 user] {NEEDLE}" in text.split(RECALL_HEADER, 1)[1]


def test_the_setting_picks_the_retriever(store: Store) -> None:
    assert isinstance(turn_retriever(ContextSettings())(), BM25)
    fused = turn_retriever(ContextSettings(turn_recall="fused"))
    first, second = fused(), fused()
    assert isinstance(first, TurnRetriever) and isinstance(second, TurnRetriever) and first is not second
    assert first.embedder is second.embedder  # one cache of vectors for every session
    recall = ContextEngine(ContextSettings(turn_recall="fused"), store).assembly.recall
    assert isinstance(recall._retriever(), TurnRetriever)
