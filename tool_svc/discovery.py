"""DiscoverTools: BM25 over each tool's name, description and examples (docs/architecture.md §5).

The ranking is the shared one (`agentmesh.retrieval`: stemmed Latin words, CJK character bigrams),
the one context_svc ranks older turns with. The index is rebuilt only when the registry changes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agentmesh.retrieval import BM25, tokenize
from tool_svc.model import ToolDef

__all__ = ["DEFAULT_K", "MAX_K", "Discovery", "Scored", "ToolIndex", "tokenize"]

DEFAULT_K = 5
MAX_K = 50


def document(tool: ToolDef) -> str:
    """The text a tool is found by."""
    return " ".join([tool.name, tool.name.replace("_", " "), tool.description, *tool.examples])


@dataclass(frozen=True)
class Scored:
    tool: ToolDef
    score: float


class ToolIndex:
    """A BM25 index over a set of tools."""

    def __init__(self, tools: Sequence[ToolDef]) -> None:
        self.tools = list(tools)
        self._bm25: BM25[int] | None = None
        if self.tools:
            self._bm25 = BM25()
            for position, tool in enumerate(self.tools):
                self._bm25.add_tokens(position, tokenize(document(tool)) or ["_"])

    def search(self, goal: str, k: int = DEFAULT_K, allow: Callable[[ToolDef], bool] | None = None) -> list[Scored]:
        """The k best tools for `goal`, best first (ties by name); `allow` filters (e.g. permitted only)."""
        k = DEFAULT_K if k <= 0 else min(k, MAX_K)
        if self._bm25 is None:
            return []
        query = tokenize(goal)
        scores = self._bm25.scores(query)
        ranked = sorted(
            (Scored(tool, scores.get(position, 0.0)) for position, tool in enumerate(self.tools)),
            key=lambda s: (-s.score, s.tool.name),
        )
        if allow is not None:
            ranked = [s for s in ranked if allow(s.tool)]
        return ranked[:k]


class Discovery:
    """Keeps a ToolIndex in step with a registry's version."""

    def __init__(self) -> None:
        self._index: ToolIndex | None = None
        self._version = -1

    def index(self, version: int, tools: Callable[[], Sequence[ToolDef]]) -> ToolIndex:
        if self._index is None or version != self._version:
            self._index = ToolIndex(tools())
            self._version = version
        return self._index
