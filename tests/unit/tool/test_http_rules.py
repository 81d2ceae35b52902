"""Issue 21 in-process: the header allowlist, query parameters of GET/DELETE tools, and the registry's
configuration checks of `method` and `headers_allowed`."""

from __future__ import annotations

from typing import Any

import pytest

from agentmesh.config import ConfigError, ToolsSettings
from tool_svc.builtin import default_specs
from tool_svc.builtin.http_request import allowed_headers, split_headers
from tool_svc.http_tool import query_url
from tool_svc.registry import ToolRegistry


def registry(*entries: dict[str, Any]) -> ToolRegistry:
    return ToolRegistry(ToolsSettings(http_allowlist=["http://127.0.0.1:*/"], registry=list(entries)), default_specs())


def test_only_harmless_headers_pass_unless_configured() -> None:
    headers = {"Accept": "a", "authorization": "b", "Cookie": "c", "X-Forwarded-Proto": "d", "Proxy-Foo": "e"}
    sent, dropped = split_headers(headers, allowed_headers(()))
    assert sent == {"Accept": "a"} and dropped == ["Cookie", "Proxy-Foo", "X-Forwarded-Proto", "authorization"]
    sent, dropped = split_headers(headers, allowed_headers(("Authorization", "Content-Length")))
    assert sent == {"Accept": "a", "authorization": "b"} and "Cookie" in dropped


def test_query_methods_append_the_arguments_to_the_query() -> None:
    url = query_url("http://h/items?v=1", {"b": [1, 2], "a": "x y", "c": None})
    assert url == "http://h/items?v=1&a=x+y&b=%5B1%2C2%5D&c=null"
    assert query_url("http://h/items", {}) == "http://h/items"


def test_configured_method_and_headers() -> None:
    reg = registry(
        {"name": "get_it", "description": "Use to get", "executor": "http",
         "endpoint_url": "http://127.0.0.1:1/x", "method": "GET", "input_schema": {"type": "object"}},
        {"name": "reader", "executor": "builtin", "builtin": "http_request", "headers_allowed": ["Authorization"]},
    )  # fmt: skip
    assert reg.get("get_it") is not None and reg.get("get_it").spec.http_method == "GET"  # type: ignore[union-attr]
    assert reg.get("reader").spec.headers_allowed == ("Authorization",)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ({"name": "calc", "executor": "builtin", "builtin": "calculator", "method": "GET"}, "method applies"),
        (
            {"name": "calc", "executor": "builtin", "builtin": "calculator", "headers_allowed": ["Accept"]},
            "http_request",
        ),
        (
            {"name": "r", "executor": "builtin", "builtin": "http_request", "headers_allowed": ["Content-Length"]},
            "header",
        ),
        ({"name": "r", "executor": "builtin", "builtin": "http_request", "headers_allowed": ["Bad Name"]}, "header"),
    ],
)
def test_bad_method_or_headers_fail_start_up(entry: dict[str, Any], reason: str) -> None:
    with pytest.raises(ConfigError, match=reason):
        registry(entry)
