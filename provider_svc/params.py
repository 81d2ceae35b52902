"""Table-driven mapping of our sampling parameters and tool choice to each wire protocol.

One table says, per provider type and parameter, the wire name, the accepted range of OUR value,
and how the value is transformed (Anthropic's temperature is 0-1: our 0-2 is halved). A parameter
without a wire name is unsupported by that provider: dropped with a warning, or rejected with
INVALID_REQUEST, as configured (`unsupported_params`). A value outside our range is always rejected:
it is the caller's mistake whatever the provider.

Opt-in rules: the current Anthropic Messages API (as the pinned `anthropic` SDK 2.10 types it) has
no temperature or top_p. Their mapping stays in the table, applied only for a backend that lists
them in `extra_params` (an Anthropic-compatible endpoint that still takes them); otherwise they are
unsupported like any other.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from agentmesh.errors import InvalidRequestError
from provider_svc.models.base import Sampling, ToolChoice

__all__ = ["PARAM_TABLE", "TOOL_CHOICE_TABLE", "MappedParams", "ParamRule", "map_sampling", "map_tool_choice"]

log = logging.getLogger("provider_svc.params")

ProviderType = Literal["openai", "anthropic", "scripted"]
OnUnsupported = Literal["drop", "reject"]


@dataclass(frozen=True, slots=True)
class ParamRule:
    """How one of our parameters goes on the wire of one provider type."""

    wire: str | None
    """Wire field name; None: the provider has no such parameter."""
    low: float | None = None
    high: float | None = None
    """Accepted range of OUR value (inclusive)."""
    transform: Callable[[Any], Any] | None = None
    max_items: int | None = None
    """For lists (stop): the most the provider accepts."""
    opt_in: bool = False
    """Sent only when the backend enables it (`extra_params`); unsupported otherwise."""


def _halve(value: Any) -> Any:
    # Our temperature is 0..2 (OpenAI's scale); Anthropic's is 0..1.
    return value / 2


_COMMON_RANGES = {"temperature": (0.0, 2.0), "top_p": (0.0, 1.0), "max_tokens": (1.0, None)}


def _rule(param: str, wire: str | None, **kw: Any) -> ParamRule:
    low, high = _COMMON_RANGES.get(param, (None, None))
    return ParamRule(wire=wire, low=low, high=high, **kw)


PARAM_TABLE: Mapping[str, Mapping[str, ParamRule]] = MappingProxyType(
    {
        "openai": MappingProxyType(
            {
                "temperature": _rule("temperature", "temperature"),
                "top_p": _rule("top_p", "top_p"),
                # max_tokens, not max_completion_tokens: every OpenAI-compatible server (vLLM,
                # Ollama, llama.cpp, DeepSeek) understands it.
                "max_tokens": _rule("max_tokens", "max_tokens"),
                "stop": _rule("stop", "stop", transform=list, max_items=4),
                "seed": _rule("seed", "seed"),
            }
        ),
        "anthropic": MappingProxyType(
            {
                "temperature": _rule("temperature", "temperature", transform=_halve, opt_in=True),
                "top_p": _rule("top_p", "top_p", opt_in=True),
                "max_tokens": _rule("max_tokens", "max_tokens"),
                "stop": _rule("stop", "stop_sequences", transform=list),
                "seed": _rule("seed", None),
            }
        ),
        "scripted": MappingProxyType(
            {
                "temperature": _rule("temperature", "temperature"),
                "top_p": _rule("top_p", "top_p"),
                "max_tokens": _rule("max_tokens", "max_tokens"),
                "stop": _rule("stop", "stop", transform=list),
                "seed": _rule("seed", "seed"),
            }
        ),
    }
)

# Parameters a provider refuses in combination: (kept, dropped-or-rejected). Recent Claude models
# answer 400 when both temperature and top_p are set.
_CONFLICTS: Mapping[str, tuple[tuple[str, str], ...]] = MappingProxyType({"anthropic": (("temperature", "top_p"),)})


def _tool_choice_openai(choice: ToolChoice) -> Any:
    if choice.mode == "tool":
        return {"type": "function", "function": {"name": choice.tool_name}}
    return choice.mode


def _tool_choice_anthropic(choice: ToolChoice) -> Any:
    if choice.mode == "tool":
        return {"type": "tool", "name": choice.tool_name}
    return {"type": {"auto": "auto", "none": "none", "required": "any"}[choice.mode]}


TOOL_CHOICE_TABLE: Mapping[str, Callable[[ToolChoice], Any]] = MappingProxyType(
    {"openai": _tool_choice_openai, "anthropic": _tool_choice_anthropic, "scripted": lambda choice: choice.mode}
)


@dataclass(frozen=True, slots=True)
class MappedParams:
    """Wire parameters for one request, and what was dropped (for logs and span attributes)."""

    params: dict[str, Any]
    dropped: tuple[str, ...] = ()


def _present(sampling: Sampling) -> dict[str, Any]:
    values: dict[str, Any] = {
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "max_tokens": sampling.max_tokens,
        "stop": list(sampling.stop) if sampling.stop else None,
        "seed": sampling.seed,
    }
    return {k: v for k, v in values.items() if v is not None}


_warned: set[tuple[str, str]] = set()


def _unsupported(provider: str, param: str, reason: str, on_unsupported: OnUnsupported, dropped: list[str]) -> None:
    if on_unsupported == "reject":
        raise InvalidRequestError(f"sampling.{param}", f"{reason} (unsupported_params: reject)")
    # Once per (provider, parameter) at WARNING: an agent configured with a temperature would
    # otherwise log the same line on every call.
    level = logging.DEBUG if (provider, param) in _warned else logging.WARNING
    _warned.add((provider, param))
    log.log(level, "dropping sampling.%s for %s: %s", param, provider, reason)
    dropped.append(param)


def map_sampling(
    provider_type: str,
    sampling: Sampling,
    *,
    on_unsupported: OnUnsupported = "drop",
    enabled: frozenset[str] | set[str] = frozenset(),
) -> MappedParams:
    """Our sampling parameters as `provider_type`'s wire fields (see PARAM_TABLE); `enabled` turns
    on opt-in rules."""
    table = PARAM_TABLE[provider_type]
    values = _present(sampling)
    dropped: list[str] = []
    wire: dict[str, Any] = {}
    for param, value in values.items():
        rule = table[param]
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        if numeric and ((rule.low is not None and value < rule.low) or (rule.high is not None and value > rule.high)):
            bounds = f"[{rule.low:g}, {rule.high:g}]" if rule.high is not None else f">= {rule.low:g}"
            raise InvalidRequestError(f"sampling.{param}", f"must be in {bounds}, got {value:g}")
        if rule.wire is None or (rule.opt_in and param not in enabled):
            _unsupported(provider_type, param, f"{provider_type} has no {param} parameter", on_unsupported, dropped)
            continue
        sent = value
        if rule.max_items is not None and isinstance(value, list) and len(value) > rule.max_items:
            _unsupported(
                provider_type,
                param,
                f"{provider_type} accepts at most {rule.max_items} items, got {len(value)}",
                on_unsupported,
                dropped,
            )
            sent = value[: rule.max_items]
        wire[rule.wire] = rule.transform(sent) if rule.transform is not None else sent
    for kept, conflicting in _CONFLICTS.get(provider_type, ()):
        if kept in values and conflicting in values and conflicting not in dropped:
            _unsupported(
                provider_type,
                conflicting,
                f"{provider_type} refuses {kept} and {conflicting} together",
                on_unsupported,
                dropped,
            )
            wire.pop(table[conflicting].wire or conflicting, None)
    return MappedParams(params=wire, dropped=tuple(dropped))


def map_tool_choice(provider_type: str, choice: ToolChoice | None, tool_names: set[str] | None = None) -> Any:
    """`choice` on `provider_type`'s wire; None when unset (the provider default applies)."""
    if choice is None:
        return None
    if choice.mode == "tool":
        if not choice.tool_name:
            raise InvalidRequestError("tool_choice.tool_name", "required when mode is TOOL")
        if tool_names is not None and choice.tool_name not in tool_names:
            raise InvalidRequestError("tool_choice.tool_name", f"{choice.tool_name!r} is not among the request's tools")
    return TOOL_CHOICE_TABLE[provider_type](choice)
