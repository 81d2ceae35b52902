"""Hybrid lexical + embedding ranking for bench_discovery (issue 51): tool_svc/semantic_discovery.py's
`HybridToolIndex` (what `tools.discovery: hybrid` serves), over the offline multilingual embedder.

Every text is embedded once per run (a content cache), ~3,500 texts (~10 s on one core).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agentmesh.embeddings import CachedEmbedder, Embedder, OfflineEmbedder
from tool_svc.discovery import Weights
from tool_svc.model import ToolDef
from tool_svc.semantic_discovery import HybridToolIndex, tool_text

__all__ = ["Hybrid"]


class Hybrid:
    """Rankers (per question and pooled) of `HybridToolIndex` at a semantic weight."""

    def __init__(self, embedder: Embedder | None = None) -> None:
        self.embedder = CachedEmbedder(embedder or OfflineEmbedder())

    def warm(self, tools: Sequence[ToolDef], queries: Sequence[str]) -> None:
        """Embeds every text of the run once, in large batches."""
        texts = list(dict.fromkeys([tool_text(t) for t in tools] + [q[:2000] for q in queries]))
        for start in range(0, len(texts), 256):
            self.embedder.embed(texts[start : start + 256])

    def ranker(self, weights: Weights, semantic_weight: float) -> Callable[[Sequence[ToolDef], str], list[str]]:
        def rank(tools: Sequence[ToolDef], query: str) -> list[str]:
            index = HybridToolIndex(tools, self.embedder, weights, semantic_weight=semantic_weight)
            return [s.tool.name for s in index.search(query, len(tools))]

        return rank

    def pooled(
        self, weights: Weights, semantic_weight: float
    ) -> Callable[[Sequence[ToolDef]], Callable[[str], list[str]]]:
        def build(tools: Sequence[ToolDef]) -> Callable[[str], list[str]]:
            index = HybridToolIndex(tools, self.embedder, weights, semantic_weight=semantic_weight)
            return lambda query: [s.tool.name for s in index.search(query, 50)]

        return build
