"""agentmesh.embeddings and agentmesh.semantic (issue 51): the offline multilingual embedder loads from
site-packages and puts a Chinese request next to its English meaning; the content-hash cache embeds a
text once; the exact vector index ranks by cosine, filters, forgets; the hybrid fuses by rank."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import pytest

from agentmesh.embeddings import OFFLINE_MODEL, CachedEmbedder, OfflineEmbedder, Vectors, content_key, normalize
from agentmesh.retrieval import Hit, Retriever
from agentmesh.semantic import RRF_K, Hybrid, VectorIndex, fuse


class HashEmbedder:
    """A deterministic test embedder: each word adds a fixed random direction (bag of words)."""

    model = "hash-bow"
    dim = 64

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> Vectors:
        self.calls.append(list(texts))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().split():
                seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big")
                out[i] += np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
        return normalize(out)


@pytest.fixture(scope="module")
def offline() -> OfflineEmbedder:
    return OfflineEmbedder()


DOCS = [
    "query user info: fetch a customer's profile by user id",
    "send an email to a recipient",
    "get the weather forecast for a city",
    "create an invoice for an order",
    "list files in a directory",
    "I prefer invoices in EUR",
    "My favourite colour is blue",
    "The meeting is moved to Tuesday",
    "Delete the user's account",
    "convert currency amounts between USD and EUR",
]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("获取客户资料", "query user info: fetch a customer's profile by user id"),
        ("以后发票都用欧元", "I prefer invoices in EUR"),
        ("查询天气", "get the weather forecast for a city"),
        ("发送邮件", "send an email to a recipient"),
    ],
)
def test_the_offline_model_finds_the_english_meaning_of_a_chinese_query(
    offline: OfflineEmbedder, query: str, expected: str
) -> None:
    index = VectorIndex(offline, enumerate(DOCS))
    hits = index.search(query, 3)
    assert [DOCS[h.key] for h in hits][:1] == [expected]
    assert hits[0].score >= index.min_score


def test_the_offline_model_gives_unit_vectors_of_its_dimension(offline: OfflineEmbedder) -> None:
    vectors = offline.embed(["hello", "你好", ""])
    assert vectors.shape == (3, offline.dim) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors[:2], axis=1), 1.0, atol=1e-5)
    assert offline.model == OFFLINE_MODEL and offline.embed([]).shape == (0, offline.dim)


def test_the_cache_embeds_each_distinct_text_once_and_forgets_on_request() -> None:
    inner = HashEmbedder()
    cache = CachedEmbedder(inner, entries=3)
    first = cache.embed(["a b", "c", "a b"])
    assert inner.calls == [["a b", "c"]] and np.allclose(first[0], first[2])
    again = cache.embed(["c", "a b"])
    assert inner.calls == [["a b", "c"]] and np.allclose(again[1], first[0])
    assert (cache.hits, cache.misses) == (3, 2)
    assert cache.cached("c") and cache.forget(["c", "never"]) == 1 and not cache.cached("c")
    cache.embed(["d", "e", "f"])  # over 3 entries: the least recently used ("a b") goes
    assert not cache.cached("a b") and cache.cached("f")
    assert content_key("m", "x") != content_key("n", "x") and cache.embed([]).shape == (0, inner.dim)


def test_the_index_ranks_by_cosine_filters_and_forgets() -> None:
    embedder = HashEmbedder()
    index: VectorIndex[int] = VectorIndex(embedder, min_score=-1.0)
    texts = ["red apple pie", "green apple", "blue sky", "red car"]
    index.add_many(enumerate(texts))
    index.add(0, "ignored: key 0 is already held")
    query = embedder.embed(["red apple"])[0]
    expected = sorted(range(4), key=lambda i: -float(embedder.embed([texts[i]])[0] @ query))
    assert [h.key for h in index.search("red apple", 4)] == expected
    assert [h.key for h in index.search("red apple", 4, allow=lambda k: k % 2 == 1)] == [
        k for k in expected if k % 2 == 1
    ]
    assert index.remove(expected[0]) and not index.remove(expected[0]) and expected[0] not in index
    assert [h.key for h in index.search("red apple", 4)] == expected[1:] and len(index) == 3
    assert index.search("red apple", 0) == []


def test_the_index_grows_past_its_first_allocation() -> None:
    embedder = HashEmbedder()
    index: VectorIndex[int] = VectorIndex(embedder, min_score=0.99)
    index.add_vectors(list(range(3000)), normalize(np.eye(3000, embedder.dim, dtype=np.float32) + 1e-3))
    assert len(index) == 3000
    assert [h.key for h in index.search_vector(normalize(np.eye(1, embedder.dim, 5))[0], 1)] == [5]


def test_a_min_score_drops_unrelated_rows() -> None:
    embedder = HashEmbedder()
    index: VectorIndex[str] = VectorIndex(embedder, [("x", "alpha beta"), ("y", "gamma delta")], min_score=0.5)
    assert [h.key for h in index.search("alpha beta", 5)] == ["x"]


def test_fuse_is_weighted_reciprocal_rank() -> None:
    a = [Hit("x", 9.0), Hit("y", 1.0)]
    b = [Hit("y", 0.9), Hit("z", 0.8)]
    fused = fuse([(1.0, a), (2.0, b)], 3)
    expected = {"x": 1 / (RRF_K + 1), "y": 1 / (RRF_K + 2) + 2 / (RRF_K + 1), "z": 2 / (RRF_K + 2)}
    assert [h.key for h in fused] == sorted(expected, key=lambda k: -expected[k])
    assert all(abs(h.score - expected[h.key]) < 1e-12 for h in fused) and fuse([(1.0, a)], 0) == []


def test_the_hybrid_finds_by_words_and_by_meaning(offline: OfflineEmbedder) -> None:
    hybrid: Hybrid[int] = Hybrid(offline, enumerate(DOCS))
    retriever: Retriever[int] = hybrid
    assert DOCS[retriever.search("获取客户资料", 1)[0].key].startswith("query user info")
    assert DOCS[retriever.search("Tuesday meeting", 1)[0].key] == "The meeting is moved to Tuesday"
    hybrid.add(99, "restart the payment pods")
    assert len(retriever) == len(DOCS) + 1 and retriever.search("restart pods", 1)[0].key == 99


def test_a_filter_that_rejects_the_nearest_rows_still_finds_k() -> None:
    embedder = HashEmbedder()
    rng = np.random.default_rng(3)
    rows = normalize(rng.standard_normal((500, embedder.dim)).astype(np.float32))
    index: VectorIndex[int] = VectorIndex(embedder, min_score=-1.0)
    index.add_vectors(list(range(500)), rows)
    query = rows[0]
    exact = [int(i) for i in np.argsort(-(rows @ query), kind="stable")]
    allowed = [i for i in exact if i % 50 == 7]
    assert [h.key for h in index.search_vector(query, 5, allow=lambda i: i % 50 == 7)] == allowed[:5]
    assert [h.key for h in index.search_vector(query, 10)] == exact[:10]
