"""Lexical retrieval shared by the services: a `Retriever` interface and its BM25 implementation.

tool_svc's DiscoverTools ranks tools with it (docs/design.md §5) and context_svc ranks a
session's older turns against the newest user message (§4, issue 37). A semantic retriever (the
long-term memory issue) implements the same `Retriever` protocol.

Tokens (Unicode-aware, issue 51): text is NFKC-normalized and case-folded; a word is a run of letters
and digits of any script ("café", "Müller", "привет" stay whole), accents are folded ("café" finds
"cafe"), stop words dropped and English words stemmed (Snowball), so "restarting" finds "restart".
Han, Hiragana, Katakana and Hangul runs become character bigrams (a single character stays a unigram),
since Chinese and Japanese have no spaces (Lucene's CJK bigram filter does the same).

`BM25` is Okapi BM25 (k1 1.5, b 0.75) with Lucene's idf `log(1 + (N - n + 0.5) / (n + 0.5))`, which is
positive for every term: the classic `log((N - n + 0.5) / (n + 0.5))` is exactly 0 for a term in one of
two documents and negative for a term in more than half, so with two tools nothing could tell them
apart (issue 51). The index grows by appending documents, so a session's index is extended turn by
turn instead of rebuilt; a query reads only the postings of its own terms.
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import snowballstemmer  # type: ignore[import-untyped, unused-ignore]

__all__ = ["BM25", "Hit", "Retriever", "tokenize"]

K = TypeVar("K", bound=Hashable)

# Han (with extension A and compatibility ideographs), Hiragana, Katakana (with the prolonged sound
# mark), Hangul syllables: scripts written without spaces between words, bigrammed.
_CJK_CLASS = "\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_TOKEN_RE = re.compile(rf"[{_CJK_CLASS}]+|[^\W_{_CJK_CLASS}]+")
_CJK_RE = re.compile(rf"[{_CJK_CLASS}]")
_STOP_WORDS_TEXT = """a an the and or of to in on at for from by with without is are was were be been being it its
this that these those i me my we our you your he she they them their what which who whom whose when where why how
do does did done can could should would will shall may might must use used using please want need get give show
tell let into about as than then there here if so not no yes all any some"""
_STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())
_STEMMER = snowballstemmer.stemmer("english")
_K1 = 1.5
_B = 0.75


@functools.lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    # The Snowball stemmer is pure Python (~45 us a word); words repeat, so a bounded cache makes a
    # tokenize ~20x cheaper (bench/bench_build_p50.py: BuildContext's recall tokenizes each query).
    return str(_STEMMER.stemWord(word))


@functools.lru_cache(maxsize=65536)
def _fold(word: str) -> str:
    # Accents off ("café" -> "cafe", "Müller" -> "muller"); letters without a decomposition stay.
    if word.isascii():
        return word
    decomposed = unicodedata.normalize("NFKD", word)
    return unicodedata.normalize("NFC", "".join(c for c in decomposed if not unicodedata.combining(c)))


def tokenize(text: str) -> list[str]:
    """BM25 tokens of `text`: folded, stemmed words of any script and CJK character bigrams."""
    tokens: list[str] = []
    for match in _TOKEN_RE.finditer(unicodedata.normalize("NFKC", text).casefold()):
        run = match.group(0)
        if _CJK_RE.match(run):
            if len(run) == 1:
                tokens.append(run)
            else:
                tokens.extend(run[i : i + 2] for i in range(len(run) - 1))
        else:
            word = _fold(run)
            if word not in _STOP_WORDS and (len(word) > 1 or word.isdigit()):
                tokens.append(_stem(word))
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

    def __init__(self, documents: Iterable[tuple[K, str]] = (), *, k1: float = _K1, b: float = _B) -> None:
        self.k1 = k1
        self.b = b
        self._postings: dict[str, dict[K, int]] = {}
        self._lengths: dict[K, int] = {}
        self._total_length = 0
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

    def idf(self, df: int) -> float:
        """Lucene's idf of a term in `df` of the documents: > 0 whenever 0 < df <= N."""
        n = len(self._lengths)
        return math.log1p((n - df + 0.5) / (df + 0.5))

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
            idf = self.idf(len(docs))
            for key, tf in docs.items():
                norm = self.k1 * (1 - self.b + self.b * self._lengths[key] / mean_length)
                out[key] = out.get(key, 0.0) + idf * tf * (self.k1 + 1) / (tf + norm)
        return out

    def search(self, query: str, k: int, *, allow: Callable[[K], bool] | None = None) -> list[Hit[K]]:
        scored = self.scores(tokenize(query))
        hits = [Hit(key, score) for key, score in scored.items() if score > 0 and (allow is None or allow(key))]
        hits.sort(key=lambda h: -h.score)
        return hits[: max(0, k)]
