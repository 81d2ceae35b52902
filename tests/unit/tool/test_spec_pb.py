"""tool_svc.server.spec_to_pb builds each ToolDef's ToolSpec once (issue 45): the same answer as a fresh
build, a changed ToolDef (a new object) or another `unavailable` built anew, and a response that
changes its copy leaves the remembered one alone."""

from __future__ import annotations

from dataclasses import replace

from agentmesh.v1 import tool_pb2
from tool_svc.model import ToolDef
from tool_svc.server import _spec_pb, spec_to_pb


def test_a_tooldef_is_built_once_and_a_new_one_anew() -> None:
    spec = ToolDef(name="adder", description="adds", input_schema={"type": "object"}, executor="builtin")
    first = spec_to_pb(spec)
    assert first == _spec_pb(spec, "")
    assert spec_to_pb(spec) is first
    assert spec_to_pb(spec, unavailable="breaker open").unavailable_reason == "breaker open"
    changed = replace(spec, description="adds two numbers")
    assert spec_to_pb(changed).description == "adds two numbers"
    assert spec_to_pb(spec).description == "adds"
    reply = tool_pb2.ListToolsResponse(tools=[spec_to_pb(spec)])
    reply.tools[0].description = "edited in the response"
    assert spec_to_pb(spec).description == "adds"
