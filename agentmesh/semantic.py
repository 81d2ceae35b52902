"""Semantic retrieval: a vector index and a hybrid of it with BM25, both `Retriever`s (issue 51).

`VectorIndex` keeps one unit vector per key (from an `Embedder`) and answers a query by an exact scan:
one matrix-vector product over every row. bench/bench_vectors.py measures it: at 100k 512-d rows a query
costs a few milliseconds on one core, which is enough for a tenant's memory and a tool registry on one
machine; past a few hundred thousand rows per index, or once the index must be shared by replicas, an
ANN engine is the next step (docs/memory.md). Rows can be removed (a user's erasure leaves no vector).

`Hybrid` fuses a lexical and a semantic ranking by weighted reciprocal rank (RRF, k=60): words that match
exactly still count, and "获取客户资料" still finds "query user info", which shares no word with it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from agentmesh.embeddings import Embedder, Vectors
from agentmesh.retrieval import BM25, Hit

__all__ = ["RRF_K", "Hybrid", "VectorIndex", "fuse"]

K = TypeVar("K", bound=Hashable)

RRF_K = 60
"""Reciprocal rank fusion's constant (Cormack et al. 2009): a document's share is w / (RRF_K + rank)."""
_GROW = 1024


class VectorIndex(Generic[K]):
    """Keys and their unit vectors, searched by exact cosine; satisfies `Retriever`.

    `min_score` is the cosine below which a row is not a hit: unrelated short texts score ~0.1-0.35
    with the offline model, related ones (also across Chinese and English) ~0.45 and up.
    """

    def __init__(self, embedder: Embedder, documents: Iterable[tuple[K, str]] = (), *, min_score: float = 0.3) -> None:
        self.embedder = embedder
        self.min_score = min_score
        self._keys: list[K | None] = []
        self._rows: dict[K, int] = {}
        self._matrix: Vectors = np.zeros((0, embedder.dim), dtype=np.float32)
        self._lock = threading.Lock()
        batch = list(documents)
        if batch:
            self.add_many(batch)

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, key: object) -> bool:
        return key in self._rows

    def add(self, key: K, text: str) -> None:
        self.add_many([(key, text)])

    def add_many(self, documents: Iterable[tuple[K, str]]) -> None:
        """Indexes several texts with one embedding call (a key already held is kept as it is)."""
        todo: dict[K, str] = {}
        for key, text in documents:
            if key not in self._rows and key not in todo:
                todo[key] = text
        if todo:
            self.add_vectors(list(todo), self.embedder.embed(list(todo.values())))

    def add_vectors(self, keys: list[K], vectors: Vectors) -> None:
        """Indexes vectors already made (unit length, the embedder's dimensions)."""
        with self._lock:
            fresh = [(k, v) for k, v in zip(keys, vectors, strict=True) if k not in self._rows]
            if not fresh:
                return
            used = len(self._keys)
            need = used + len(fresh)
            if need > self._matrix.shape[0]:
                grown = np.zeros((max(need, 2 * self._matrix.shape[0], _GROW), self.embedder.dim), dtype=np.float32)
                grown[:used] = self._matrix[:used]
                self._matrix = grown
            for offset, (key, vector) in enumerate(fresh):
                self._matrix[used + offset] = vector
                self._rows[key] = used + offset
                self._keys.append(key)

    def remove(self, key: K) -> bool:
        """Drops `key`'s vector (its row is zeroed, so nothing of it stays searchable)."""
        with self._lock:
            row = self._rows.pop(key, None)
            if row is None:
                return False
            self._matrix[row] = 0.0
            self._keys[row] = None
            return True

    def scores(self, vector: Vectors) -> dict[K, float]:
        """The cosine of every indexed key with the unit `vector`."""
        with self._lock:
            used = len(self._keys)
            sims = self._matrix[:used] @ vector.reshape(-1)
            return {key: float(sims[row]) for row, key in enumerate(self._keys) if key is not None}

    def search(self, query: str, k: int, *, allow: Callable[[K], bool] | None = None) -> list[Hit[K]]:
        return self.search_vector(self.embedder.embed([query])[0], k, allow=allow)

    def search_vector(self, vector: Vectors, k: int, *, allow: Callable[[K], bool] | None = None) -> list[Hit[K]]:
        """The `k` nearest keys to the unit `vector` scoring at least `min_score`, best first."""
        if k <= 0:
            return []
        with self._lock:
            used = len(self._keys)
            if not used:
                return []
            sims = self._matrix[:used] @ vector.reshape(-1)
            keys = list(self._keys)
        # The best few by a partial sort (O(n)); all of them sorted only when a filter rejects too many.
        width = min(used, max(4 * k, 64))
        order = np.argpartition(-sims, width - 1)[:width] if width < used else np.arange(used)
        order = order[np.argsort(-sims[order], kind="stable")]
        hits = self._collect(order, sims, keys, k, allow)
        if len(hits) < k and width < used and float(sims[order[-1]]) >= self.min_score:
            hits = self._collect(np.argsort(-sims, kind="stable"), sims, keys, k, allow)
        return hits

    def _collect(
        self,
        order: npt.NDArray[np.intp],
        sims: Vectors,
        keys: list[K | None],
        k: int,
        allow: Callable[[K], bool] | None,
    ) -> list[Hit[K]]:
        hits: list[Hit[K]] = []
        for row in order:
            score = float(sims[row])
            if score < self.min_score:
                break
            key = keys[row]
            if key is None or (allow is not None and not allow(key)):
                continue
            hits.append(Hit(key, score))
            if len(hits) >= k:
                break
        return hits


def fuse(rankings: Iterable[tuple[float, list[Hit[K]]]], k: int) -> list[Hit[K]]:
    """Weighted reciprocal rank fusion of (weight, ranking) pairs: the `k` best keys, best first."""
    fused: dict[K, float] = {}
    for weight, hits in rankings:
        for rank, hit in enumerate(hits):
            fused[hit.key] = fused.get(hit.key, 0.0) + weight / (RRF_K + rank + 1)
    out = [Hit(key, score) for key, score in fused.items()]
    out.sort(key=lambda h: -h.score)
    return out[: max(0, k)]


class Hybrid(Generic[K]):
    """BM25 and a `VectorIndex` over the same documents, fused by `fuse`; satisfies `Retriever`."""

    def __init__(
        self,
        embedder: Embedder,
        documents: Iterable[tuple[K, str]] = (),
        *,
        lexical_weight: float = 1.0,
        semantic_weight: float = 1.0,
        depth: int = 100,
        min_score: float = 0.3,
    ) -> None:
        self.lexical: BM25[K] = BM25()
        self.semantic: VectorIndex[K] = VectorIndex(embedder, min_score=min_score)
        self.lexical_weight = lexical_weight
        self.semantic_weight = semantic_weight
        self.depth = depth
        batch = list(documents)
        for key, text in batch:
            self.lexical.add(key, text)
        self.semantic.add_many(batch)

    def __len__(self) -> int:
        return len(self.semantic)

    def add(self, key: K, text: str) -> None:
        self.lexical.add(key, text)
        self.semantic.add(key, text)

    def search(self, query: str, k: int, *, allow: Callable[[K], bool] | None = None) -> list[Hit[K]]:
        depth = max(k, self.depth)
        return fuse(
            [
                (self.lexical_weight, self.lexical.search(query, depth, allow=allow)),
                (self.semantic_weight, self.semantic.search(query, depth, allow=allow)),
            ],
            k,
        )
