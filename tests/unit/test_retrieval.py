"""agentmesh.retrieval (issue 37): the shared BM25 ranks as rank_bm25's BM25Okapi did for tool discovery,
grows by appending, filters, and finds Chinese by character bigrams."""

from __future__ import annotations

import pytest
from rank_bm25 import BM25Okapi  # type: ignore[import-untyped, unused-ignore]

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
def test_scores_are_bm25_okapi(query: str) -> None:
    ours = BM25(enumerate(DOCS))
    theirs = BM25Okapi([tokenize(d) or ["_"] for d in DOCS])
    expected = theirs.get_scores(tokenize(query))
    got = ours.scores(tokenize(query))
    for i in range(len(DOCS)):
        assert got.get(i, 0.0) == pytest.approx(float(expected[i]), abs=1e-9)


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
