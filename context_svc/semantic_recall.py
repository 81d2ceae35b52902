"""Recall by words and meaning: BM25 and embeddings over a session's older turns (docs/design.md §4, issue 51).

`agentmesh.semantic.Hybrid` (BM25 fused with cosine by reciprocal rank) lost to BM25 alone on LoCoMo
(bench/RESULTS.md, issue 51: 16.9 % vs 21.2 % of evidence kept at 2k). On the tune half three causes
showed, each fixed here:

- The query. Recall asks with the newest user message *and the session's goal*; the goal ("Continue the
  conversation between A and B") and the speaker label of the message ("A: when did …") dominate a
  sentence embedding, so the cosine ranked turns by who speaks, not what about. The semantic side asks
  with the newest user message alone (`Recall` passes it as the focus), its leading speaker label
  removed (`strip_label`); BM25 still gets the whole query, where such words only cost their low idf.
- The unit. One chat turn is short ("Yes! Last week.") and means little alone: each turn is embedded
  together with the turn before it, the context a reader has (and the neighbour recall shows with it).
  The window looks back only, so a turn's vector never changes when later turns arrive.
- The fusion. Reciprocal rank gives the 100th cosine neighbour nearly the weight of the 100th BM25 hit,
  and a cosine ranking of several hundred chat turns is flat. Scores are fused instead: each side's
  scores over every candidate turn are standardised (z-scores; a turn BM25 does not match scores 0),
  then summed with the semantic side weighted `semantic_weight`. A strong word match still wins; among
  turns of similar word overlap, or where no word matches, meaning decides.

Turns are embedded lazily, in one batch (`prepare`, which `Recall` runs in a worker thread after a build
added the turns it never saw; a search embeds what is still pending), through the caller's `Embedder`
(a `CachedEmbedder` embeds a repeated text once). `context.turn_recall: fused` serves it
(`turn_retriever`); the default stays BM25 alone. A search
scans every candidate's vector (one matrix-vector product), so it costs O(turns) numpy work.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from agentmesh.config import ContextSettings
from agentmesh.embeddings import CachedEmbedder, Embedder, OfflineEmbedder
from agentmesh.retrieval import BM25, Hit, Retriever, tokenize
from agentmesh.semantic import VectorIndex

__all__ = ["SEMANTIC_WEIGHT", "TurnRetriever", "strip_label", "turn_retriever"]

SEMANTIC_WEIGHT = 1.0
"""The semantic z-score's weight beside BM25's (chosen on LoCoMo's tune half, bench/RESULTS.md)."""

_LABEL_RE = re.compile(r"^\s*[A-Z][\w'.-]*(?: [A-Z][\w'.-]*){0,2}:\s+")
"""A leading speaker label as chat transcripts write it: one to three capitalised words and a colon."""


def strip_label(text: str) -> str:
    """`text` without a leading speaker label ("Caroline: when did…" -> "when did…")."""
    stripped = _LABEL_RE.sub("", text, count=1)
    return stripped if stripped.strip() else text


def _z(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    spread = float(values.std())
    if spread <= 1e-12:
        return np.zeros_like(values)
    out: npt.NDArray[np.float64] = (values - values.mean()) / spread
    return out


class TurnRetriever:
    """BM25 and turn-window embeddings fused by standardised score (see the module docstring).

    Satisfies `Retriever[int]` (keys are message indexes, added in log order) and `Recall`'s
    `FocusedRetriever` (`search_focused`)."""

    def __init__(self, embedder: Embedder, *, semantic_weight: float = SEMANTIC_WEIGHT) -> None:
        self.embedder = embedder
        self.semantic_weight = semantic_weight
        self.lexical: BM25[int] = BM25()
        self.vectors: VectorIndex[int] = VectorIndex(embedder, min_score=-1.0)
        self._keys: list[int] = []
        self._texts: dict[int, str] = {}
        self._pending: list[tuple[int, str]] = []

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, key: int, text: str) -> None:
        if key in self._texts:
            return
        previous = self._texts.get(self._keys[-1]) if self._keys else None
        self._keys.append(key)
        self._texts[key] = text
        self.lexical.add(key, text)
        self._pending.append((key, f"{previous} {text}" if previous else text))

    def prepare(self) -> None:
        """Embeds the turns added since the last call, in one batch."""
        if self._pending:
            pending, self._pending = self._pending, []
            self.vectors.add_vectors([k for k, _ in pending], self.embedder.embed([t for _, t in pending]))

    def search(self, query: str, k: int, *, allow: Callable[[int], bool] | None = None) -> list[Hit[int]]:
        """Asked without a focus, the query's first line (the newest message) is the semantic query."""
        return self.search_focused(query, query.split("\n", 1)[0], k, allow=allow)

    def search_focused(
        self, query: str, focus: str, k: int, *, allow: Callable[[int], bool] | None = None
    ) -> list[Hit[int]]:
        """The `k` best turns: BM25 of `query` and cosine of `focus` (its speaker label off), fused."""
        if k <= 0 or not self._keys:
            return []
        keys = [key for key in self._keys if allow is None or allow(key)]
        semantic_query = strip_label(focus).strip()
        if not keys or not semantic_query or not self.semantic_weight:
            return self.lexical.search(query, k, allow=allow)
        lexical = self.lexical.scores(tokenize(query))
        total = _z(np.array([lexical.get(key, 0.0) for key in keys], dtype=np.float64))
        self.prepare()
        cosine = self.vectors.scores(self.embedder.embed([semantic_query])[0])
        total = total + self.semantic_weight * _z(np.array([cosine.get(key, 0.0) for key in keys]))
        width = min(k, len(keys))
        order = np.argsort(-total, kind="stable")[:width]
        return [Hit(keys[int(row)], float(total[row])) for row in order]


def turn_retriever(settings: ContextSettings) -> Callable[[], Retriever[int]]:
    """The retriever factory of `context.turn_recall`: BM25, or a `TurnRetriever` per session sharing one
    cached offline embedder (the model loads on the first fused search of the process, ~3 s)."""
    if settings.turn_recall != "fused":
        return BM25
    embedder = CachedEmbedder(OfflineEmbedder())
    return lambda: TurnRetriever(embedder)
