"""Issue 18 through real gRPC: every HTTP tool call carries an Idempotency-Key derived from its idempotency
key (identical on each retry, absent without a key), `http_request` never sends a model's own, and
`upstream_idempotency_key` round-trips through the configuration, RegisterTool and ListTools."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from agentmesh.v1 import common_pb2, tool_pb2
from tests.contract.tool.conftest import Client, output_json
from tests.contract.tool.fakes import FAST_RETRY, FakeUpstream, LocalHttpServer
from tool_svc.http import idempotency_key_value

KEY = "task-1:1.0:call-1:0123456789abcdef0123456789abcdef"


class CountingUpstream(LocalHttpServer):
    """Counts requests per path and keeps each one's Idempotency-Key headers; `/flaky` answers 503 while
    `failures` lasts, every other path 200."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.keys: list[tuple[str, list[str]]] = []
        self.failures = 0
        self.lock = threading.Lock()
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                path = self.path.split("?", 1)[0]
                with upstream.lock:
                    upstream.counts[path] += 1
                    upstream.keys.append((path, self.headers.get_all("Idempotency-Key") or []))
                    fail = path == "/flaky" and upstream.failures > 0
                    upstream.failures -= 1 if fail else 0
                status, out = (503, b'{"error": "try again"}') if fail else (200, json.dumps({"ok": True}).encode())
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(out)

            do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

        super().__init__(Handler)

    def seen(self, path: str) -> list[list[str]]:
        return [keys for p, keys in self.keys if p == path]


@pytest.fixture
def counting() -> Iterator[CountingUpstream]:
    server = CountingUpstream()
    with server.running():
        yield server


def _tool(name: str, counting: CountingUpstream, path: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"Use when testing {name}",
        "input_schema": {"type": "object", "additionalProperties": True},
        "executor": "http",
        "endpoint_url": counting.url(path),
        "permission": {"group": "hdr", "access": "write"},
        "requires_approval": False,
        "timeout_s": 2.0,
        **fields,
    }


def _overrides(upstream: FakeUpstream, counting: CountingUpstream) -> dict[str, Any]:
    return {
        "tools": {
            "http_allowlist": [upstream.url("/"), counting.url("/")],
            "registry": [
                # Retried on 503: idempotent, and its upstream honours the key.
                _tool("book", counting, "/flaky", idempotent=True, retry=FAST_RETRY, upstream_idempotency_key=True),
                _tool("lookup", counting, "/lookup", method="GET", permission={"group": "hdr", "access": "read"}),
                _tool("notify", counting, "/notify"),
            ],
        }
    }


async def test_a_retried_call_sends_the_same_idempotency_key_on_every_attempt(
    tool_service: Any, upstream: FakeUpstream, counting: CountingUpstream
) -> None:
    c = Client(await tool_service(_overrides(upstream, counting)))
    counting.failures = 2
    result = await c.execute("book", {"slot": "9:00"}, key=KEY)
    assert output_json(result) == {"ok": True} and result.stats.attempts == 3
    assert counting.counts["/flaky"] == 3
    assert counting.seen("/flaky") == [[idempotency_key_value(KEY)]] * 3
    # Another key, another header; the same derivation as the unit-tested function.
    await c.execute("book", {"slot": "10:00"}, key="task-1:2.0:call-2:ffff", call_id="call-2")
    assert counting.seen("/flaky")[-1] == [idempotency_key_value("task-1:2.0:call-2:ffff")]
    assert idempotency_key_value("task-1:2.0:call-2:ffff") != idempotency_key_value(KEY)


async def test_every_http_tool_call_carries_the_header_and_none_without_a_key(
    tool_service: Any, upstream: FakeUpstream, counting: CountingUpstream
) -> None:
    c = Client(await tool_service(_overrides(upstream, counting)))
    for name, path in (("lookup", "/lookup"), ("notify", "/notify")):
        assert output_json(await c.execute(name, {"q": "x"}, key=f"{KEY}:{name}")) == {"ok": True}
        assert counting.seen(path) == [[idempotency_key_value(f"{KEY}:{name}")]], name
        assert output_json(await c.execute(name, {"q": "y"}, call_id="call-2")) == {"ok": True}
        assert counting.seen(path)[-1] == [], name  # no key: no header
        assert counting.counts[path] == 2


@pytest.mark.parametrize("name", ["Idempotency-Key", "idempotency-key", "IDEMPOTENCY-KEY"])
async def test_http_request_drops_a_model_supplied_idempotency_key(
    tool_service: Any, upstream: FakeUpstream, counting: CountingUpstream, name: str
) -> None:
    c = Client(await tool_service(_overrides(upstream, counting)))
    arguments = {"url": counting.url("/read"), "headers": {name: "forged-by-the-model", "Accept": "*/*"}}
    value = output_json(await c.execute("http_request", arguments, key=KEY))
    assert value["status"] == 200 and value["headers_dropped"] == [name]
    assert counting.seen("/read") == [[idempotency_key_value(KEY)]]  # ours, not the model's
    value = output_json(await c.execute("http_request", arguments, call_id="call-2"))
    assert value["headers_dropped"] == [name]
    assert counting.seen("/read")[-1] == []  # without a key, none at all


async def test_upstream_idempotency_key_round_trips_through_register_and_list_tools(
    tool_service: Any, upstream: FakeUpstream, counting: CountingUpstream
) -> None:
    c = Client(await tool_service(_overrides(upstream, counting)))
    listed = await c.stub.ListTools(tool_pb2.ListToolsRequest(group="hdr"), metadata=c.meta(), timeout=5)
    flags = {t.name: t.upstream_idempotency_key for t in listed.tools}
    assert flags == {"book": True, "lookup": False, "notify": False}  # from the configuration
    admin = c.meta(roles=("admin",))
    for name, flag in (("stock_honours", True), ("stock_plain", False)):
        spec = common_pb2.ToolSpec(
            name=name,
            description=f"Use when reading stock ({name})",
            input_schema_json=json.dumps({"type": "object"}),
            permission=common_pb2.ToolPermission(group="shop", access=common_pb2.ACCESS_MODE_READ),
            executor="http",
            endpoint_url=counting.url(f"/{name}"),
            http_method="GET",
            upstream_idempotency_key=flag,
        )
        reply = await c.stub.RegisterTool(tool_pb2.RegisterToolRequest(tool=spec), metadata=admin, timeout=5)
        assert not reply.HasField("pending_approval") and reply.tool.upstream_idempotency_key is flag
    listed = await c.stub.ListTools(tool_pb2.ListToolsRequest(group="shop"), metadata=c.meta(), timeout=5)
    assert {t.name: t.upstream_idempotency_key for t in listed.tools} == {"stock_honours": True, "stock_plain": False}
    found = await c.stub.DiscoverTools(
        tool_pb2.DiscoverToolsRequest(goal="read stock honours", k=5), metadata=c.meta(), timeout=5
    )
    assert {s.tool.name: s.tool.upstream_idempotency_key for s in found.tools}.get("stock_honours") is True
    # The registered tool sends the header too.
    await c.execute("stock_honours", {}, key=KEY)
    assert counting.seen("/stock_honours") == [[idempotency_key_value(KEY)]]


async def test_a_write_registered_with_upstream_idempotency_key_needs_a_second_admin(
    tool_service: Any, upstream: FakeUpstream, counting: CountingUpstream
) -> None:
    """The flag lets a write whose outcome is unknown be re-sent without a settlement: a registrant's word
    alone must not switch that protection off."""
    c = Client(await tool_service(_overrides(upstream, counting)))
    admin = c.meta(roles=("admin",), subject="root", agent_id="", instance="")
    spec = common_pb2.ToolSpec(
        name="pay_claims_dedupe",
        description="Use when paying an invoice",
        input_schema_json=json.dumps({"type": "object"}),
        permission=common_pb2.ToolPermission(group="shop", access=common_pb2.ACCESS_MODE_WRITE),
        executor="http",
        endpoint_url=counting.url("/pay"),
        http_method="POST",
        upstream_idempotency_key=True,
    )
    reply = await c.stub.RegisterTool(tool_pb2.RegisterToolRequest(tool=spec), metadata=admin, timeout=5)
    assert reply.HasField("pending_approval"), reply
    assert "upstream_idempotency_key" in reply.pending_approval.impact
    plain = common_pb2.ToolSpec()
    plain.CopyFrom(spec)
    plain.name, plain.upstream_idempotency_key = "pay_plain", False
    direct = await c.stub.RegisterTool(tool_pb2.RegisterToolRequest(tool=plain), metadata=admin, timeout=5)
    assert not direct.HasField("pending_approval")
