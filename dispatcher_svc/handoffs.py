"""Handoffs between agents (issue 44), the pure part: the tools an agent's `handoffs:` offers, the
brief their arguments carry, the child task's id and the guards across hops. The run's side (BuildHandoff,
creating the child, parking or ending the parent) is dispatcher_svc/run/handing.py; delivering a
child's answer to the task that waits for it is dispatcher_svc/handoff_answers.py.

An agent with `handoffs: [{to: triage, mode: both}]` is offered `transfer_to_triage` (control moves:
the task ends HANDED_OFF and triage's task goes on) and `ask_triage` (delegate and wait: triage's
answer is the call's result). Names go through agentmesh.tool_names (the MCP mapping): [a-z0-9_], at
most 64 characters; two targets mapping to one name is a ConfigError (exit 2).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agentmesh.answers import check_answer, violations_text
from agentmesh.config import ConfigError
from agentmesh.errors import AgentmeshError, ErrorCode, Violation
from agentmesh.tool_names import mapped_name

__all__ = [
    "ASK_PREFIX",
    "BRIEF_SCHEMA",
    "MAX_VERIFY_REJECTIONS",
    "TRANSFER_PREFIX",
    "VERDICT_SCHEMA",
    "HandoffTool",
    "Verdict",
    "check_brief",
    "child_task_id",
    "guard",
    "looks_like_handoff",
    "not_offered",
    "rejected",
    "resolve_target",
    "tools_for",
    "verdict_of",
    "verify_child_id",
]

TRANSFER_PREFIX = "transfer_to"
ASK_PREFIX = "ask"

_CITATION = {
    "type": "object",
    "description": "Where the value can be read: a payload (ref_id) or a message of this session (message_index), "
    "optionally narrowed by json_path or line_range.",
    "properties": {
        "ref_id": {"type": "string", "description": "A payload ref id (pl_ + 64 hex)."},
        "message_index": {"type": "integer", "minimum": 0, "description": "A message of this session, from 0."},
        "json_path": {"type": "string", "description": 'An RFC 9535 JSONPath into a JSON payload, e.g. "$.pods[0]".'},
        "line_range": {
            "type": "object",
            "properties": {"start": {"type": "integer", "minimum": 1}, "end": {"type": "integer", "minimum": 1}},
            "required": ["start", "end"],
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}

BRIEF_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "description": "What crosses the hop instead of your transcript.",
    "properties": {
        "summary": {"type": "string", "minLength": 1, "maxLength": 8000, "description": "What was done."},
        "facts": {
            "type": "array",
            "maxItems": 64,
            "description": "Key facts: each confirmed with a citation, or inferred with its basis.",
            "items": {
                "type": "object",
                "properties": {
                    "statement": {"type": "string", "minLength": 1, "maxLength": 1000},
                    "value": {
                        "type": "string",
                        "maxLength": 500,
                        "description": "The key value the statement asserts.",
                    },
                    "citation": _CITATION,
                    "basis": {"type": "string", "maxLength": 1000, "description": "Why you believe an inferred fact."},
                },
                "required": ["statement"],
                "additionalProperties": False,
            },
        },
        "open_questions": {"type": "array", "maxItems": 32, "items": {"type": "string", "maxLength": 1000}},
        "risks": {"type": "array", "maxItems": 32, "items": {"type": "string", "maxLength": 1000}},
        "artifacts": {
            "type": "array",
            "maxItems": 32,
            "items": {"type": "string", "maxLength": 200},
            "description": "Payload ref ids the next agent may need.",
        },
    },
    "required": ["summary"],
    "additionalProperties": False,
}
"""The arguments of every handoff tool: context_svc BuildHandoff's HandoffBrief, in its JSON form."""


@dataclass(frozen=True)
class HandoffTool:
    """One handoff tool an agent is offered."""

    name: str
    """`transfer_to_<agent>` or `ask_<agent>` (agentmesh.tool_names)."""
    target: str
    """The agent (or, once routing lands, the capability) named in `handoffs:`."""
    mode: str
    """"transfer" or "ask"."""
    capability: bool = False
    """`target` is a capability tag: capability routing picks the agent at each handoff."""

    @property
    def description(self) -> str:
        whom = f"an agent with capability {self.target}" if self.capability else f"agent {self.target}"
        if self.mode == "transfer":
            return (
                f"Hand the task over to {whom}: it goes on with your brief and you stop. "
                "Cite where every key fact can be read; mark the others inferred with their basis."
            )
        return (
            f"Ask {whom} to do a part of the task and wait for its answer (the result of this call). "
            "Cite where every key fact can be read; mark the others inferred with their basis."
        )

    @property
    def input_schema_json(self) -> str:
        return json.dumps(BRIEF_SCHEMA, separators=(",", ":"))


def tools_for(agent_id: str, entries: Iterable[tuple[str, str, bool]]) -> dict[str, HandoffTool]:
    """The handoff tools of an agent's `handoffs:` entries ((target, mode: transfer|ask|both, whether the
    target is a capability tag)), by name. ConfigError naming both targets when two map to one name."""
    tools: dict[str, HandoffTool] = {}
    for target, mode, capability in entries:
        for one in ("transfer", "ask") if mode == "both" else (mode,):
            prefix, sep = (TRANSFER_PREFIX, "_") if one == "transfer" else (ASK_PREFIX, "_")
            tool = HandoffTool(mapped_name(prefix, target, sep=sep), target, one, capability)
            taken = tools.get(tool.name)
            if taken is not None and taken.target != target:
                raise ConfigError(
                    f"agents[{agent_id}].handoffs: {taken.target!r} and {target!r} both map to the tool {tool.name}"
                )
            tools[tool.name] = tool
    return tools


def resolve_target(target: str, agents: Container[str]) -> str | None:
    """The agent id a handoff target names, None when none does. (A capability target is routed at each
    handoff instead: run/handing.py asks the dispatcher's Router.)"""
    return target if target in agents else None


class CapabilityRouter(Protocol):
    """Picks the agent for a capability (dispatcher_svc.routing.Router): typed NOT_FOUND / UNAVAILABLE
    when nobody carries it or no carrier is healthy."""

    async def route_to(self, capability: str) -> str: ...


def looks_like_handoff(name: str, known_tools: Container[str]) -> bool:
    """Whether a call the agent was not offered as a handoff is still meant as one: `transfer_to_*` or
    `ask_*` that is no registry tool it knows. Such a call is answered here, never sent to tool_svc."""
    shaped = name.startswith((TRANSFER_PREFIX + "_", ASK_PREFIX + "_"))
    return shaped and name not in known_tools


def not_offered(name: str, offered: Sequence[HandoffTool]) -> AgentmeshError:
    """CONTRACT: a handoff to a target the agent's `handoffs:` does not list; names the allowed ones."""
    allowed = ", ".join(sorted(t.name for t in offered)) or "none (this agent hands off to nobody)"
    return AgentmeshError(
        ErrorCode.UNKNOWN_TOOL,
        f"{name} is not a handoff this agent may make; allowed: {allowed}",
        violations=[Violation(path="name", rule="one_of", actual=name[:64], expected=allowed[:400])],
        metadata={"reason": "handoff_target", "allowed": allowed[:400]},
    )


def check_brief(arguments_json: str) -> dict[str, Any] | AgentmeshError:
    """The brief, or a CONTRACT error (ARGUMENTS_NOT_JSON, SCHEMA_INVALID with its violations) the model fixes."""
    try:
        json.loads(arguments_json or "{}")
    except ValueError as exc:
        return AgentmeshError(ErrorCode.ARGUMENTS_NOT_JSON, f"the handoff brief is not JSON: {exc}")
    checked = check_answer(BRIEF_SCHEMA, arguments_json or "{}")
    if not checked.ok:
        return AgentmeshError(
            ErrorCode.SCHEMA_INVALID,
            "the handoff brief breaks its schema:\n" + violations_text(checked.violations),
            violations=list(checked.violations),
            metadata={"reason": "handoff_brief"},
        )
    value = checked.value
    assert isinstance(value, dict)
    for i, fact in enumerate(value.get("facts", [])):
        if ("citation" in fact) == ("basis" in fact):
            return AgentmeshError(
                ErrorCode.SCHEMA_INVALID,
                f"facts[{i}]: give a citation (confirmed) or a basis (inferred), exactly one",
                violations=[Violation(path=f"$.facts[{i}]", rule="one_of", expected="citation | basis")],
                metadata={"reason": "handoff_brief"},
            )
        citation = fact.get("citation")
        if citation is not None and ("ref_id" in citation) == ("message_index" in citation):
            return AgentmeshError(
                ErrorCode.SCHEMA_INVALID,
                f"facts[{i}].citation: give ref_id or message_index, exactly one",
                violations=[Violation(path=f"$.facts[{i}].citation", rule="one_of", expected="ref_id | message_index")],
                metadata={"reason": "handoff_brief"},
            )
    return value


def child_task_id(parent_task_id: str, step: int, call_id: str) -> str:
    """The child task of one handoff call: the same (parent, step, call) always names the same child, so a
    re-run of the step finds the child it created."""
    digest = hashlib.sha256(f"{parent_task_id}\x00{step}\x00{call_id}".encode("utf-8", "surrogatepass")).hexdigest()
    return f"h-{digest[:40]}"


def guard(*, hops: Sequence[str], to_agent: str, depth: int, limit: int) -> AgentmeshError | None:
    """The guards across hops, before a child is created. `hops`: the agents from the root to the one
    handing off. A child deeper than `limit` is HANDOFF_DEPTH_EXCEEDED (ENGINEERING: the agent finishes
    itself); a hop repeating one already made in this chain (A->B->A->B) is LOOP_DETECTED (FATAL)."""
    if depth + 1 > limit:
        return AgentmeshError(
            ErrorCode.HANDOFF_DEPTH_EXCEEDED,
            f"a handoff to {to_agent} would be hop {depth + 1} of this task tree; the limit is {limit}: "
            "finish the work yourself",
            metadata={"depth": str(depth + 1), "limit": str(limit), "to_agent": to_agent},
        )
    if hops:
        hop = (hops[-1], to_agent)
        earlier = set(itertools.pairwise(hops))
        if hop in earlier:
            chain = "->".join([*hops, to_agent])
            return AgentmeshError(
                ErrorCode.LOOP_DETECTED,
                f"handoff cycle: {chain} repeats the hop {hop[0]}->{hop[1]}",
                metadata={"reason": "handoff_cycle", "chain": chain[:400]},
            )
    return None


# --- verification (`verify_with:`) -------------------------------------------------------------------

VERDICT_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "verdict": {"enum": ["accepted", "rejected"]},
        "reasons": {"type": "array", "items": {"type": "string", "maxLength": 2000}, "maxItems": 20},
    },
    "required": ["verdict"],
}
"""A verifier's final answer (its typed output): accepted, or rejected with the reasons the producer reads."""
MAX_VERIFY_REJECTIONS = 1
"""Rejections sent back to the producer as corrections; the next one fails its task."""


def verify_child_id(parent_task_id: str, step: int, call_id: str, round_: int) -> str:
    """The verifier's task for one handoff call (round: the rejections so far): stable across re-runs."""
    return child_task_id(parent_task_id, step, f"{call_id}\x00verify\x00{round_}")


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    reasons: tuple[str, ...]


def verdict_of(output: str) -> Verdict | None:
    """The verdict in a verifier's typed output; None if it holds none (a verifier without one)."""
    try:
        data = json.loads(output)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("verdict") not in ("accepted", "rejected"):
        return None
    reasons = data.get("reasons", [])
    texts = tuple(str(r) for r in reasons) if isinstance(reasons, list) else (str(reasons),)
    return Verdict(data["verdict"] == "accepted", texts)


def rejected(verifier: str, reasons: Sequence[str], *, final: bool) -> AgentmeshError:
    """VERIFICATION_REJECTED naming the verifier and its reasons (CONTRACT: the producer's to fix)."""
    listed = "; ".join(r.strip() for r in reasons if r.strip()) or "no reason given"
    then = "the task fails" if final else "fix the brief and hand off again (one more rejection fails the task)"
    return AgentmeshError(
        ErrorCode.VERIFICATION_REJECTED,
        f"verifier {verifier} rejected the handoff: {listed}"[:1800] + f"; {then}",
        metadata={"verifier": verifier},
    )
