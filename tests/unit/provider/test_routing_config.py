"""The providers configuration section and name resolution."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from agentmesh.config import ConfigError, ProvidersSettings, load_settings
from agentmesh.errors import ErrorCode, NotFoundError
from provider_svc.routing import Router

REPO = Path(__file__).resolve().parents[3]


def _settings(**extra: Any) -> ProvidersSettings:
    data: dict[str, Any] = {
        "backends": [
            {"name": "scripted", "type": "scripted", "models": [{"name": "default", "aliases": ["fast"]}]},
            {
                "name": "oa",
                "type": "openai",
                "api_key": "k",
                "default_model": "m2",
                "models": [{"name": "m1"}, {"name": "m2"}],
            },
            {
                "name": "strict",
                "type": "openai",
                "api_key": "k",
                "allow_unlisted_models": False,
                "models": [{"name": "only"}],
            },
        ],
        "aliases": {"smart": "oa/m1"},
    }
    data.update(extra)
    return ProvidersSettings.model_validate(data)


def test_defaults_work_offline() -> None:
    settings = ProvidersSettings()
    assert settings.default_model == "scripted/default"
    assert [(b.name, b.type, b.available) for b in settings.backends] == [("scripted", "scripted", True)]


def test_example_config_loads_and_unset_keys_mean_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    settings = load_settings(REPO / "agentmesh.yaml").providers
    assert {b.name: b.available for b in settings.backends} == {"scripted": True, "openai": False, "anthropic": False}
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    again = load_settings(REPO / "agentmesh.yaml").providers
    openai = again.backend("openai")
    assert openai is not None and openai.available and openai.key == "sk-from-env"
    assert "sk-from-env" not in repr(again)  # a SecretStr


def test_keyless_local_servers() -> None:
    ollama = {"name": "ollama", "type": "openai", "require_api_key": False, "models": [{"name": "llama3"}]}
    settings = _settings(backends=[ollama], default_model="ollama/llama3", aliases={})
    assert settings.backends[0].available


def test_resolution() -> None:
    router = Router(_settings(routing={"code": "smart", "intent": "fast"}))
    assert router.resolve("oa/m1").name == "oa/m1"
    assert router.resolve("oa").name == "oa/m2"  # the backend's default model
    assert router.resolve("scripted").name == "scripted/default"  # the first listed model
    assert router.resolve("smart").name == "oa/m1" and router.resolve("fast").name == "scripted/default"
    assert router.resolve("oa/unlisted").settings is None  # allowed, priced at 0
    assert router.route("", "code") == "smart" and router.route("", "poetry") == "scripted/default"
    assert router.route("oa/m1", "code") == "oa/m1"
    for bad in ("nope/x", "nope", "strict/other", ""):
        with pytest.raises(NotFoundError) as caught:
            router.resolve(bad)
        assert caught.value.code == ErrorCode.NOT_FOUND


def test_fallback_chains_by_requested_name_then_resolved_name() -> None:
    router = Router(_settings(fallbacks={"smart": ["oa/m2", "fast", "oa/m2"], "oa/m2": ["scripted/default"]}))
    assert [r.name for r in router.chain("smart")] == ["oa/m1", "oa/m2", "scripted/default"]
    assert [r.name for r in router.chain("oa")] == ["oa/m2", "scripted/default"]
    assert [r.name for r in router.chain("fast")] == ["scripted/default"]


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        ({"routing": {"code": "typo/model"}}, "routing.code"),
        ({"fallbacks": {"smart": ["ghost"]}}, "fallbacks.smart"),
        ({"aliases": {"smart": "oa/m1", "oa": "oa/m2"}}, "clashes with a backend"),
        ({"aliases": {"a/b": "oa/m1"}}, "contain no '/'"),
        ({"aliases": {"fast": "oa/m1"}}, "defined twice"),
        ({"default_model": "strict/other"}, "lists no model"),
        ({"backends": [{"name": "x", "type": "scripted"}, {"name": "x", "type": "scripted"}], "aliases": {},
          "default_model": "x/y"}, "duplicate"),
        ({"backends": [{"name": "Bad Name", "type": "scripted"}]}, "name"),
        ({"backends": [{"name": "x", "type": "grpc"}]}, "type"),
        ({"backends": [{"name": "x", "type": "scripted", "models": [{"name": "m", "policy": "a:b", "scenario": "s"}]}]},
         "not both"),
        ({"unknown_key": 1}, "unknown_key"),
    ],
)  # fmt: skip
def test_bad_configuration_is_refused(extra: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        _settings(**extra)


def test_errors_name_the_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "agentmesh.yaml"
    path.write_text("providers:\n  routing: {code: nowhere/x}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"agentmesh.yaml.*providers"):
        load_settings(path)


def test_price_routes_are_checked_and_resolve_to_their_candidates() -> None:
    tagged = {
        "backends": [
            {
                "name": "a",
                "type": "scripted",
                "models": [{"name": "x", "tags": ["summarize", "intent"]}, {"name": "y"}],
            },
            {"name": "b", "type": "openai", "api_key": "k", "models": [{"name": "z", "tags": ["summarize"]}]},
        ],
        "default_model": "a/x",
    }
    settings = ProvidersSettings.model_validate(
        {**tagged, "routing": {"summarize": {"choose": "cheapest", "tags": ["summarize"], "models": ["a/y"]}}}
    )
    router = Router(settings)
    route = router.price_route("", "summarize")
    assert route is not None and router.price_route("a/x", "summarize") is None  # a named model wins
    assert [r.name for r in router.candidates(route)] == ["a/x", "b/z", "a/y"]
    assert route.describe() == "cheapest of tags [summarize] and models [a/y]"
    with pytest.raises(ValidationError, match="no model carries every tag"):
        ProvidersSettings.model_validate({**tagged, "routing": {"t": {"choose": "cheapest", "tags": ["nope"]}}})
    with pytest.raises(ValidationError, match="needs tags or models"):
        ProvidersSettings.model_validate({**tagged, "routing": {"t": {"choose": "cheapest"}}})
    with pytest.raises(ValidationError, match="names no backend"):
        ProvidersSettings.model_validate({**tagged, "routing": {"t": {"choose": "cheapest", "models": ["q/r"]}}})


def test_model_health_breaker_and_rate_limit() -> None:
    from agentmesh.config import ModelHealthSettings
    from agentmesh.errors import AgentmeshError
    from provider_svc.health import ModelHealth

    now = [100.0]
    health = ModelHealth(ModelHealthSettings(failure_threshold=2, open_s=10, rate_limited_s=5), clock=lambda: now[0])
    down = AgentmeshError(ErrorCode.UPSTREAM_UNAVAILABLE, "down")
    health.failed("m", down)
    assert health.healthy("m")
    health.failed("m", AgentmeshError(ErrorCode.INVALID_REQUEST, "the request's fault"))
    health.failed("m", down)
    assert not health.healthy("m") and health.why_not("m") == "breaker open"
    now[0] += 10
    assert health.healthy("m")  # half-open: one call may try it
    health.succeeded("m")
    health.failed("m", AgentmeshError(ErrorCode.RATE_LIMITED, "429", retry_after=30))
    assert health.why_not("m") == "rate-limited"
    now[0] += 30
    assert health.healthy("m")
