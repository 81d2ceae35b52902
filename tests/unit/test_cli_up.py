"""`agentmesh up` and `agentmesh run` for a newcomer (issue 27): `up --demo` starts what the demo's tools
call, `up` starts the dispatcher once the rest serves and hands every service the CLI's configuration,
`run` waits for the dispatcher, `audit` finds the Redis a running `up` started. No gRPC, no processes."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

from agentmesh import cli
from agentmesh.cli import supervisor as sup
from agentmesh.cli.demo_ops import LOGS_DIR_ENV, OPS_URL_ENV
from agentmesh.config import Settings, load_settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    for name in list(os.environ):
        if name.startswith("AGENTMESH_"):
            monkeypatch.delenv(name)
    config = tmp_path / "agentmesh.yaml"
    config.write_text(
        "redis: {url: 'redis://127.0.0.1:1/0'}\nauth: {key: 'k-k-k-k-k-k-k-k-k-k-k-k-k-k-k-k'}\n"
        "services: {dispatcher: {host: 127.0.0.1, port: 59871}}\n",
        encoding="utf-8",
    )
    return load_settings([config])


class FakeSupervisor:
    """Stands in for Supervisor in `cmd_up`: records what it was given, checks the demo's helpers."""

    seen: ClassVar[dict[str, Any]] = {}

    def __init__(self, settings: Settings, config_files: Sequence[Path] = (), extra_env: Any = None) -> None:
        FakeSupervisor.seen = {"settings": settings, "configs": list(config_files), "env": dict(extra_env or {})}
        self.redis_url = "redis://fake"

    def start(self, ready_timeout_s: float) -> None:
        env = FakeSupervisor.seen["env"]
        if OPS_URL_ENV in env:
            # The fake ops API answers while the services run, and the service log is written.
            request = urllib.request.Request(env[OPS_URL_ENV] + "/ops/metrics", data=b"{}", method="POST")
            try:
                with urllib.request.urlopen(request, timeout=5) as reply:
                    FakeSupervisor.seen["ops_status"] = reply.status
            except urllib.error.HTTPError as exc:
                FakeSupervisor.seen["ops_status"] = exc.code
            FakeSupervisor.seen["log_bytes"] = (Path(env[LOGS_DIR_ENV]) / "payment-svc.log").stat().st_size

    def exited(self) -> dict[str, int]:
        return {"dispatcher": 1}

    def stop(self) -> dict[str, int]:
        return {}


def test_up_demo_starts_the_fake_ops_api_and_the_service_log(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "Supervisor", FakeSupervisor)
    monkeypatch.setattr(sup, "health_status", lambda *a, **k: "SERVING")
    monkeypatch.setattr(cli, "health_status", lambda *a, **k: "SERVING")
    base = ROOT / "agentmesh.yaml"
    assert cli.main(["--config", str(base), "up", "--demo"]) == 1  # the fake's service "exited"
    seen = FakeSupervisor.seen
    assert seen["configs"] == [base, ROOT / "agentmesh.demo.yaml"]
    assert "ops" in {agent.id for agent in seen["settings"].agents}
    assert seen["ops_status"] < 500 and seen["log_bytes"] > 100_000
    assert "fake ops API http://127.0.0.1:" in capsys.readouterr().out


def test_plain_up_hands_the_found_config_to_the_services(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, settings: Settings
) -> None:
    monkeypatch.setattr(cli, "Supervisor", FakeSupervisor)
    monkeypatch.setattr(cli, "health_status", lambda *a, **k: "SERVING")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["up"]) == 1
    assert FakeSupervisor.seen["configs"] == [tmp_path / "agentmesh.yaml"]
    assert FakeSupervisor.seen["env"] == {}
    child = sup.Supervisor(settings, config_files=FakeSupervisor.seen["configs"]).child_env()
    assert child["AGENTMESH_CONFIG"] == str(tmp_path / "agentmesh.yaml")


class FakeChild:
    def poll(self) -> None:
        return None


def test_the_dispatcher_starts_once_the_others_serve(monkeypatch: pytest.MonkeyPatch, settings: Settings) -> None:
    started: list[str] = []
    serving: set[str] = set()
    log: list[tuple[str, set[str]]] = []

    def popen(argv: list[str], **kwargs: Any) -> FakeChild:
        name = argv[-1].removesuffix("_svc")
        log.append((name, set(serving)))
        started.append(name)
        return FakeChild()

    def health(target: str, timeout_s: float = 2.0, service: str = "") -> str:
        for name in started:
            if sup.health_target(settings, name) == target:
                serving.add(name)
                return "SERVING"
        return "UNREACHABLE"

    monkeypatch.setattr(subprocess, "Popen", popen)
    monkeypatch.setattr(sup, "health_status", health)
    sup.Supervisor(settings).start(ready_timeout_s=5)
    assert [name for name, _ in log] == ["context", "tool", "provider", "dispatcher"]
    assert log[-1][1] == {"context", "tool", "provider"}


def test_wait_serving_waits_then_answers(monkeypatch: pytest.MonkeyPatch, settings: Settings) -> None:
    answers = iter(["UNREACHABLE", "NOT_SERVING", "SERVING"])
    asked: list[str] = []

    def health(target: str, timeout_s: float = 2.0, service: str = "") -> str:
        asked.append(service)
        return next(answers)

    monkeypatch.setattr(sup, "health_status", health)
    monkeypatch.setattr(time, "sleep", lambda s: None)
    waits: list[str] = []
    assert sup.wait_serving(settings, "dispatcher", 30, waits.append)
    assert waits == ["127.0.0.1:59871"] and set(asked) == {"agentmesh.v1.DispatcherService"}
    monkeypatch.setattr(sup, "health_status", lambda *a, **k: "UNREACHABLE")
    assert not sup.wait_serving(settings, "dispatcher", 0, waits.append)
    # A target without our health service (a proxy, say) is not waited for.
    monkeypatch.setattr(sup, "health_status", lambda *a, **k: "UNIMPLEMENTED")
    waits.clear()
    assert not sup.wait_serving(settings, "dispatcher", 30, waits.append)
    assert waits == []


def test_run_waits_for_the_dispatcher_unless_told_not_to(monkeypatch: pytest.MonkeyPatch, settings: Settings) -> None:
    from agentmesh.cli import run_view

    waited: list[float] = []

    def wait(settings: Settings, name: str, timeout_s: float, on_wait: Any) -> bool:
        waited.append(timeout_s)
        return True

    monkeypatch.setattr(sup, "wait_serving", wait)
    monkeypatch.setattr(run_view, "run_command", lambda *a, **k: 0)
    assert cli.main(["run", "assistant", "hi"]) == 0
    assert cli.main(["run", "assistant", "hi", "--wait", "5"]) == 0
    assert cli.main(["run", "assistant", "hi", "--wait", "0"]) == 0
    assert waited == [60.0, 5.0]


def test_audit_finds_the_redis_of_a_running_up(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    for name in list(os.environ):
        if name.startswith("AGENTMESH_"):
            monkeypatch.delenv(name)
    settings = load_settings([ROOT / "agentmesh.yaml"])
    assert settings.redis.url is None
    state = sup.up_state_file(settings)
    assert state.parent == tmp_path and "50051" in state.name
    assert sup.local_redis_url(settings) is None
    state.write_text(json.dumps({"pid": os.getpid(), "redis_url": "redis://127.0.0.1:7/0"}), encoding="utf-8")
    assert sup.local_redis_url(settings) == "redis://127.0.0.1:7/0"
    state.write_text(json.dumps({"pid": 2**22 + 12345, "redis_url": "redis://x"}), encoding="utf-8")
    assert sup.local_redis_url(settings) is None  # that `agentmesh up` is gone
    state.write_text("{torn", encoding="utf-8")
    assert sup.local_redis_url(settings) is None
