"""DiscoverTools: BM25 over each tool's name, description, input schema and examples (docs/design.md §5).

The ranking is the shared one (`agentmesh.retrieval`: Lucene idf, Unicode words folded and stemmed,
CJK character bigrams), the one context_svc ranks older turns with. A tool's document is its fields,
each repeated by its weight (a BM25F approximation; `Weights`, tuned on half of BFCL's live_multiple
questions by `bench/bench_discovery.py`, issue 51):

- the name, its identifier parts split ("ChaDri.change_drink" -> "cha dri change drink");
- the description;
- the input schema's parameter names (split like the name) and their descriptions and enum values,
  nested objects and array items included;
- the examples (typical phrasings of a request the tool answers).

Ties (equal scores) go to the tool matching more distinct query terms, then by a hash of the name, so
the order is the same on every replica and not biased to names early in the alphabet. The index is
rebuilt only when the registry changes.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentmesh.retrieval import BM25, tokenize
from tool_svc.model import ToolDef

__all__ = ["DEFAULT_K", "MAX_K", "Discovery", "Scored", "ToolIndex", "Weights", "document_tokens", "tokenize"]

DEFAULT_K = 5
MAX_K = 50
# A schema nested deeper than this adds nothing a goal would name (and bounds the walk).
_MAX_SCHEMA_DEPTH = 8
_CAMEL_RE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


@dataclass(frozen=True)
class Weights:
    """How many times each field of a tool counts in its document (0 leaves the field out), and BM25's
    k1 (term-frequency saturation) and b (length normalization)."""

    k1: float = 2.0
    b: float = 0.5
    name: int = 3
    description: int = 2
    parameter_names: int = 2
    parameter_text: int = 1
    examples: int = 2


DEFAULT_WEIGHTS = Weights()


def split_identifier(name: str) -> str:
    """`getUserInfo`, `HNA_NEWS.search`, `uber.ride2` -> space-separated words."""
    return _CAMEL_RE.sub(" ", name).replace(".", " ").replace("_", " ")


def _schema_text(schema: Any, depth: int = 0) -> Iterator[tuple[str, str]]:
    """("name", words) and ("text", words) of every property of a JSON Schema, nested ones included."""
    if depth > _MAX_SCHEMA_DEPTH or not isinstance(schema, Mapping):
        return
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        for key, sub in properties.items():
            yield "name", split_identifier(str(key))
            if isinstance(sub, Mapping):
                for field in ("description", "title"):
                    if isinstance(sub.get(field), str):
                        yield "text", sub[field]
                enum = sub.get("enum")
                if isinstance(enum, list):
                    yield "text", " ".join(str(v) for v in enum if isinstance(v, str | int | float))
            yield from _schema_text(sub, depth + 1)
    for nested in ("items", "additionalProperties"):
        yield from _schema_text(schema.get(nested), depth + 1)
    for combined in ("anyOf", "oneOf", "allOf"):
        options = schema.get(combined)
        if isinstance(options, list):
            for option in options:
                yield from _schema_text(option, depth + 1)


def document_tokens(tool: ToolDef, weights: Weights = DEFAULT_WEIGHTS) -> list[str]:
    """The tokens a tool is found by, each field repeated by its weight."""
    name = tokenize(split_identifier(tool.name))
    names: list[str] = []
    text: list[str] = []
    for kind, words in _schema_text(tool.input_schema):
        (names if kind == "name" else text).extend(tokenize(words))
    return (
        name * weights.name
        + tokenize(tool.description) * weights.description
        + names * weights.parameter_names
        + text * weights.parameter_text
        + [t for example in tool.examples for t in tokenize(example)] * weights.examples
    )


def _tie_break(name: str) -> bytes:
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).digest()[:8]


@dataclass(frozen=True)
class Scored:
    tool: ToolDef
    score: float


class ToolIndex:
    """A BM25 index over a set of tools."""

    def __init__(self, tools: Sequence[ToolDef], weights: Weights = DEFAULT_WEIGHTS) -> None:
        self.tools = list(tools)
        self._bm25: BM25[int] | None = None
        self._terms: list[frozenset[str]] = []
        if self.tools:
            self._bm25 = BM25(k1=weights.k1, b=weights.b)
            for position, tool in enumerate(self.tools):
                tokens = document_tokens(tool, weights) or ["_"]
                self._bm25.add_tokens(position, tokens)
                self._terms.append(frozenset(tokens))

    def search(self, goal: str, k: int = DEFAULT_K, allow: Callable[[ToolDef], bool] | None = None) -> list[Scored]:
        """The k best tools for `goal`, best first (ties: more query terms matched, then a name hash);
        `allow` filters (e.g. permitted only)."""
        k = DEFAULT_K if k <= 0 else min(k, MAX_K)
        if self._bm25 is None:
            return []
        query = tokenize(goal)
        distinct = frozenset(query)
        scores = self._bm25.scores(query)
        ranked = sorted(
            range(len(self.tools)),
            key=lambda i: (
                -scores.get(i, 0.0),
                -len(distinct & self._terms[i]),
                _tie_break(self.tools[i].name),
            ),
        )
        out = [Scored(self.tools[i], scores.get(i, 0.0)) for i in ranked]
        if allow is not None:
            out = [s for s in out if allow(s.tool)]
        return out[:k]


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
