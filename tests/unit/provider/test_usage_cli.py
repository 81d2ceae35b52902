"""`agentmesh usage`: argument errors, an unreachable provider_svc, the table layout."""

from __future__ import annotations

import datetime as dt
import socket
from pathlib import Path

import pytest

from agentmesh.cli import main
from agentmesh.cli.usage_report import format_table, usage_command
from agentmesh.config import Settings, load_settings


def _settings(tmp_path: Path, port: int) -> Settings:
    path = tmp_path / "agentmesh.yaml"
    path.write_text("{}\n", encoding="utf-8")
    return load_settings(path, overrides={"auth": {"key": "k" * 40}, "services": {"provider": {"port": port}}})


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = _settings(tmp_path, _closed_port())
    assert usage_command(settings, days=0) == 2
    assert usage_command(settings, start=dt.date(2025, 2, 1), end=dt.date(2025, 1, 1)) == 2
    with pytest.raises(SystemExit):
        main(["usage", "--since", "yesterday"])
    assert "not a date" in capsys.readouterr().err


def test_unreachable_provider(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = _settings(tmp_path, _closed_port())
    assert usage_command(settings, days=7, timeout_s=2) == 1
    assert "UNAVAILABLE" in capsys.readouterr().err


def test_table() -> None:
    rows = [
        {"day": "2025-06-01", "agent_id": "ops", "provider": "openai", "model": "gpt-4o", "calls": 2,
         "input_tokens": 1200, "output_tokens": 300, "cost_usd": 0.006, "avg_latency_ms": 812.5},
        {"day": "2025-06-01", "agent_id": "ops", "provider": "scripted", "model": "default", "calls": 5,
         "input_tokens": 50, "output_tokens": 40, "cost_usd": 0.0, "avg_latency_ms": 1.0},
    ]  # fmt: skip
    lines = format_table(rows).splitlines()
    assert lines[0].split() == ["day", "agent", "provider", "model", "calls", "input", "tok", "output", "tok", "cost",
                                "USD", "avg", "ms"]  # fmt: skip
    assert lines[2].split() == ["2025-06-01", "ops", "openai", "gpt-4o", "2", "1200", "300", "0.006000", "812.5"]
    assert lines[-1].split() == ["total", "7", "1250", "340", "0.006000"]
