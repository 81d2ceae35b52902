"""Configuring a scripted model's policy: the scenario language (YAML rules) and Python policies by name.

`load_scenario` reads a scenario YAML (looked up in the working directory, then in
provider_svc/scenarios/) into a `ScenarioPolicy`, whose rules are tried in order with
`GenericPolicy` behind them; `load_policy` imports a "package.module:attr" Policy callable.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentmesh.config.faults import FaultConfig
from provider_svc.models.base import Role
from provider_svc.testing.scripted.filling import _search, synthesize_arguments
from provider_svc.testing.scripted.fixing import _texts, fix_last_call
from provider_svc.testing.scripted.generic import GenericPolicy
from provider_svc.testing.scripted.jsonio import _dump
from provider_svc.testing.scripted.policy import Policy, ScriptedReply, ScriptedRequest, ScriptedToolCall

SCENARIO_DIR = Path(__file__).resolve().parent.parent.parent / "scenarios"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _When(_Strict):
    step: int | None = None
    goal_contains: str | list[str] | None = None
    last_tool: str | None = None
    last_ok: bool | None = None
    last_error_code: str | list[str] | None = None
    last_error_class: str | None = None
    result_contains: str | None = None
    called: str | None = None
    not_called: str | None = None
    tool_available: str | None = None


class _Call(_Strict):
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    arguments_json: str | None = None
    """Raw arguments text, sent as is (big integers, deliberate mistakes)."""


class _Rule(_Strict):
    when: _When = _When()
    call: _Call | None = None
    calls: list[_Call] | None = None
    answer: str | None = None
    fix: bool = False
    fallback: bool = False
    generic: bool = False


class _Scenario(_Strict):
    name: str = ""
    description: str = ""
    faults: FaultConfig | None = None
    rules: list[_Rule]


def _listify(value: str | list[str] | None) -> list[str]:
    return [] if value is None else [value] if isinstance(value, str) else list(value)


class ScenarioPolicy:
    """A policy from YAML rules, tried in order; the first whose `when` holds acts, else GenericPolicy.

    ```yaml
    name: refund-check
    faults: {seed: 7, schema_violation: 0.2}
    rules:
      - when: {not_called: find_order}
        call: {tool: find_order, arguments: {order_id: {from_goal: "ORD-\\\\d{4}-\\\\d{4}"}, note: "{goal}"}}
      - when: {last_error_class: CONTRACT}
        fix: true          # re-issue the failed call corrected with its violation hints
      - when: {last_error_class: ENGINEERING}
        fallback: true     # call the error's fallback_tool
      - when: {last_tool: find_order, last_ok: true}
        answer: "Order found: {last_result}"
    ```
    `when` keys (all must hold): step, goal_contains (any, case-insensitive), last_tool, last_ok,
    last_error_code (any), last_error_class, result_contains, called, not_called, tool_available.
    Actions: call / calls ({tool, arguments | arguments_json}), answer, fix, fallback, generic.
    In strings `{goal}`, `{last_result}`, `{last_user}`, `{step}` are replaced; an argument value
    `{from_goal: REGEX, default: ...}` (or `from_result`) is the first match in the goal (or results).
    """

    def __init__(self, scenario: _Scenario, *, source: str = "") -> None:
        self.scenario = scenario
        self.source = source
        self.generic = GenericPolicy()

    @property
    def faults(self) -> FaultConfig | None:
        return self.scenario.faults

    def __call__(self, req: ScriptedRequest) -> ScriptedReply:
        for rule in self.scenario.rules:
            if self._holds(rule.when, req):
                return self._act(rule, req)
        return self.generic(req)

    @staticmethod
    def _holds(when: _When, req: ScriptedRequest) -> bool:
        err = req.last_error
        last = req.last_result
        last_call = req.call_by_id(last.tool_call_id) if last is not None else None
        last_tool = last_call.name if last_call is not None else (last.name if last is not None else "")
        checks = [
            when.step is None or when.step == req.call_index,
            not _listify(when.goal_contains)
            or any(g.lower() in req.goal.lower() for g in _listify(when.goal_contains)),
            when.last_tool is None or when.last_tool == last_tool,
            when.last_ok is None or (last is not None and (err is None) == when.last_ok),
            not _listify(when.last_error_code) or (err is not None and err.code in _listify(when.last_error_code)),
            when.last_error_class is None or (err is not None and err.error_class == when.last_error_class),
            when.result_contains is None or when.result_contains.lower() in req.last_result_text.lower(),
            when.called is None or when.called in req.called_tools,
            when.not_called is None or when.not_called not in req.called_tools,
            when.tool_available is None or req.tool(when.tool_available) is not None,
        ]
        return all(checks)

    def _act(self, rule: _Rule, req: ScriptedRequest) -> ScriptedReply:
        if rule.fix:
            return fix_last_call(req) if req.last_error is not None else self.generic(req)
        if rule.fallback:
            err = req.last_error
            if err is None or not err.fallback_tool:
                return self.generic(req)
            tool = req.tool(err.fallback_tool)
            args = synthesize_arguments(tool, _texts(req)) if tool is not None else {}
            return ScriptedReply(tool_calls=(ScriptedToolCall(err.fallback_tool, _dump(args)),))
        calls = ([rule.call] if rule.call else []) + list(rule.calls or [])
        if calls:
            return ScriptedReply(tool_calls=tuple(self._call(c, req) for c in calls))
        if rule.answer is not None:
            return ScriptedReply(text=_template(rule.answer, req))
        return self.generic(req)

    def _call(self, call: _Call, req: ScriptedRequest) -> ScriptedToolCall:
        if call.arguments_json is not None:
            return ScriptedToolCall(call.tool, _template(call.arguments_json, req))
        return ScriptedToolCall(call.tool, _dump(_render(call.arguments, req)))


def _template(text: str, req: ScriptedRequest) -> str:
    values = {
        "{goal}": req.goal,
        "{last_result}": req.last_result_text[:500],
        "{last_user}": req.last_user,
        "{step}": str(req.call_index),
    }
    for key, value in values.items():
        text = text.replace(key, value)
    return text


def _render(value: Any, req: ScriptedRequest) -> Any:
    if isinstance(value, str):
        return _template(value, req)
    if isinstance(value, list):
        return [_render(v, req) for v in value]
    if isinstance(value, dict):
        if "from_goal" in value or "from_result" in value:
            texts = (
                [req.goal]
                if "from_goal" in value
                else [m.content for m in reversed(req.messages) if m.role == Role.TOOL]
            )
            found = _search(str(value.get("from_goal", value.get("from_result"))), texts)
            return found if found is not None else value.get("default")
        return {k: _render(v, req) for k, v in value.items()}
    return value


def load_scenario(path: str | Path) -> ScenarioPolicy:
    """Reads a scenario YAML; ValueError naming the file and the problem."""
    candidate = Path(path)
    if not candidate.is_absolute() and not candidate.exists():
        candidate = SCENARIO_DIR / candidate
    try:
        data = yaml.safe_load(candidate.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"scenario {path}: cannot read: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ValueError(f"scenario {path}: not valid YAML: {exc}") from exc
    try:
        scenario = _Scenario.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"scenario {path}: {problems}") from exc
    return ScenarioPolicy(scenario, source=str(candidate))


def load_policy(spec: str, args: Mapping[str, Any] | None = None) -> Policy:
    """The callable named "package.module:attr" (called as a factory with `args` when given)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"policy {spec!r}: expected 'package.module:callable'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"policy {spec!r}: cannot import {module_name}: {exc}") from exc
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise ValueError(f"policy {spec!r}: {module_name} has no attribute {attr}")
    if args:
        target = target(**args)
    elif inspect.isclass(target):
        target = target()
    if not callable(target):
        raise ValueError(f"policy {spec!r}: not callable")
    policy: Policy = target
    return policy
