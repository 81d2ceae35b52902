"""`make demo` (agentmesh demo) itself, on free ports: it must report every check as passed."""

from __future__ import annotations

import json
import os

import pytest

from agentmesh.cli.demo import run_demo
from agentmesh.config import load_settings
from tests.e2e.conftest import AUTH_KEY, REPO, free_port

pytestmark = pytest.mark.e2e


def test_make_demo_runs_the_scenario_and_stops_everything(
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
    code = run_demo(load_settings(configs), configs)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "demo OK" in out
    for line in (
        "CORRECTION",
        "FALLBACK",
        "plan:    restart_service",
        "impact:  Rolling restart",
        "approved by demo-approver (a second operator: demo-operator started the task and may not)",
        "[x] approved by a second operator",
        "status       ABORTED",
        "== context tokens per step (run 1) against the raw equivalent",
        "POST /ops/restart  1",
        "POST /ops/shell    0",
        "invoke_agent ops [dispatcher_svc INTERNAL]",
        "stopped: context_svc=0, tool_svc=0, provider_svc=0, dispatcher_svc=0",
    ):
        assert line in out, line
