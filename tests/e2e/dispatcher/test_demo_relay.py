"""`agentmesh demo relay` itself, on free ports (issue 44): five agents hand the alert on over four service
processes; it must print each hop summary with its facts and citations, the verifier's two verdicts on the log
analyst's handoff (its unsupported root cause rejected once), and report every check as passed."""

from __future__ import annotations

import json
import os

import pytest

from agentmesh.cli.demo import run_demo
from agentmesh.config import load_settings
from tests.e2e.conftest import AUTH_KEY, REPO, free_port

pytestmark = pytest.mark.e2e


def test_demo_relay_hands_the_alert_on_and_stops_everything(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in list(os.environ):
        if name.startswith(("AGENTMESH_", "OTEL_")):
            monkeypatch.delenv(name)
    services = {
        name: {"host": "127.0.0.1", "port": free_port(), "http_port": 0}
        for name in ("dispatcher", "context", "tool", "provider")
    }
    monkeypatch.setenv("AGENTMESH_SERVICES", json.dumps(services))
    monkeypatch.setenv("AGENTMESH_AUTH_KEY", AUTH_KEY)
    monkeypatch.chdir(REPO)
    configs = [REPO / "agentmesh.yaml", REPO / "agentmesh.demo.yaml"]
    code = run_demo(load_settings(configs), configs, scenario="relay")
    out = capsys.readouterr().out
    assert code == 0, out
    assert "demo OK" in out
    for line in (
        "== hop 1: relay_triage -> relay_logs",
        "== hop 4: relay_reporter -> relay_",
        "- pod: checkout-3f9a-kq7zt [message #2]",  # cited in the triage agent's tool output
        "Inferred facts (not checked):",
        "== tokens each hop carried against the transcript it replaced",
        "[x] every planted value reached the last agent",
        "== verifier relay_checker on the log analyst's handoff: rejected (root cause = 'a cache leak in v2.1': "
        "its citation does not support it (value_not_in_source))",
        "== verifier relay_checker on the log analyst's handoff: accepted (-)",
        "[x] the verifier rejected the unsupported root cause once, then accepted",
    ):
        assert line in out, line
