"""Hybrid DiscoverTools (tool_svc/semantic_discovery.py, issue 51): a Chinese goal finds the English tool
that shares no word with it, lexical matches still rank, filters apply before fusing, and the index is
rebuilt only when the registry's version changes."""

from __future__ import annotations

import pytest

from agentmesh.embeddings import CachedEmbedder, OfflineEmbedder
from tool_svc.discovery import ToolIndex
from tool_svc.model import ToolDef
from tool_svc.semantic_discovery import HybridDiscovery, HybridToolIndex, tool_text

SCHEMA = {"type": "object", "properties": {}}


def tool(name: str, description: str, **extra: object) -> ToolDef:
    return ToolDef(name=name, description=description, input_schema=SCHEMA, **extra)  # type: ignore[arg-type]


TOOLS = [
    tool(name="query_user_info", description="Query a user's profile information by user id"),
    tool(name="send_email", description="Send an email to a recipient"),
    tool(name="get_weather", description="Get the weather forecast for a city"),
    tool(name="create_invoice", description="Create an invoice for an order"),
    tool(name="list_files", description="List the files in a directory"),
    tool(name="delete_account", description="Delete a user's account"),
]


@pytest.fixture(scope="module")
def index() -> HybridToolIndex:
    return HybridToolIndex(TOOLS, CachedEmbedder(OfflineEmbedder()))


@pytest.mark.parametrize(
    ("goal", "expected"),
    [
        ("获取客户资料", "query_user_info"),
        ("查询天气", "get_weather"),
        ("发送邮件", "send_email"),
        ("list the files in /tmp", "list_files"),
        ("create an invoice for order 42", "create_invoice"),
    ],
)
def test_a_goal_finds_its_tool_in_any_language(index: HybridToolIndex, goal: str, expected: str) -> None:
    assert index.search(goal, 3)[0].tool.name == expected


def test_bm25_alone_cannot_find_the_chinese_request(index: HybridToolIndex) -> None:
    lexical = ToolIndex(TOOLS).search("获取客户资料", 3)
    assert all(s.score == 0 for s in lexical)  # no shared word: BM25 scores nothing
    hits = index.search("获取客户资料", 3)
    assert hits[0].score > hits[1].score > 0


def test_filters_apply_and_k_is_bounded(index: HybridToolIndex) -> None:
    hits = index.search("获取客户资料", 10, allow=lambda t: t.name != "query_user_info")
    assert "query_user_info" not in [s.tool.name for s in hits] and len(hits) <= len(TOOLS)
    assert len(index.search("weather", 0)) == 5  # the default k
    assert HybridToolIndex([], index.embedder).search("anything") == []
    assert tool_text(tool("getUser", "d", examples=("who is bob",))) == "get User: d  who is bob"


async def test_the_index_is_rebuilt_only_for_a_new_version() -> None:
    discovery = HybridDiscovery(OfflineEmbedder())
    calls: list[int] = []

    def listed() -> list[ToolDef]:
        calls.append(1)
        return TOOLS

    first = await discovery.index(1, listed, "获取客户资料")
    assert await discovery.index(1, listed, "查询天气") is first and len(calls) == 1
    assert discovery.embedder.cached("查询天气")
    second = await discovery.index(2, listed, "x")
    assert second is not first and len(calls) == 2
