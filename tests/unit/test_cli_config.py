"""Which configuration the `agentmesh` command uses, from any directory (issue 27).

`find_config`: `--config`, else $AGENTMESH_CONFIG, else ./agentmesh.yaml, else the packaged production-safe
default; the command itself is run from a temporary directory outside the repository.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agentmesh.config import NO_AUTH_KEY, PACKAGED_CONFIG, NoAuthKeyError, find_config, load_settings
from agentmesh.dev.deployfiles import CONFIG_PATH, PACKAGED_CONFIG_PATH

ROOT = Path(__file__).resolve().parents[2]


def _config(directory: Path, port: int, name: str = "agentmesh.yaml", **extra: object) -> Path:
    """A small configuration whose dispatcher port tells which file a command read."""
    data = {"services": {"dispatcher": {"host": "127.0.0.1", "port": port}}, **extra}
    path = directory / name
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


# --- find_config: each step of the order -----------------------------------------------------------


def test_explicit_config_wins_over_everything(tmp_path: Path) -> None:
    _config(tmp_path, 1)
    found = find_config(["a.yaml", "b.yaml"], env={"AGENTMESH_CONFIG": "env.yaml"}, cwd=tmp_path)
    assert found.files == [tmp_path / "a.yaml", tmp_path / "b.yaml"]
    assert found.source == "--config"


def test_environment_variable_is_next(tmp_path: Path) -> None:
    _config(tmp_path, 1)
    found = find_config(None, env={"AGENTMESH_CONFIG": f"/etc/a.yaml{os.pathsep}b.yaml"}, cwd=tmp_path)
    assert found.files == [Path("/etc/a.yaml"), tmp_path / "b.yaml"]
    assert found.source == "$AGENTMESH_CONFIG"


def test_an_empty_environment_variable_is_unset(tmp_path: Path) -> None:
    local = _config(tmp_path, 1)
    assert find_config(None, env={"AGENTMESH_CONFIG": ""}, cwd=tmp_path).files == [local]


def test_the_working_directory_file_is_next(tmp_path: Path) -> None:
    local = _config(tmp_path, 1)
    found = find_config(None, env={}, cwd=tmp_path)
    assert found.files == [local]
    assert found.source == "./agentmesh.yaml"
    assert found.files[0].is_absolute()


def test_a_directory_named_agentmesh_yaml_is_not_a_config(tmp_path: Path) -> None:
    (tmp_path / "agentmesh.yaml").mkdir()
    assert find_config(None, env={}, cwd=tmp_path).files == [PACKAGED_CONFIG]


def test_the_packaged_default_is_last(tmp_path: Path) -> None:
    found = find_config(None, env={}, cwd=tmp_path)
    assert found.files == [PACKAGED_CONFIG]
    assert found.source == "packaged default"
    assert "packaged default" in found.describe()


def test_the_packaged_default_is_the_production_safe_file_verbatim() -> None:
    assert PACKAGED_CONFIG == PACKAGED_CONFIG_PATH
    assert PACKAGED_CONFIG.read_bytes() == CONFIG_PATH.read_bytes(), "run `python -m agentmesh.dev.deployfiles`"
    text = PACKAGED_CONFIG.read_text(encoding="utf-8")
    for demo_only in ("run_shell", "restart_service", "query_metrics", "id: ops"):
        assert demo_only not in text


def test_the_packaged_default_loads_in_dev_and_holds_no_demo_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("AGENTMESH_"):
            monkeypatch.delenv(name)
    settings = load_settings([PACKAGED_CONFIG])
    assert settings.environment == "dev"
    assert settings.tools.registry == []
    assert settings.tools.http_allowlist == []
    assert [agent.id for agent in settings.agents] == ["assistant"]


@pytest.mark.parametrize("environment", ["staging", "prod"])
def test_no_key_outside_dev_is_the_exact_error(monkeypatch: pytest.MonkeyPatch, environment: str) -> None:
    for name in list(os.environ):
        if name.startswith("AGENTMESH_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AGENTMESH_ENVIRONMENT", environment)
    with pytest.raises(NoAuthKeyError) as caught:
        load_settings([PACKAGED_CONFIG])
    assert str(caught.value) == NO_AUTH_KEY
    monkeypatch.setenv("AGENTMESH_AUTH_KEY", "k" * 32)
    assert load_settings([PACKAGED_CONFIG]).environment == environment


def test_no_key_at_all_is_the_exact_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("AGENTMESH_AUTH_KEY", raising=False)
    with pytest.raises(NoAuthKeyError):
        load_settings([_config(tmp_path, 1)])


# --- the command, run from a directory outside the repository -------------------------------------


def _agentmesh(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AGENTMESH_")}
    clean.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "agentmesh.cli", *args],
        cwd=cwd,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _dispatcher_port(output: str) -> str:
    line = next(line for line in output.splitlines() if line.startswith("dispatcher_svc"))
    return line.split()[1]


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    place = tmp_path / "elsewhere"
    place.mkdir()
    assert not (place / "agentmesh.yaml").exists() and ROOT not in place.parents
    return place


def test_command_outside_the_repo_uses_the_packaged_default(outside: Path) -> None:
    token = _agentmesh(outside, "token", "--role", "operator")
    assert token.returncode == 0, token.stderr
    assert token.stdout.strip()
    status = _agentmesh(outside, "status")
    assert _dispatcher_port(status.stdout) == "127.0.0.1:50051"


def test_command_outside_the_repo_without_a_key_outside_dev(outside: Path) -> None:
    result = _agentmesh(outside, "status", env={"AGENTMESH_ENVIRONMENT": "prod"})
    assert result.returncode == 2
    first, second = result.stderr.strip().splitlines()
    assert first == NO_AUTH_KEY
    # Where it looked, and why the key it found does not count.
    assert str(PACKAGED_CONFIG) in second and "AGENTMESH_AUTH_KEY is not set" in second
    assert result.stdout == ""


def test_command_reads_dot_agentmesh_yaml(outside: Path) -> None:
    _config(outside, 51111, auth={"key": "k" * 32})
    assert _dispatcher_port(_agentmesh(outside, "status").stdout) == "127.0.0.1:51111"


def test_command_reads_agentmesh_config_over_dot_file(outside: Path, tmp_path: Path) -> None:
    _config(outside, 51111, auth={"key": "k" * 32})
    other = _config(tmp_path, 51222, name="other.yaml", auth={"key": "k" * 32})
    status = _agentmesh(outside, "status", env={"AGENTMESH_CONFIG": str(other)})
    assert _dispatcher_port(status.stdout) == "127.0.0.1:51222"


def test_command_reads_config_flag_over_the_variable(outside: Path, tmp_path: Path) -> None:
    other = _config(tmp_path, 51222, name="other.yaml", auth={"key": "k" * 32})
    flag = _config(outside, 51333, name="flag.yaml", auth={"key": "k" * 32})
    status = _agentmesh(outside, "--config", "flag.yaml", "status", env={"AGENTMESH_CONFIG": str(other)})
    assert _dispatcher_port(status.stdout) == "127.0.0.1:51333", status.stderr
    assert flag.exists()


@pytest.mark.parametrize(
    ("text", "expected"),
    [("services: [1, 2\n", "not valid YAML"), ("bogus_section: 1\n", "bogus_section: unknown key")],
)
def test_an_invalid_file_is_named_in_the_error(outside: Path, text: str, expected: str) -> None:
    (outside / "agentmesh.yaml").write_text(text, encoding="utf-8")
    result = _agentmesh(outside, "status")
    assert result.returncode == 2
    assert str(outside / "agentmesh.yaml") in result.stderr
    assert expected in result.stderr


def test_a_missing_file_from_the_variable_is_named(outside: Path) -> None:
    result = _agentmesh(outside, "status", env={"AGENTMESH_CONFIG": "missing.yaml"})
    assert result.returncode == 2
    assert str(outside / "missing.yaml") in result.stderr


def test_an_error_from_the_environment_names_the_files_too(outside: Path) -> None:
    result = _agentmesh(outside, "status", env={"AGENTMESH_SERVER_MAX_CONCURRENT_RPCS": "many"})
    assert result.returncode == 2
    assert "AGENTMESH_SERVER_MAX_CONCURRENT_RPCS" in result.stderr
    assert str(PACKAGED_CONFIG) in result.stderr


def test_the_packaged_default_is_package_data() -> None:
    """A non-editable install (the image's `pip install .`) ships the file: pyproject's package-data names it."""
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = data["tool"]["setuptools"]["package-data"]["agentmesh"]
    package = ROOT / "agentmesh"
    assert any(PACKAGED_CONFIG in package.glob(pattern) for pattern in patterns)
