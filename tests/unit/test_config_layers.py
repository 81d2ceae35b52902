"""Configuration that layers (issue 42): a file of one's own adds to the packaged defaults; `--config` in any
position and repeatable; `inherit_defaults: false`; `agentmesh config show` names each value's source;
`agentmesh init`; a missing `--ca/--cert/--key` file is a one-line error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agentmesh.cli import build_parser, main
from agentmesh.cli.config_view import STARTER_CONFIG, flatten, init_command, sources
from agentmesh.config import PACKAGED_CONFIG, ConfigError, Layer, read_layers, settings_from_layers

MINE = {"agents": [{"id": "helper", "model": "scripted/default", "tools": ["calculator"]}]}


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("AGENTMESH_"):
            monkeypatch.delenv(name)


def write(path: Path, data: object) -> Path:
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_a_file_of_ones_own_adds_to_the_packaged_defaults(tmp_path: Path) -> None:
    layers = read_layers([write(tmp_path / "mine.yaml", MINE)])
    assert [layer.label for layer in layers] == ["packaged default", str(tmp_path / "mine.yaml")]
    settings = settings_from_layers(layers)
    assert [a.id for a in settings.agents] == ["assistant", "helper"]  # merged by id
    assert settings.services.dispatcher.port == 50051  # the defaults' values stand
    assert settings.auth.key is not None  # no "no auth key" for a file that adds an agent


def test_an_overlay_updates_a_default_agent_by_id(tmp_path: Path) -> None:
    changed = write(tmp_path / "c.yaml", {"agents": [{"id": "assistant", "max_steps": 3}]})
    assistant = settings_from_layers(read_layers([changed])).agents[0]
    assert (assistant.id, assistant.max_steps, assistant.tools) == ("assistant", 3, ["calculator"])


def test_inherit_defaults_false_is_a_whole_configuration(tmp_path: Path) -> None:
    whole = write(tmp_path / "whole.yaml", {"inherit_defaults": False, "auth": {"key": "k" * 32}, **MINE})
    layers = read_layers([whole])
    assert [layer.label for layer in layers] == [str(whole)]
    assert "inherit_defaults" not in layers[0].data
    assert [a.id for a in settings_from_layers(layers).agents] == ["helper"]
    with pytest.raises(ConfigError, match="inherit_defaults: must be true or false"):
        read_layers([write(tmp_path / "bad.yaml", {"inherit_defaults": "no"})])


def test_the_packaged_file_is_read_once() -> None:
    assert [layer.label for layer in read_layers([PACKAGED_CONFIG])] == ["packaged default"]


def test_config_in_any_position_and_repeated() -> None:
    parser = build_parser()
    args = parser.parse_args(["--config", "a.yaml", "run", "helper", "hi", "--config", "b.yaml", "--config", "c.yaml"])
    assert [*args.config, *args.config_after] == [Path("a.yaml"), Path("b.yaml"), Path("c.yaml")]
    nested = parser.parse_args(["mcp", "serve", "--config", "d.yaml"])
    assert nested.config_after == [Path("d.yaml")]


def test_sources_name_the_file_the_variable_or_the_default() -> None:
    layers = [
        Layer(
            "packaged default",
            PACKAGED_CONFIG,
            {"server": {"grace_period_s": 10}, "agents": [{"id": "a", "model": "x"}]},
        ),
        Layer("mine.yaml", Path("mine.yaml"), {"agents": [{"id": "a", "max_steps": 2}], "tools": {"registry": []}}),
    ]
    effective = flatten(
        {
            "server": {"grace_period_s": 10, "max_concurrent_rpcs": 7, "keepalive_time_s": 30},
            "agents": [{"id": "a", "model": "x", "max_steps": 2, "tools": []}],
            "tools": {"registry": []},
        }
    )
    found = sources(effective, layers, env={"AGENTMESH_SERVER_MAX_CONCURRENT_RPCS": "7"})
    assert found == {
        "server.grace_period_s": "packaged default",
        "server.max_concurrent_rpcs": "environment AGENTMESH_SERVER_MAX_CONCURRENT_RPCS",
        "server.keepalive_time_s": "default",
        "agents[a].model": "packaged default",
        "agents[a].max_steps": "mine.yaml",
        "agents[a].tools": "default",
        "tools.registry": "mine.yaml",
    }


def test_config_show_prints_every_value_with_its_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mine = write(tmp_path / "mine.yaml", MINE)
    assert main(["config", "show", "agents", "--config", str(mine), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["agents[helper].model"] == {"value": "scripted/default", "source": str(mine)}
    assert shown["agents[assistant].tools"] == {"value": ["calculator"], "source": "packaged default"}
    assert shown["agents[helper].max_steps"]["source"] == "default"
    assert main(["--config", str(mine), "config", "show", "auth.key"]) == 0
    assert "**********" in capsys.readouterr().out  # secrets masked
    assert main(["config", "show", "no_such_section"]) == 1


def test_init_writes_a_starter_that_loads_and_never_overwrites(tmp_path: Path) -> None:
    assert init_command(tmp_path) == 0
    assert (tmp_path / "agentmesh.yaml").read_text(encoding="utf-8") == STARTER_CONFIG
    settings = settings_from_layers(read_layers([tmp_path / "agentmesh.yaml"]))
    helper = next(a for a in settings.agents if a.id == "helper")
    assert helper.tools == ["mcp.mytools"] and settings.tools.mcp_servers[0].args == ["tools.py"]
    compile((tmp_path / "tools.py").read_text(encoding="utf-8"), "tools.py", "exec")
    (tmp_path / "tools.py").write_text("mine", encoding="utf-8")
    assert init_command(tmp_path) == 2
    assert (tmp_path / "tools.py").read_text(encoding="utf-8") == "mine"
    assert init_command(tmp_path, force=True) == 0


@pytest.mark.parametrize("flag", ["--ca", "--cert", "--key"])
def test_a_missing_tls_file_is_one_line_and_exit_2(tmp_path: Path, flag: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "agentmesh.cli", "run", "assistant", "hi", flag, str(tmp_path / "absent.pem")],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("AGENTMESH_")},
    )
    assert result.returncode == 2
    assert result.stderr.strip() == f"agentmesh: {flag} {tmp_path / 'absent.pem'}: no such file"
