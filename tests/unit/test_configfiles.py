"""Several configuration files, a base and overlays (agentmesh.configfiles): how a later file merges into
the ones before, where the files come from (arguments, AGENTMESH_CONFIG, --config), errors naming them;
and the repository's two files: a production-safe base and the demo overlay."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentmesh.cli import build_parser, demo_config, main
from agentmesh.config import ConfigError, config_paths, load_settings, overlay

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "agentmesh.yaml"
DEMO = REPO / "agentmesh.demo.yaml"
KEY = "configfiles-test-key-" + "c" * 32


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("AGENTMESH_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AGENTMESH_AUTH_KEY", KEY)


def test_an_overlay_merges_mappings_and_named_lists_and_replaces_the_rest() -> None:
    base = {
        "a": {"x": 1, "y": 2},
        "agents": [{"id": "one", "model": "m1", "tools": ["t1"]}, {"id": "two", "model": "m2"}],
        "backends": [{"name": "b", "models": [{"name": "m", "price": 1}]}],
        "allowlist": ["http://a/"],
        "builtins": ["calc", "shell"],
    }
    extra = {
        "a": {"y": 3, "z": 4},
        "agents": [{"id": "two", "model": "m2b"}, {"id": "three"}],
        "backends": [{"name": "b", "models": [{"name": "m2"}]}],
        "allowlist": ["http://b/"],
        "builtins": [],
    }
    merged = overlay(base, extra)
    assert merged["a"] == {"x": 1, "y": 3, "z": 4}
    # Items of a named list merge by id/name, in place; new ones are appended.
    assert merged["agents"] == [
        {"id": "one", "model": "m1", "tools": ["t1"]},
        {"id": "two", "model": "m2b"},
        {"id": "three"},
    ]
    assert merged["backends"] == [{"name": "b", "models": [{"name": "m", "price": 1}, {"name": "m2"}]}]
    # Plain lists, and an empty list (a way to clear one), replace.
    assert merged["allowlist"] == ["http://b/"] and merged["builtins"] == []
    assert base["a"] == {"x": 1, "y": 2}, "the base is not modified"


def test_files_come_from_arguments_then_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert config_paths([BASE, DEMO]) == [BASE, DEMO]
    assert config_paths(str(BASE)) == [BASE]
    monkeypatch.setenv("AGENTMESH_CONFIG", os.pathsep.join([str(BASE), "", str(DEMO)]))
    assert config_paths() == [BASE, DEMO]
    monkeypatch.delenv("AGENTMESH_CONFIG")
    monkeypatch.chdir(tmp_path)
    assert config_paths() == []


def test_errors_name_the_file_that_has_them(tmp_path: Path) -> None:
    broken = tmp_path / "overlay.yaml"
    broken.write_text("tools: [not, a, mapping\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"overlay\.yaml: not valid YAML"):
        load_settings([BASE, broken])
    broken.write_text("server:\n  grace_period_s: soon\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"agentmesh\.yaml \+ .*overlay\.yaml: server\.grace_period_s"):
        load_settings([BASE, broken])
    broken.write_text("tools:\n  logs_dir: ${UNSET_FOR_THIS_TEST}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"overlay\.yaml: tools\.logs_dir: environment variable UNSET_FOR_THIS_TEST"):
        load_settings([BASE, broken])
    with pytest.raises(ConfigError, match=r"absent\.yaml: cannot read"):
        load_settings([BASE, tmp_path / "absent.yaml"])


def test_the_base_is_production_safe_and_the_overlay_adds_the_demo() -> None:
    base = load_settings(BASE)
    assert [a.id for a in base.agents] == ["assistant"]
    assert base.tools.registry == [] and base.tools.http_allowlist == []
    assert [m.name for m in base.providers.backend("scripted").models] == ["default"]  # type: ignore[union-attr]
    demo = load_settings([BASE, DEMO])
    assert [a.id for a in demo.agents] == ["assistant", "ops"]
    assert {t.name for t in demo.tools.registry} >= {"query_metrics", "restart_service", "run_shell", "notify"}
    scripted = demo.providers.backend("scripted")
    assert scripted is not None and [m.name for m in scripted.models] == ["default", "ops-demo", "nonce-chain"]
    # The overlay keeps everything else of the base (the other backends, the services, the budgets).
    assert [b.name for b in demo.providers.backends] == [b.name for b in base.providers.backends]
    assert demo.services == base.services and demo.context == base.context


def test_the_demo_overlay_is_found_beside_the_base_or_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert demo_config([BASE]) == DEMO
    given = tmp_path / "my-demo.yaml"
    given.write_text("{}\n", encoding="utf-8")
    assert demo_config([BASE], given) == given
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"agentmesh\.demo\.yaml"):
        demo_config([tmp_path / "elsewhere" / "agentmesh.yaml"])
    with pytest.raises(FileNotFoundError, match=r"absent\.yaml"):
        demo_config([BASE], tmp_path / "absent.yaml")


def test_config_may_be_given_more_than_once() -> None:
    args = build_parser().parse_args(["--config", "a.yaml", "--config", "b.yaml", "up", "--demo"])
    assert args.config == [Path("a.yaml"), Path("b.yaml")] and args.demo
    assert not build_parser().parse_args(["up"]).demo


@pytest.mark.parametrize("command", [["up", "--demo"], ["demo"]])
def test_a_missing_demo_overlay_is_exit_2_before_anything_starts(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["--config", str(BASE), *command, "--demo-config", str(tmp_path / "absent.yaml")])
    assert code == 2
    assert "absent.yaml not found" in capsys.readouterr().err
