"""Configuration: YAML + AGENTMESH_* overrides + ${VAR} secrets, and errors that name the key."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from agentmesh.config import DEV_AUTH_KEY, NO_AUTH_KEY, ConfigError, load_settings
from agentmesh.tokens import verify_token

REPO = Path(__file__).resolve().parents[2]
GOOD_KEY = "k" * 40


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Tests control every AGENTMESH_* variable themselves, and never pick up ./agentmesh.yaml.
    import os

    for name in [n for n in os.environ if n.startswith("AGENTMESH_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agentmesh.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_follow_design(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTMESH_AUTH_KEY", GOOD_KEY)
    settings = load_settings()
    ports = {name: settings.services.endpoint(name).port for name in ("dispatcher", "context", "tool", "provider")}
    assert ports == {"dispatcher": 50051, "context": 50052, "tool": 50053, "provider": 50054}
    assert settings.server.max_message_bytes == 32 * 1024 * 1024
    assert settings.redis.url is None


def test_yaml_values_and_interpolation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_SECRET", "s3cret-value")
    path = write(
        tmp_path,
        "auth:\n  key: ${MY_SECRET}\nredis:\n  url: ${REDIS_URL_UNSET:-redis://127.0.0.1:7000}\n"
        "services:\n  tool: {host: 0.0.0.0, port: 6053}\n",
    )
    settings = load_settings(path)
    assert settings.auth.key is not None and settings.auth.key.get_secret_value() == "s3cret-value"
    assert settings.redis.url == "redis://127.0.0.1:7000"
    assert settings.services.tool.bind_address == "0.0.0.0:6053"
    # A wildcard bind is dialled on loopback.
    assert settings.services.tool.dial_target == "127.0.0.1:6053"
    # The secret never shows in a repr (logs print settings).
    assert "s3cret-value" not in repr(settings)


def test_env_overrides_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, f"auth:\n  key: {GOOD_KEY}\nredis:\n  url: redis://file:1\n  socket_timeout_s: 9\n")
    monkeypatch.setenv("AGENTMESH_REDIS_URL", "redis://env:2")
    monkeypatch.setenv("AGENTMESH_SERVER_MAX_CONCURRENT_RPCS", "17")
    monkeypatch.setenv("AGENTMESH_SERVICES", '{"tool": {"port": 6001, "target": "dns:///tool:6001"}}')
    settings = load_settings(path)
    assert settings.redis.url == "redis://env:2"
    assert settings.redis.socket_timeout_s == 9  # the file's value survives a sibling override
    assert settings.server.max_concurrent_rpcs == 17
    assert settings.services.tool.dial_target == "dns:///tool:6001"


def test_config_file_from_env_var(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "other.yaml"
    path.write_text(f"environment: staging\nauth:\n  key: {GOOD_KEY}\n", encoding="utf-8")
    monkeypatch.setenv("AGENTMESH_CONFIG", str(path))
    assert load_settings().environment == "staging"


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        # unknown key, top level and nested
        ("colour: blue\n", {}, ["agentmesh.yaml", "colour", "unknown key"]),
        ("redis:\n  urll: redis://x\n", {}, ["agentmesh.yaml", "redis.urll", "unknown key"]),
        # wrong type
        (
            "server:\n  max_concurrent_rpcs: many\n",
            {},
            ["agentmesh.yaml", "server.max_concurrent_rpcs", "integer"],
        ),
        ("services:\n  tool: {port: 70000}\n", {}, ["agentmesh.yaml", "services.tool.port", "65535"]),
        (
            "dispatcher:\n  foreign_event_poll_s: 0\n",
            {},
            ["agentmesh.yaml", "dispatcher.foreign_event_poll_s", "greater than 0"],
        ),
        ("environment: production\n", {}, ["agentmesh.yaml", "environment"]),
        # missing secret env var
        (
            "auth:\n  key: ${NOT_SET_ANYWHERE}\n",
            {},
            ["agentmesh.yaml", "auth.key", "NOT_SET_ANYWHERE", "not set"],
        ),
        # bad value from an environment override names the variable
        ("{}\n", {"AGENTMESH_REDIS_SOCKET_TIMEOUT_S": "soon"}, ["AGENTMESH_REDIS_SOCKET_TIMEOUT_S", "redis"]),
        ("{}\n", {"AGENTMESH_REDIS_NOPE": "1"}, ["AGENTMESH_REDIS_NOPE", "redis.nope", "unknown key"]),
        # not a mapping / not YAML
        ("- a\n- b\n", {}, ["agentmesh.yaml", "mapping"]),
        ("redis: [unclosed\n", {}, ["agentmesh.yaml", "YAML"]),
    ],
)
def test_bad_config_names_file_and_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, env: dict[str, str], expected: list[str]
) -> None:
    monkeypatch.setenv("AGENTMESH_AUTH_KEY", GOOD_KEY)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    for fragment in expected:
        assert fragment in str(info.value)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(tmp_path / "absent.yaml")


def test_auth_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=rf"^{re.escape(NO_AUTH_KEY)}$"):
        load_settings()
    with pytest.raises(ConfigError, match=rf"^{re.escape(NO_AUTH_KEY)}$"):
        load_settings(overrides={"environment": "prod", "auth": {"key": DEV_AUTH_KEY}})
    with pytest.raises(ConfigError, match="at least 32 bytes"):
        load_settings(overrides={"environment": "prod", "auth": {"key": "short-key"}})
    with pytest.raises(ConfigError, match="dev only"):
        load_settings(overrides={"environment": "staging", "auth": {"mode": "disabled"}})
    assert load_settings(overrides={"auth": {"mode": "disabled"}}).auth.mode == "disabled"
    assert load_settings(overrides={"environment": "prod", "auth": {"key": GOOD_KEY}}).environment == "prod"


def test_idempotency_records_outlive_resumable_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A FAILED task can be resumed for dispatcher.task_ttl_s and repeats its calls with the same keys:
    tools.idempotency_ttl_s below it fails the load, naming both keys and both values."""
    monkeypatch.setenv("AGENTMESH_AUTH_KEY", GOOD_KEY)
    defaults = load_settings()
    assert defaults.tools.idempotency_ttl_s == 8 * 86400 >= defaults.dispatcher.task_ttl_s == 7 * 86400
    with pytest.raises(ConfigError) as info:
        load_settings(overrides={"tools": {"idempotency_ttl_s": 86400}})
    for fragment in ("tools.idempotency_ttl_s (86400)", "dispatcher.task_ttl_s (604800)"):
        assert fragment in str(info.value)
    # Equal is enough; raising task_ttl_s alone past the records' lifetime fails too, from the environment as well.
    assert load_settings(overrides={"tools": {"idempotency_ttl_s": 604800}}).tools.idempotency_ttl_s == 604800
    monkeypatch.setenv("AGENTMESH_DISPATCHER_TASK_TTL_S", str(30 * 86400))
    with pytest.raises(ConfigError, match=r"tools\.idempotency_ttl_s \(691200\).*dispatcher\.task_ttl_s \(2592000\)"):
        load_settings()
    longer = {"tools": {"idempotency_ttl_s": 31 * 86400}, "context": {"session_ttl_s": 30 * 86400}}
    assert load_settings(overrides=longer).dispatcher.task_ttl_s == 30 * 86400


def test_sessions_outlive_their_newest_task(monkeypatch: pytest.MonkeyPatch) -> None:
    """A session's newest task can be resumed or continued for dispatcher.task_ttl_s after it ended:
    context.session_ttl_s (the idle time after the session's last message) below it fails the load;
    0 (sessions kept until deleted) and anything at least as long load."""
    monkeypatch.setenv("AGENTMESH_AUTH_KEY", GOOD_KEY)
    defaults = load_settings()
    assert defaults.context.session_ttl_s == defaults.dispatcher.task_ttl_s == 7 * 86400
    with pytest.raises(ConfigError) as info:
        load_settings(overrides={"context": {"session_ttl_s": 86400}})
    for fragment in ("context.session_ttl_s (86400)", "dispatcher.task_ttl_s (604800)", "outlive its newest task"):
        assert fragment in str(info.value)
    assert load_settings(overrides={"context": {"session_ttl_s": 0}}).context.session_ttl_s == 0
    short = {"context": {"session_ttl_s": 3600}, "dispatcher": {"task_ttl_s": 3600}}
    assert load_settings(overrides=short).context.session_ttl_s == 3600


def test_the_repositorys_configurations_keep_records_past_resumable_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTMESH_AUTH_KEY", GOOD_KEY)
    settings = load_settings(REPO / "agentmesh.yaml")
    assert settings.tools.idempotency_ttl_s >= settings.dispatcher.task_ttl_s


@pytest.mark.parametrize(
    ("text", "env", "fragment"),
    [
        ("bogus_section: 1\n", {}, "bogus_section: unknown key"),
        (
            "tools:\n  idempotency_ttl_s: 86400\n",
            {},
            "tools.idempotency_ttl_s (86400) must be at least dispatcher.task_ttl_s (604800)",
        ),
        ("server:\n  grace_period_s: soon\n", {}, "server.grace_period_s"),
        (
            "auth:\n  key: ${UNSET_SECRET_FOR_TEST}\n",
            {},
            "auth.key: environment variable UNSET_SECRET_FOR_TEST",
        ),
    ],
)
def test_service_process_exits_nonzero_on_bad_config(
    tmp_path: Path, text: str, env: dict[str, str], fragment: str
) -> None:
    """A service started on a bad config exits 2 and says which key in which file."""
    path = write(tmp_path, text)
    result = subprocess.run(
        [sys.executable, "-m", "tool_svc", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "AGENTMESH_AUTH_KEY": GOOD_KEY, **env},
    )
    assert result.returncode == 2, result.stderr
    assert str(path) in result.stderr
    assert fragment in result.stderr
    assert "Traceback" not in result.stderr


# --- variables that replace a whole section must hold JSON (issue 25) -------------------------------


@pytest.mark.parametrize(
    ("name", "value", "fragments"),
    [
        # What an example client once exported for its own use: the dispatcher's address.
        ("AGENTMESH_DISPATCHER", "localhost:50054", ["AGENTMESH_DISPATCHER='localhost:50054'", "JSON object",
                                                     "AGENTMESH_DISPATCHER_<KEY>", "another program"]),
        ("agentmesh_dispatcher", "localhost:50054", ["agentmesh_dispatcher=", "replaces dispatcher"]),
        ("AGENTMESH_REDIS", "", ["AGENTMESH_REDIS=''", "not JSON"]),
        ("AGENTMESH_SERVICES", '{"tool": {"port": 1}', ["AGENTMESH_SERVICES=", "replaces services"]),
        ("AGENTMESH_SERVICES_TOOL", "tool:6053", ["AGENTMESH_SERVICES_TOOL=", "replaces services.tool", "JSON object"]),
        ("AGENTMESH_AGENTS", "ops", ["AGENTMESH_AGENTS='ops'", "JSON array"]),
        ("AGENTMESH_TOOLS_HTTP_ALLOWLIST", "example.com", ["replaces tools.http_allowlist", "JSON array"]),
    ],
)  # fmt: skip
def test_a_section_variable_that_is_not_json_is_named(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, fragments: list[str]
) -> None:
    monkeypatch.setenv("AGENTMESH_AUTH_KEY", GOOD_KEY)
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    for fragment in fragments:
        assert fragment in str(info.value)
    assert "EnvSettingsSource" not in str(info.value)


def test_a_long_bad_value_is_shortened_in_the_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTMESH_AUTH_KEY", GOOD_KEY)
    monkeypatch.setenv("AGENTMESH_CONTEXT", "x" * 5000)
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert "AGENTMESH_CONTEXT='" + "x" * 57 + "...'" in str(info.value)
    assert len(str(info.value)) < 500


def test_json_section_variables_still_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTMESH_AUTH_KEY", GOOD_KEY)
    monkeypatch.setenv("AGENTMESH_DISPATCHER", '{"claim_idle_s": 30}')
    monkeypatch.setenv("AGENTMESH_SERVICES_TOOL", '{"port": 6099}')
    monkeypatch.setenv("AGENTMESH_AGENTS", '[{"id": "ops", "model": "scripted/default"}]')
    settings = load_settings()
    assert settings.dispatcher.claim_idle_s == 30
    assert settings.services.tool.port == 6099
    assert [a.id for a in settings.agents] == ["ops"]
    # Valid JSON of the wrong shape is still pydantic's to refuse, naming the variable.
    monkeypatch.setenv("AGENTMESH_DISPATCHER", "5")
    with pytest.raises(ConfigError, match="environment variable AGENTMESH_DISPATCHER: dispatcher"):
        load_settings()


def test_the_json_variables_are_exactly_those_pydantic_settings_parses_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    """check_json_variables refuses no value pydantic-settings would have taken as a plain string."""
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    from agentmesh.config import Settings, json_variables

    names = json_variables()
    assert {"AGENTMESH_DISPATCHER", "AGENTMESH_SERVICES", "AGENTMESH_SERVICES_TOOL", "AGENTMESH_AGENTS"} <= set(names)
    assert "AGENTMESH_ENVIRONMENT" not in names and "AGENTMESH_REDIS_URL" not in names
    monkeypatch.setenv("AGENTMESH_AUTH_KEY", GOOD_KEY)
    for name in names:
        monkeypatch.setenv(name, "not-json")
        # pydantic-settings refuses it itself, or (an optional section key, e.g. console.oidc) keeps the
        # string, which the model then refuses: either way no plain string was taken.
        with pytest.raises((SettingsError, ValidationError)):
            Settings()
        monkeypatch.delenv(name)


def test_the_cli_names_the_bad_variable_and_ignores_the_example_clients_variables(tmp_path: Path) -> None:
    """`agentmesh token` in a shell with a stray AGENTMESH_DISPATCHER stops with exit 2 naming it; the
    example clients' own AM_EXAMPLE_* variables are nothing to agentmesh."""
    base = {"PATH": "/usr/bin:/bin", "AGENTMESH_AUTH_KEY": GOOD_KEY, "HOME": str(tmp_path)}
    command = [sys.executable, "-m", "agentmesh.cli", "token", "--role", "operator"]
    broken = subprocess.run(
        command, capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env={**base, "AGENTMESH_DISPATCHER": "localhost:50054"},
    )  # fmt: skip
    assert broken.returncode == 2
    assert broken.stdout == ""
    assert "environment variable AGENTMESH_DISPATCHER='localhost:50054' is not JSON" in broken.stderr
    assert "Traceback" not in broken.stderr
    fine = subprocess.run(
        command, capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env={**base, "AM_EXAMPLE_DISPATCHER": "localhost:50054", "AM_EXAMPLE_TOKEN": "x"},
    )  # fmt: skip
    assert fine.returncode == 0, fine.stderr
    identity = verify_token(GOOD_KEY.encode(), fine.stdout.strip())
    assert identity.roles == frozenset({"operator"})
