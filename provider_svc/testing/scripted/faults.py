"""Fault injection: seeded faults on the tool calls a policy returns (`inject_faults`; the schema,
`FaultConfig`, is `agentmesh.config.faults`).

Malformed JSON, a schema violation, an unknown tool name or a dangerous shell command replace a
call at the configured rates, drawn from a generator seeded by the prompt, so a run repeats
exactly. Separate from the policies: any policy (Python, scenario or generic) gets the same faults.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from agentmesh.config.faults import FaultConfig
from provider_svc.models.base import ToolDef
from provider_svc.testing.scripted.jsonio import _dump, _repair_json
from provider_svc.testing.scripted.policy import ScriptedRequest, ScriptedToolCall

__all__ = ["FaultConfig", "inject_answer_faults", "inject_faults"]


_HAN = re.compile(r"[\u4e00-\u9fff]")


def inject_answer_faults(text: str, req: ScriptedRequest, faults: FaultConfig, rng: random.Random) -> str:
    """A final answer with its seeded fault: a false claim of a restart, or one that breaks the schema
    the request asked for. A corrected answer is clean unless `on_corrections`."""
    if not (faults.false_claim or faults.invalid_answer) or (req.answer_corrections and not faults.on_corrections):
        return text
    draw = rng.random()
    if req.request.response_schema is not None and draw < faults.invalid_answer:
        # An array where the schema wants an object (or a value it does not list): a fixable violation.
        return "[]" if req.request.response_schema.get("type", "object") == "object" else '{"not": "in the schema"}'
    if draw < faults.invalid_answer + faults.false_claim:
        chinese = bool(_HAN.search(req.goal))
        claim = "Pod 已重启成功。" if chinese else "I restarted the pod and it is healthy now."
        if req.request.response_schema is not None:
            return text  # a typed answer's claims are its `actions`: left to the policy
        return f"{text}\n{claim}" if text else claim
    return text


_DANGEROUS = "rm -rf / --no-preserve-root"


def _shell_field(tool: ToolDef | None) -> str | None:
    if tool is None:
        return None
    props = tool.input_schema.get("properties") or {}
    for name, sub in props.items():
        if isinstance(sub, Mapping) and sub.get("x-agentmesh-kind") == "shell":
            return str(name)
    return None


def _violate(args: dict[str, Any], tool: ToolDef | None) -> dict[str, Any]:
    """`args` changed so that they break `tool`'s schema in one place."""
    schema = tool.input_schema if tool is not None else {}
    props = schema.get("properties") or {}
    for name, sub in props.items():
        if not isinstance(sub, Mapping):
            continue
        if isinstance(sub.get("pattern"), str) and isinstance(args.get(name), str):
            return {**args, name: args[name].lower()[:-1] or "x"}
        if isinstance(sub.get("enum"), list):
            return {**args, name: "not-a-valid-choice"}
        if sub.get("type") in ("integer", "number"):
            return {**args, name: f"{args.get(name, 1)}x"}
    required = [r for r in schema.get("required", ()) if r in args]
    if required:
        return {k: v for k, v in args.items() if k != required[0]}
    return {**args, "unexpected_field": True}


def _apply_fault(kind: str, call: ScriptedToolCall, req: ScriptedRequest) -> ScriptedToolCall:
    tool = req.tool(call.name)
    if kind == "malformed_json":
        return replace(call, arguments_json=call.arguments_json.rstrip("}").rstrip() + ',"')
    if kind == "schema_violation":
        args = _repair_json(call.arguments_json) or {}
        return replace(call, arguments_json=_dump(_violate(args, tool)))
    if kind == "unknown_tool":
        return replace(call, name=call.name + "_v2")
    if kind == "dangerous_command":
        shell_tool = tool if _shell_field(tool) else next((t for t in req.tools if _shell_field(t)), None)
        shell = _shell_field(shell_tool)
        if shell_tool is not None and shell is not None:
            return ScriptedToolCall(shell_tool.name, _dump({shell: _DANGEROUS}), call.id)
    return call


def inject_faults(
    calls: Sequence[ScriptedToolCall], req: ScriptedRequest, faults: FaultConfig, rng: random.Random
) -> tuple[ScriptedToolCall, ...]:
    """Calls with at most one fault each, drawn from `rng` at the configured rates."""
    if not faults.active or (req.last_error is not None and not faults.on_corrections):
        return tuple(calls)
    out: list[ScriptedToolCall] = []
    for call in calls:
        draw = rng.random()
        edges = [
            ("malformed_json", faults.malformed_json),
            ("schema_violation", faults.schema_violation),
            ("unknown_tool", faults.unknown_tool),
            ("dangerous_command", faults.dangerous_command),
        ]
        kind, total = "", 0.0
        for name, rate in edges:
            total += rate
            if draw < total:
                kind = name
                break
        out.append(_apply_fault(kind, call, req))
    return tuple(out)
