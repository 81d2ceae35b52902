"""The small pieces of issue 22 without a server: where a call's token is read from, the TLS settings,
and the CLI's `--ca/--cert/--key` before or after the sub-command."""

from __future__ import annotations

import pytest

from agentmesh.cli import _tls_overrides, build_parser
from agentmesh.config import TlsSettings
from agentmesh.rpc.auth import call_token
from agentmesh.tokens import TokenError


def test_the_call_token_comes_from_our_header_else_a_bearer_authorization() -> None:
    assert call_token((("x-agentmesh-identity", "ours"), ("authorization", "Bearer theirs"))) == "ours"
    assert call_token((("authorization", "Bearer a.b.c"),)) == "a.b.c"
    assert call_token((("authorization", "bearer   a.b.c  "),)) == "a.b.c"
    assert call_token(()) is None and call_token(None) is None
    for header in ("Basic dXNlcjpw", "Bearer", "Bearer   ", "a.b.c"):
        with pytest.raises(TokenError, match="Bearer <token>"):
            call_token((("authorization", header),))


def test_tls_settings_need_a_ca_when_enabled_and_a_key_with_a_certificate() -> None:
    with pytest.raises(ValueError, match="needs ca_file"):
        TlsSettings(enabled=True)
    with pytest.raises(ValueError, match="both or neither"):
        TlsSettings(enabled=True, ca_file="ca.pem", cert_file="me.pem")
    assert TlsSettings(enabled=True, ca_file="ca.pem").cert_file is None
    assert not TlsSettings().enabled


@pytest.mark.parametrize(
    "argv",
    [
        ["--ca", "ca.pem", "--cert", "me.pem", "--key", "me.key", "probe", "host:1"],
        ["probe", "host:1", "--ca", "ca.pem", "--cert", "me.pem", "--key", "me.key"],
        ["--ca", "ca.pem", "probe", "host:1", "--cert", "me.pem", "--key", "me.key"],
    ],
)
def test_tls_flags_work_before_and_after_the_sub_command(argv: list[str]) -> None:
    overrides = _tls_overrides(build_parser().parse_args(argv))
    assert overrides == {"tls": {"enabled": True, "ca_file": "ca.pem", "cert_file": "me.pem", "key_file": "me.key"}}
    assert _tls_overrides(build_parser().parse_args(["probe", "host:1"])) == {}
