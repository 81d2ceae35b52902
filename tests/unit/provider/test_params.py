"""The table-driven parameter mapping: every (provider, parameter) row, ranges, drop vs reject, tool choice."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from agentmesh.errors import ErrorCode, InvalidRequestError
from provider_svc.models.base import Sampling, ToolChoice
from provider_svc.params import PARAM_TABLE, map_sampling, map_tool_choice

FULL = Sampling(temperature=1.5, top_p=0.9, max_tokens=100, stop=("a", "b"), seed=42)


@pytest.mark.parametrize(
    ("provider", "enabled", "expected", "dropped"),
    [
        ("openai", set(), {"temperature": 1.5, "top_p": 0.9, "max_tokens": 100, "stop": ["a", "b"], "seed": 42}, ()),
        ("anthropic", set(), {"max_tokens": 100, "stop_sequences": ["a", "b"]}, ("temperature", "top_p", "seed")),
        ("anthropic", {"temperature"}, {"temperature": 0.75, "max_tokens": 100, "stop_sequences": ["a", "b"]},
         ("top_p", "seed")),
        # Both opted in: the provider refuses the pair, top_p goes.
        ("anthropic", {"temperature", "top_p"}, {"temperature": 0.75, "max_tokens": 100, "stop_sequences": ["a", "b"]},
         ("seed", "top_p")),
        ("scripted", set(), {"temperature": 1.5, "top_p": 0.9, "max_tokens": 100, "stop": ["a", "b"], "seed": 42}, ()),
    ],
)  # fmt: skip
def test_mapping_table(provider: str, enabled: set[str], expected: dict[str, Any], dropped: tuple[str, ...]) -> None:
    mapped = map_sampling(provider, FULL, enabled=enabled)
    assert mapped.params == expected
    assert sorted(mapped.dropped) == sorted(dropped)


def test_every_provider_has_a_rule_for_every_parameter() -> None:
    params = {"temperature", "top_p", "max_tokens", "stop", "seed"}
    assert all(set(rules) == params for rules in PARAM_TABLE.values())


def test_temperature_maps_into_zero_one_for_anthropic() -> None:
    for ours, theirs in ((0.0, 0.0), (1.0, 0.5), (2.0, 1.0)):
        mapped = map_sampling("anthropic", Sampling(temperature=ours), enabled={"temperature"})
        assert mapped.params == {"temperature": theirs}


def test_unset_parameters_are_not_sent() -> None:
    assert map_sampling("openai", Sampling()).params == {}
    assert map_sampling("anthropic", Sampling()).params == {}


def test_unsupported_is_rejected_when_configured() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        map_sampling("anthropic", Sampling(seed=1), on_unsupported="reject")
    assert caught.value.code == ErrorCode.INVALID_REQUEST and caught.value.field == "sampling.seed"


def test_unsupported_is_dropped_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, "provider_svc.params")
    for _ in range(3):
        assert map_sampling("anthropic", Sampling(top_p=0.3)).dropped == ("top_p",)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "top_p" in r.getMessage()]
    assert len(warnings) <= 1  # once per process and (provider, parameter)


@pytest.mark.parametrize(
    ("sampling", "field"),
    [
        (Sampling(temperature=-0.1), "sampling.temperature"),
        (Sampling(temperature=2.01), "sampling.temperature"),
        (Sampling(top_p=1.5), "sampling.top_p"),
        (Sampling(max_tokens=0), "sampling.max_tokens"),
    ],
)
@pytest.mark.parametrize("provider", ["openai", "anthropic", "scripted"])
def test_out_of_range_is_always_rejected(provider: str, sampling: Sampling, field: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        map_sampling(provider, sampling)
    assert caught.value.field == field


def test_openai_stop_is_capped_at_four() -> None:
    mapped = map_sampling("openai", Sampling(stop=("1", "2", "3", "4", "5")))
    assert mapped.params["stop"] == ["1", "2", "3", "4"] and mapped.dropped == ("stop",)
    with pytest.raises(InvalidRequestError):
        map_sampling("openai", Sampling(stop=("1", "2", "3", "4", "5")), on_unsupported="reject")


@pytest.mark.parametrize(
    ("mode", "openai", "anthropic"),
    [
        ("auto", "auto", {"type": "auto"}),
        ("none", "none", {"type": "none"}),
        ("required", "required", {"type": "any"}),
        ("tool", {"type": "function", "function": {"name": "t"}}, {"type": "tool", "name": "t"}),
    ],
)
def test_tool_choice_table(mode: Any, openai: Any, anthropic: Any) -> None:
    choice = ToolChoice(mode, "t" if mode == "tool" else "")
    assert map_tool_choice("openai", choice, {"t"}) == openai
    assert map_tool_choice("anthropic", choice, {"t"}) == anthropic
    assert map_tool_choice("openai", None) is None


def test_tool_choice_must_name_a_known_tool() -> None:
    with pytest.raises(InvalidRequestError):
        map_tool_choice("openai", ToolChoice("tool", ""), {"t"})
    with pytest.raises(InvalidRequestError):
        map_tool_choice("anthropic", ToolChoice("tool", "other"), {"t"})
