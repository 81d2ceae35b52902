"""DiscoverTools: BM25 over each tool's name, description and examples (docs/architecture.md §5).

Tokens: Latin words are lower-cased, stop words dropped and stemmed (Snowball English), so "restarting"
finds "restart"; Chinese (CJK) runs become character bigrams (a single character stays a unigram),
since Chinese has no spaces. The index is rebuilt only when the registry changes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import snowballstemmer  # type: ignore[import-untyped, unused-ignore]
from rank_bm25 import BM25Okapi  # type: ignore[import-untyped, unused-ignore]

from tool_svc.model import ToolDef

DEFAULT_K = 5
MAX_K = 50

_TOKEN_RE = re.compile(r"[a-z0-9]+|[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_CJK_RE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_STOP_WORDS_TEXT = """a an the and or of to in on at for from by with without is are was were be been being it its
this that these those i me my we our you your he she they them their what which who whom whose when where why how
do does did done can could should would will shall may might must use used using please want need get give show
tell let into about as than then there here if so not no yes all any some"""
_STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())
_STEMMER = snowballstemmer.stemmer("english")


def tokenize(text: str) -> list[str]:
    """BM25 tokens of `text`: stemmed Latin words and CJK character bigrams."""
    tokens: list[str] = []
    for match in _TOKEN_RE.finditer(text.lower().replace("_", " ").replace("-", " ")):
        run = match.group(0)
        if _CJK_RE.match(run):
            if len(run) == 1:
                tokens.append(run)
            else:
                tokens.extend(run[i : i + 2] for i in range(len(run) - 1))
        elif run not in _STOP_WORDS and (len(run) > 1 or run.isdigit()):
            tokens.append(_STEMMER.stemWord(run))
    return tokens


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
        corpus = [tokenize(document(tool)) or ["_"] for tool in self.tools]
        self._bm25 = BM25Okapi(corpus) if corpus else None

    def search(self, goal: str, k: int = DEFAULT_K, allow: Callable[[ToolDef], bool] | None = None) -> list[Scored]:
        """The k best tools for `goal`, best first (ties by name); `allow` filters (e.g. permitted only)."""
        k = DEFAULT_K if k <= 0 else min(k, MAX_K)
        if self._bm25 is None:
            return []
        query = tokenize(goal)
        scores = self._bm25.get_scores(query) if query else [0.0] * len(self.tools)
        ranked = sorted(
            (Scored(tool, float(score)) for tool, score in zip(self.tools, scores, strict=True)),
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
