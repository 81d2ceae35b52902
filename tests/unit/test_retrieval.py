"""agentmesh.retrieval (issues 37, 51): the shared BM25 ranks as Okapi BM25 with Lucene's idf, grows by
appending, filters, and tokenizes any script (accents folded, CJK character bigrams)."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from agentmesh.retrieval import BM25, tokenize

DOCS = [
    "restart the payment service pods",
    "read the logs of a pod",
    "refund an order to the customer",
    "重启支付服务",
    "查询订单退款状态",
    "scale the checkout deployment replicas",
    "restart restart restart a node",
]


@pytest.mark.parametrize("query", ["restarting pods", "order refund", "退款", "node", "the", "重启服务 pods"])
def test_scores_are_bm25_with_lucene_idf(query: str) -> None:
    docs = [Counter(tokenize(d)) for d in DOCS]
    lengths = [sum(d.values()) for d in docs]
    mean = sum(lengths) / len(docs)
    expected = [0.0] * len(docs)
    for term in tokenize(query):
        df = sum(term in d for d in docs)
        if not df:
            continue
        idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
        for i, d in enumerate(docs):
            tf = d[term]
            if tf:
                expected[i] += idf * tf * 2.5 / (tf + 1.5 * (0.25 + 0.75 * lengths[i] / mean))
    got = BM25(enumerate(DOCS)).scores(tokenize(query))
    for i in range(len(DOCS)):
        assert got.get(i, 0.0) == pytest.approx(expected[i], abs=1e-9)


def test_idf_is_never_zero_or_negative_in_a_two_document_corpus() -> None:
    # Classic Okapi idf is log(1.5/1.5) = 0 for a word in one of two documents and < 0 for a shared
    # one: with two tools nothing told them apart (issue 51).
    index = BM25(enumerate(["change the drink order", "change the food order"]))
    assert index.idf(1) == pytest.approx(math.log(2)) and index.idf(2) > 0
    scores = index.scores(tokenize("change my drink"))
    assert scores[0] > scores[1] > 0
    one = BM25([(0, "only document")])
    assert one.idf(1) > 0 and one.scores(tokenize("document"))[0] > 0


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("café crème Müller", ["cafe", "creme", "muller"]),  # not "caf", "cr", "me", "ller"
        ("CAFÉ", ["cafe"]),
        ("ｆｕｌｌｗｉｄｔｈ ＡＢＣ", ["fullwidth", "abc"]),  # NFKC
        ("Привет мир", ["привет", "мир"]),
        ("重启服务", ["重启", "启服", "服务"]),
        ("ラーメン", ["ラー", "ーメ", "メン"]),
        ("고객 정보", ["고객", "정보"]),
        ("查询orders状态", ["查询", "order", "状态"]),
        ("payment-svc snake_case", ["payment", "svc", "snake", "case"]),
    ],
)
def test_tokens_of_any_script(text: str, tokens: list[str]) -> None:
    assert tokenize(text) == tokens


def test_an_accented_query_finds_the_unaccented_word() -> None:
    index = BM25(enumerate(["book a table at a cafe", "order a taxi"]))
    assert index.search("réserver un café", 1)[0].key == 0


def test_search_ranks_filters_and_grows() -> None:
    index: BM25[int] = BM25()
    for i, doc in enumerate(DOCS):
        index.add(i, doc)
    index.add(0, "something else entirely")  # a key is indexed once
    assert len(index) == len(DOCS)
    assert [h.key for h in index.search("refund order", 5)] == [2]
    assert index.search("退款", 5)[0].key == 4
    assert all(h.key != 0 for h in index.search("restart", 5, allow=lambda k: k != 0))
    assert index.search("zebra", 5) == [] and index.search("", 5) == []
    index.add(99, "zebra crossing")
    assert index.search("zebra", 5)[0].key == 99
