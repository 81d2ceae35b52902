"""Lexical retrieval shared by the services: a `Retriever` interface and its BM25 implementation.

tool_svc's DiscoverTools ranks tools with it (docs/architecture.md §5) and context_svc ranks a
session's older turns against the newest user message (§4, issue 37). A semantic retriever (the
long-term memory issue) implements the same `Retriever` protocol.

Tokens: Latin words are lower-cased, stop words dropped and stemmed (Snowball English), so
"restarting" finds "restart"; Chinese (CJK) runs become character bigrams (a single character stays a
unigram), since Chinese has no spaces.

`BM25` is Okapi BM25 (k1 1.5, b 0.75; a term in more than half the documents gets a floor of a quarter
of the mean idf, as rank_bm25's BM25Okapi does) over an index that grows by appending documents, so a
session's index is extended turn by turn instead of rebuilt; a query reads only the postings of its
own terms.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import snowballstemmer  # type: ignore[import-untyped, unused-ignore]

__all__ = ["BM25", "Hit", "Retriever", "tokenize"]

K = TypeVar("K", bound=Hashable)

_TOKEN_RE = re.compile(r"[a-z0-9]+|[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_CJK_RE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_STOP_WORDS_TEXT = """a an the and or of to in on at for from by with without is are was were be been being it its
this that these those i me my we our you your he she they them their what which who whom whose when where why how
do does did done can could should would will shall may might must use used using please want need get give show
tell let into about as than then there here if so not no yes all any some"""
_STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())
_STEMMER = snowballstemmer.stemmer("english")
_K1 = 1.5
_B = 0.75
_EPSILON = 0.25


@functools.lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    # The Snowball stemmer is pure Python (~45 us a word); words repeat, so a bounded cache makes a
    # tokenize ~20x cheaper (bench/bench_build_p50.py: BuildContext's recall tokenizes each query).
    return str(_STEMMER.stemWord(word))


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
            tokens.append(_stem(run))
    return tokens


@dataclass(frozen=True, slots=True)
class Hit(Generic[K]):
    """A document found for a query, and how well it matches (higher is better)."""

    key: K
    score: float


class Retriever(Protocol[K]):
    """Documents added under keys, found again by relevance to a text query."""

    def add(self, key: K, text: str) -> None:
        """Indexes `text` under `key` (a key is added once)."""

    def search(self, query: str, k: int, *, allow: Callable[[K], bool] | None = None) -> list[Hit[K]]:
        """The `k` best documents for `query` with a positive score, best first; `allow` filters."""

    def __len__(self) -> int:
        """Documents indexed."""


class BM25(Generic[K]):
    """An append-only BM25 index (see the module docstring); satisfies `Retriever`."""

    def __init__(self, documents: Iterable[tuple[K, str]] = ()) -> None:
        self._postings: dict[str, dict[K, int]] = {}
        self._lengths: dict[K, int] = {}
        self._total_length = 0
        self._mean_idf: float | None = None
        for key, text in documents:
            self.add(key, text)

    def __len__(self) -> int:
        return len(self._lengths)

    def add(self, key: K, text: str) -> None:
        self.add_tokens(key, tokenize(text))

    def add_tokens(self, key: K, tokens: list[str]) -> None:
        """Indexes already tokenized text (the caller may cache tokens)."""
        if key in self._lengths:
            return
        self._lengths[key] = len(tokens)
        self._total_length += len(tokens)
        for term, count in Counter(tokens).items():
            self._postings.setdefault(term, {})[key] = count
        self._mean_idf = None

    def _idf(self, df: int) -> float:
        n = len(self._lengths)
        return math.log(n - df + 0.5) - math.log(df + 0.5)

    def _floor(self) -> float:
        if self._mean_idf is None:
            idfs = [self._idf(len(docs)) for docs in self._postings.values()]
            self._mean_idf = sum(idfs) / len(idfs) if idfs else 0.0
        return _EPSILON * self._mean_idf

    def scores(self, tokens: Iterable[str]) -> dict[K, float]:
        """BM25 score of every document holding at least one of the query's `tokens`."""
        n = len(self._lengths)
        if not n:
            return {}
        mean_length = self._total_length / n or 1.0
        out: dict[K, float] = {}
        for term in tokens:
            docs = self._postings.get(term)
            if not docs:
                continue
            idf = self._idf(len(docs))
            if idf < 0:
                idf = self._floor()
            for key, tf in docs.items():
                norm = _K1 * (1 - _B + _B * self._lengths[key] / mean_length)
                out[key] = out.get(key, 0.0) + idf * tf * (_K1 + 1) / (tf + norm)
        return out

    def search(self, query: str, k: int, *, allow: Callable[[K], bool] | None = None) -> list[Hit[K]]:
        scored = self.scores(tokenize(query))
        hits = [Hit(key, score) for key, score in scored.items() if score > 0 and (allow is None or allow(key))]
        hits.sort(key=lambda h: -h.score)
        return hits[: max(0, k)]
