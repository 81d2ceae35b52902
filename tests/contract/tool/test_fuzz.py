"""Fuzz (hypothesis): arbitrary arguments for schema'd tools through the real server. Every result is an
output or a CONTRACT error with at least one violation, and the server never fails the RPC."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentmesh.v1 import common_pb2
from tests.contract.tool.conftest import Client
from tests.contract.tool.fakes import FakeUpstream, http_tool

ORDER_SCHEMA = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string", "pattern": "^ORD-\\d{4}-\\d{4}$", "examples": ["ORD-2025-0001"]},
        "status": {"type": "string", "enum": ["open", "paid", "refunded"]},
        "amount": {"type": "number", "exclusiveMinimum": 0, "maximum": 1000000},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3},
        "customer": {
            "type": "object",
            "properties": {"id": {"type": "integer"}, "email": {"type": "string", "format": "email"}},
            "required": ["id"],
        },
    },
    "required": ["order_id"],
    "additionalProperties": False,
}

scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=30)
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=16,
)
KEYS = [
    "order_id",
    "status",
    "amount",
    "tags",
    "customer",
    "expression",
    "service",
    "level",
    "since",
    "until",
    "contains",
    "limit",
]
near_valid = st.dictionaries(
    st.sampled_from(KEYS),
    json_values
    | st.sampled_from(["ORD-2025-0001", "paid", "payment-svc", "ERROR", "2025-06-01T10:00:00Z", "1+2*3", "sqrt(2)"]),
    max_size=5,
)
TOOLS = ["calculator", "query_logs", "lookup_order"]


@pytest.fixture
async def fuzz_client(tool_service: Any, upstream: FakeUpstream) -> Client:
    extra = {"tools": {"registry": [http_tool("lookup_order", upstream, "/ok", input_schema=ORDER_SCHEMA)]}}
    return Client(await tool_service(extra))


def check(result: Any) -> None:
    kind = result.WhichOneof("outcome")
    assert kind in ("output", "error"), result
    if kind == "error":
        assert result.error.error_class == common_pb2.ERROR_CLASS_CONTRACT, result.error
        assert len(result.error.violations) >= 1, result.error
        assert "Traceback" not in result.error.message


SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    database=None,
)


@SETTINGS
@given(tool=st.sampled_from(TOOLS), arguments=json_values | near_valid)
async def test_arbitrary_json_arguments(fuzz_client: Client, tool: str, arguments: Any) -> None:
    check(await fuzz_client.execute(tool, raw=json.dumps(arguments)))


@SETTINGS
@given(
    tool=st.sampled_from(TOOLS), raw=st.text(max_size=80) | st.binary(max_size=40).map(lambda b: b.decode("latin-1"))
)
async def test_arbitrary_argument_text(fuzz_client: Client, tool: str, raw: str) -> None:
    check(await fuzz_client.execute(tool, raw=raw))
