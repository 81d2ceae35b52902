"""The workload of bench_workflow (issue 46): the 10-node graph, each run's input, the scripted model's answers.

`NODES` is the workflow definition every system runs (the workflow as is, the tasks arm node by node, LangGraph
as a StateGraph); `Sample` is one batch's measurements, whatever the system.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from provider_svc.testing.scripted import ScriptedReply, ScriptedRequest

__all__ = ["NODES", "NODE_COUNT", "Sample", "policy", "run_input"]

NODE_COUNT = 10

NODES: list[dict[str, Any]] = [
    {"id": "intake", "type": "agent", "agent": "wf", "goal": "classify: {{ input.question }}"},
    {
        "id": "total",
        "type": "tool",
        "tool": "calculator",
        "after": ["intake"],
        "arguments": {"expression": "{{ input.expression }}"},
    },
    {
        "id": "parts",
        "type": "parallel",
        "after": ["intake"],
        "over": "{{ input.parts }}",
        "max_concurrency": 3,
        "do": {"type": "tool", "tool": "calculator", "arguments": {"expression": "{{ item }}"}},
    },
    {"id": "evidence", "type": "join", "after": ["total", "parts"]},
    {
        "id": "big",
        "type": "condition",
        "after": ["evidence"],
        "when": "double(nodes.total.output.result) > 100.0",
        "then": ["detail"],
        "else": ["brief"],
    },
    {"id": "detail", "type": "agent", "agent": "wf", "goal": "explain in detail: {{ nodes.total.output }}"},
    {"id": "brief", "type": "agent", "agent": "wf", "goal": "explain briefly: {{ nodes.total.output }}"},
    {"id": "answered", "type": "join", "mode": "any", "after": ["detail", "brief"]},
    {
        "id": "check",
        "type": "tool",
        "tool": "calculator",
        "after": ["answered"],
        "arguments": {"expression": "{{ input.expression }} - 1"},
    },
    {"id": "summary", "type": "agent", "agent": "wf", "after": ["check"], "goal": "sum up: {{ nodes.check.output }}"},
]
assert len(NODES) == NODE_COUNT


def run_input(i: int) -> dict[str, Any]:
    """Run i's input: every other run takes the `detail` branch (result > 100), the others `brief`."""
    return {
        "question": f"question {i}",
        "expression": f"{i % 7 + 2} * {60 if i % 2 == 0 else 10}",
        "parts": [f"{i} + 1", f"{i} * 2", f"{i} - 3"],
    }


def policy(req: ScriptedRequest) -> ScriptedReply:
    """Every agent node answers at once."""
    return ScriptedReply(text=f"ANSWER {req.goal[:60]}")


@dataclass
class Sample:
    """One batch of runs: each run's seconds, the batch's wall seconds, and its CPU seconds."""

    latencies: list[float]
    wall_s: float
    cpu_s: float
    services: dict[str, float] = field(default_factory=dict)
    """agentmesh: CPU seconds of each service."""
