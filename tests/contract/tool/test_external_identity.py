"""Identities from outside, through the real edge of tool_svc (issue 22, docs/design.md §9).

- a JWT of a configured OIDC issuer sent as `authorization: Bearer` is verified against the issuer's
  JWKS (served locally), mapped to an agent and grants, and ExecuteTool honours those grants;
- a JWT with a bad signature, a wrong audience or an unknown kid, and a malformed authorization
  header, are UNAUTHENTICATED before the request is decoded;
- `agentmesh token --agent ops --permission 'dev:ops.*:read'` mints a token ExecuteTool accepts (an
  admin token without grants is refused the tool, as it should be).
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
import yaml

from agentmesh.cli import main as agentmesh_main
from agentmesh.errors import ErrorCode
from agentmesh.rpc.status import from_rpc_error
from tests.conftest import TEST_AUTH_KEY
from tests.contract.tool.conftest import Client, error_name
from tests.jwks import Issuer, new_key

QUERY = {"service": "payment-svc", "level": "ERROR"}


@pytest.fixture
def idp() -> Iterator[Issuer]:
    with Issuer() as issuer:
        yield issuer


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


async def test_a_jwt_bearer_is_verified_mapped_and_its_grants_apply(tool_service: Any, idp: Issuer) -> None:
    svc = await tool_service({"auth": {"oidc": [idp.settings(subject_prefix="idp:")]}})
    c = Client(svc)
    token = idp.token(sub="ops-bot", agentmesh_agent="ops", agentmesh_permissions=["dev:ops.*:read"])
    result = await c.execute("query_logs", QUERY, metadata=bearer(token))
    assert "ORD-2025-0002" in result.output.inline, result
    # The grants are the token's: a write it was not granted is refused in the typed result.
    denied = await c.execute("restart_service", {"service": "payment-svc"}, metadata=bearer(token))
    assert error_name(denied) == "PERMISSION_DENIED"

    stranger = new_key("RS256")
    refused = {
        "bad signature": idp.token(new_key("RS256", kid=idp.keys[0].kid), agentmesh_agent="ops"),
        "audience": idp.token(agentmesh_agent="ops", aud="another-service"),
        "unknown key id": idp.token(stranger, agentmesh_agent="ops"),
        "expired": idp.token(agentmesh_agent="ops", iat=1, exp=2),
    }
    for reason, bad in refused.items():
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await c.execute("query_logs", QUERY, metadata=bearer(bad))
        error = from_rpc_error(info.value)
        assert error.code is ErrorCode.UNAUTHENTICATED and reason in error.message, (reason, error.message)
    for header in ("Basic dXNlcjpwYXNz", "Bearer", token):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await c.execute("query_logs", QUERY, metadata=(("authorization", header),))
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED, header


def _cli_token(tmp_path: Path, *args: str) -> str:
    config = tmp_path / "cli.yaml"
    config.write_text(yaml.safe_dump({"auth": {"key": TEST_AUTH_KEY}}), encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = agentmesh_main(["--config", str(config), "token", *args])
    assert code == 0, err.getvalue()
    return out.getvalue().strip()


async def test_agentmesh_token_mints_agents_with_grants_that_execute_tool_accepts(
    tool_service: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(os.environ):
        if name.startswith("AGENTMESH_"):
            monkeypatch.delenv(name)
    svc = await tool_service()
    c = Client(svc)
    token = _cli_token(tmp_path, "--agent", "ops", "--permission", "dev:ops.*:read")
    identity = svc.host.authenticator.verify(token)
    assert (identity.subject, identity.agent_id, identity.roles) == ("ops", "ops", frozenset({"agent"}))
    for metadata in ((("x-agentmesh-identity", token),), bearer(token)):
        result = await c.execute("query_logs", QUERY, metadata=metadata)
        assert "ORD-2025-0002" in result.output.inline, result
    # Without the grant, or as an admin with none: refused the tool (grants, not roles, open tools).
    for args in (("--agent", "ops"), ("--role", "admin", "--subject", "root")):
        result = await c.execute("query_logs", QUERY, metadata=bearer(_cli_token(tmp_path, *args)))
        assert error_name(result) == "PERMISSION_DENIED", args


def test_agentmesh_token_refuses_bad_arguments(tmp_path: Path) -> None:
    config = tmp_path / "cli.yaml"
    config.write_text(yaml.safe_dump({"auth": {"key": TEST_AUTH_KEY}}), encoding="utf-8")
    for args in (["--role", "agent"], ["--agent", "ops", "--permission", "ops.read"], []):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            assert agentmesh_main(["--config", str(config), "token", *args]) == 2, args
        assert "agentmesh token:" in err.getvalue()
