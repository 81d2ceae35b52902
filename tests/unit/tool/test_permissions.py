"""tool_svc's permission step (tool_svc/permissions.py): the grant a tool needs on this tool_svc, the
denial that names it and what the token holds, and the pipeline step's answer. Pure: no Redis."""

from __future__ import annotations

import pytest

from agentmesh.errors import AgentmeshError, ErrorCode, PermissionDeniedError
from tool_svc.call import CallState
from tool_svc.model import Caller, CallRequest, Permission, ToolDef
from tool_svc.permissions import CheckPermission, check, required_permission
from tool_svc.registry import RegisteredTool
from tool_svc.validation import SchemaCheck

ANY_ENV = ToolDef(name="restart", description="d", input_schema={}, permission=Permission("*", "ops", "write"))
PINNED = ToolDef(name="logs", description="d", input_schema={}, permission=Permission("staging", "ops", "read"))


def test_the_required_grant() -> None:
    assert required_permission(ANY_ENV, "prod") == "prod:ops:write"
    assert required_permission(ANY_ENV, "dev") == "dev:ops:write"
    assert required_permission(PINNED, "prod") == "staging:ops:read"


def test_a_denial_names_the_missing_grant_the_agent_and_what_the_token_holds() -> None:
    caller = Caller(subject="tok", agent_id="ops-agent", permissions=("prod:ops:read", "prod:k8s:read"))
    with pytest.raises(PermissionDeniedError) as caught:
        check(caller, ANY_ENV, "prod")
    error = caught.value
    assert error.code == ErrorCode.PERMISSION_DENIED and error.missing_permission == "prod:ops:write"
    assert error.message == (
        "ops-agent may not use restart: it needs prod:ops:write; the token grants prod:ops:read, prod:k8s:read"
    )


def test_a_denial_of_a_token_without_grants_says_none() -> None:
    with pytest.raises(PermissionDeniedError) as caught:
        check(Caller(subject="tok"), PINNED, "prod")
    assert caught.value.message == "tok may not use logs: it needs staging:ops:read; the token grants none"


def test_a_granted_call_passes() -> None:
    check(Caller(subject="a", permissions=("prod:ops:write",)), ANY_ENV, "prod")
    check(Caller(subject="a", permissions=("staging:ops:read",)), PINNED, "prod")


def _call(tool: ToolDef, *grants: str) -> CallState:
    return CallState(
        CallRequest("c", tool.name, "{}", "s"),
        Caller(subject="a", agent_id="a", permissions=grants),
        "prod",
        tool=RegisteredTool(tool, SchemaCheck.compile(tool.input_schema), None, "config"),
    )


async def test_the_step_answers_the_denial_or_lets_the_call_on() -> None:
    step = CheckPermission()
    refused = await step(_call(ANY_ENV, "prod:ops:read"))
    assert isinstance(refused, AgentmeshError) and refused.code == ErrorCode.PERMISSION_DENIED
    assert refused.missing_permission == "prod:ops:write"
    assert await step(_call(ANY_ENV, "prod:ops:write")) is None
