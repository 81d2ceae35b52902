"""The Idempotency-Key header sent to HTTP upstreams, and the `upstream_idempotency_key` flag it serves.

The header is derived from the call's idempotency key by one function (`tool_svc.http.idempotency_key_value`),
set by the transport only, and never taken from a model's arguments (`http_request`).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import replace
from typing import Any

import httpx
import pytest

from agentmesh.config import ConfigError, ToolsSettings
from agentmesh.errors import InvalidRequestError
from agentmesh.urlallow import Allowlist
from tool_svc.builtin import default_specs
from tool_svc.builtin.http_request import allowed_headers, split_headers
from tool_svc.http import HttpTransport, idempotency_key_value
from tool_svc.http_tool import HttpToolExecutor
from tool_svc.model import Caller, Invocation, ToolDef
from tool_svc.registry import ToolRegistry

KEY = "task-7f3a:3.0:call_9:0123456789abcdef0123456789abcdef"
SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}}


def test_the_header_value_is_a_stable_opaque_structured_field_string() -> None:
    value = idempotency_key_value(KEY)
    # An sf-string (RFC 8941) of 40 lower-case hex digits: the first 40 of sha256(key).
    assert re.fullmatch(r'"[0-9a-f]{40}"', value)
    assert value == '"' + hashlib.sha256(KEY.encode()).hexdigest()[:40] + '"'
    assert idempotency_key_value(KEY) == value  # the same key, the same header, every time
    assert idempotency_key_value(KEY + "x") != value and idempotency_key_value("k") != idempotency_key_value("K")
    # Opaque: nothing of the task, the call or the arguments' hash shows.
    for part in ("task-7f3a", "call_9", "0123456789abcdef"):
        assert part not in value
    assert idempotency_key_value("") == ""  # no key, no header


def test_non_ascii_keys_hash_as_utf8() -> None:
    assert idempotency_key_value("tâche:1") == '"' + hashlib.sha256("tâche:1".encode()).hexdigest()[:40] + '"'


class Recorder:
    """An httpx MockTransport handler recording each request's headers; answers `statuses` in turn, then 200."""

    def __init__(self, *statuses: int) -> None:
        self.requests: list[httpx.Request] = []
        self.statuses = list(statuses)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        status = self.statuses.pop(0) if self.statuses else 200
        body = json.dumps({"ok": status == 200}).encode()
        # A stream, as a network answer is: the transport reads it raw (aiter_raw).
        return httpx.Response(status, headers={"content-type": "application/json"}, stream=httpx.ByteStream(body))

    def keys(self) -> list[list[str]]:
        return [r.headers.get_list("idempotency-key") for r in self.requests]


def transport(recorder: Recorder) -> HttpTransport:
    out = HttpTransport(Allowlist(["http://upstream.test/"]), max_response_bytes=64 * 1024)
    out.client = httpx.AsyncClient(transport=httpx.MockTransport(recorder), follow_redirects=False)
    return out


def tool(**fields: Any) -> ToolDef:
    fields.setdefault("endpoint_url", "http://upstream.test/charge")
    return ToolDef(name="charge", description="Use when charging", input_schema=SCHEMA, **fields)


def invocation(spec: ToolDef, key: str, arguments: Any = None) -> Invocation:
    return Invocation(
        tool=spec,
        arguments={"q": "x"} if arguments is None else arguments,
        session_id="s",
        goal="",
        timeout_s=2.0,
        caller=Caller("agent"),
        idempotency_key=key,
    )


async def test_the_transport_sends_the_derived_header_and_never_a_callers_own() -> None:
    rec = Recorder()
    t = transport(rec)
    spec = tool()
    forged = {"Accept": "application/json", "IDEMPOTENCY-KEY": "forged", "idempotency-key": "forged-too"}
    await t.request(spec, "POST", spec.endpoint_url, timeout_s=2, headers=forged, idempotency_key=KEY)
    await t.request(spec, "POST", spec.endpoint_url, timeout_s=2, headers=forged)
    await t.request(spec, "GET", spec.endpoint_url, timeout_s=2)
    assert rec.keys() == [[idempotency_key_value(KEY)], [], []]
    assert rec.requests[0].headers["accept"] == "application/json"
    await t.aclose()


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "PATCH", "DELETE"])
async def test_every_method_of_an_http_tool_carries_the_key_on_every_attempt(method: str) -> None:
    rec = Recorder()
    executor = HttpToolExecutor(transport(rec))
    spec = tool(http_method=method)
    for _ in range(3):  # what a retry does: the same Invocation again
        await executor(invocation(spec, KEY))
    await executor(invocation(spec, ""))
    assert rec.keys() == [[idempotency_key_value(KEY)]] * 3 + [[]]
    assert {r.method for r in rec.requests} == {method}


async def test_a_key_in_the_arguments_of_a_query_method_is_a_query_parameter_not_the_header() -> None:
    rec = Recorder()
    executor = HttpToolExecutor(transport(rec))
    await executor(invocation(tool(http_method="GET"), KEY, {"Idempotency-Key": "forged"}))
    assert rec.keys() == [[idempotency_key_value(KEY)]]
    assert rec.requests[0].url.params["Idempotency-Key"] == "forged"


@pytest.mark.parametrize("name", ["Idempotency-Key", "idempotency-key", "IDEMPOTENCY-KEY", "iDeMpOtEnCy-KeY"])
def test_http_request_never_sends_a_model_supplied_idempotency_key(name: str) -> None:
    for configured in ((), ("Idempotency-Key",), (name, "Authorization")):
        sent, dropped = split_headers({name: "forged", "Accept": "*/*"}, allowed_headers(configured))
        assert sent == {"Accept": "*/*"} and dropped == [name], configured


def registry(*entries: dict[str, Any]) -> ToolRegistry:
    return ToolRegistry(ToolsSettings(http_allowlist=["http://127.0.0.1:*/"], registry=list(entries)), default_specs())


@pytest.mark.parametrize("name", ["Idempotency-Key", "idempotency-KEY"])
def test_the_registry_refuses_idempotency_key_in_headers_allowed(name: str) -> None:
    entry = {"name": "reader", "executor": "builtin", "builtin": "http_request", "headers_allowed": [name]}
    with pytest.raises(ConfigError, match="headers_allowed"):
        registry(entry)


def http_entry(name: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"Use when testing {name}",
        "executor": "http",
        "endpoint_url": f"http://127.0.0.1:1/{name}",
        "input_schema": SCHEMA,
        **fields,
    }


def test_the_flag_from_configuration() -> None:
    reg = registry(http_entry("honours", upstream_idempotency_key=True), http_entry("plain"))
    assert reg.get("honours").spec.upstream_idempotency_key is True  # type: ignore[union-attr]
    assert reg.get("plain").spec.upstream_idempotency_key is False  # type: ignore[union-attr]
    assert all(not t.spec.upstream_idempotency_key for t in reg.tools() if t.spec.executor == "builtin")
    with pytest.raises(ConfigError, match="upstream_idempotency_key applies to executor: http"):
        registry({"name": "calc", "executor": "builtin", "builtin": "calculator", "upstream_idempotency_key": True})


def test_the_flag_round_trips_through_the_stored_json() -> None:
    spec = tool(upstream_idempotency_key=True)
    blob = json.loads(json.dumps(spec.to_json()))
    assert blob["upstream_idempotency_key"] is True and ToolDef.from_json(blob) == spec
    # A record written before the flag existed reads as false.
    del blob["upstream_idempotency_key"]
    assert ToolDef.from_json(blob).upstream_idempotency_key is False
    assert ToolDef.from_json(tool().to_json()) == tool()


def test_a_builtin_with_the_flag_is_refused() -> None:
    reg = registry()
    calc = reg.get("calculator")
    assert calc is not None
    with pytest.raises(InvalidRequestError) as info:
        reg.compile(replace(calc.spec, upstream_idempotency_key=True), "runtime")
    assert info.value.violations[0].path == "tool.upstream_idempotency_key"
