"""Hybrid lexical + embedding ranking for bench_discovery (issue 51): DiscoverTools' BM25 ranking fused with
the offline multilingual embedder's cosine by weighted reciprocal rank (agentmesh/semantic.py `fuse`).

A tool is embedded as its split name, description and parameter names ("get weather: Get the current
weather ... location unit"); a question as its user text. Every text is embedded once per run (the content
cache), so the whole bench embeds ~3,500 texts (~10 s on one core).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from agentmesh.embeddings import CachedEmbedder, Embedder, OfflineEmbedder, Vectors
from agentmesh.retrieval import Hit
from agentmesh.semantic import fuse
from tool_svc.discovery import ToolIndex, Weights, split_identifier
from tool_svc.model import ToolDef

__all__ = ["Hybrid", "tool_text"]

_QUERY_CHARS = 2000


def tool_text(tool: ToolDef) -> str:
    """What a tool is embedded as: its split name, description and parameter names."""
    properties = tool.input_schema.get("properties") if isinstance(tool.input_schema, dict) else None
    parameters = " ".join(str(p) for p in properties) if isinstance(properties, dict) else ""
    return f"{split_identifier(tool.name)}: {tool.description} {split_identifier(parameters)}".strip()


class Hybrid:
    """Rankers (per question and pooled) fusing BM25 with cosine at `semantic_weight` (lexical weight 1)."""

    def __init__(self, embedder: Embedder | None = None) -> None:
        self.embedder = CachedEmbedder(embedder or OfflineEmbedder())

    def warm(self, tools: Sequence[ToolDef], queries: Sequence[str]) -> None:
        """Embeds every text of the run once, in large batches."""
        texts = list(dict.fromkeys([tool_text(t) for t in tools] + [q[:_QUERY_CHARS] for q in queries]))
        for start in range(0, len(texts), 256):
            self.embedder.embed(texts[start : start + 256])

    def _vectors(self, tools: Sequence[ToolDef]) -> Vectors:
        return self.embedder.embed([tool_text(t) for t in tools])

    def _query(self, query: str) -> Vectors:
        vector: Vectors = self.embedder.embed([query[:_QUERY_CHARS]])[0]
        return vector

    def _fused(self, index: ToolIndex, vectors: Vectors, query: str, k: int, semantic_weight: float) -> list[ToolDef]:
        tools = index.tools
        position = {id(t): i for i, t in enumerate(tools)}
        lexical = [Hit(position[id(s.tool)], s.score) for s in index.search(query, k) if s.score > 0]
        cosines = vectors @ self._query(query)
        order = np.argsort(-cosines, kind="stable")[:k]
        semantic = [Hit(int(i), float(cosines[i])) for i in order]
        fused = fuse([(1.0, lexical), (semantic_weight, semantic)], k)
        return [tools[h.key] for h in fused]

    def ranker(self, weights: Weights, semantic_weight: float) -> Callable[[Sequence[ToolDef], str], list[str]]:
        def rank(tools: Sequence[ToolDef], query: str) -> list[str]:
            index = ToolIndex(tools, weights)
            ranked = self._fused(index, self._vectors(tools), query, len(tools), semantic_weight)
            return [t.name for t in ranked]

        return rank

    def pooled(
        self, weights: Weights, semantic_weight: float
    ) -> Callable[[Sequence[ToolDef]], Callable[[str], list[str]]]:
        def build(tools: Sequence[ToolDef]) -> Callable[[str], list[str]]:
            index = ToolIndex(tools, weights)
            vectors = self._vectors(tools)
            return lambda query: [t.name for t in self._fused(index, vectors, query, 50, semantic_weight)]

        return build
