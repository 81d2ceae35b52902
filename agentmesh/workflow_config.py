"""The `workflows:` section of agentmesh.yaml: workflow definitions as data (issue 46).

A workflow is a DAG of nodes: `agent` (a task with a goal template), `tool` (one governed tool call
with an arguments template), `condition` (a CEL expression choosing a branch), `parallel` (one agent
or tool step per item of a list, at most `max_concurrency` at once) and `join` (all | any | n of its
inputs). Definitions come inline (`workflows.definitions`) or as one YAML/JSON file per workflow in
`workflows.folder`. This module only checks their shape (pydantic; `docs/workflow.schema.json` is
generated from `WorkflowDefinition`); the graph, the names of agents and tools, the templates and the
CEL expressions are checked when the dispatcher loads them (`dispatcher_svc.workflows.validate`).
"""

from __future__ import annotations

import re
import zoneinfo
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "NODE_TYPES",
    "AgentNode",
    "AgentStep",
    "ConditionNode",
    "JoinNode",
    "Node",
    "ParallelNode",
    "RetryPolicy",
    "RunAs",
    "Schedule",
    "Step",
    "ToolNode",
    "ToolStep",
    "WorkflowDefaults",
    "WorkflowDefinition",
    "WorkflowsSettings",
]

NODE_ID = r"^[a-z][a-z0-9_]{0,63}$"
WORKFLOW_NAME = r"^[a-z][a-z0-9_.-]{0,63}$"
NODE_TYPES = ("agent", "tool", "condition", "parallel", "join")
MAX_NODES = 200


class _Model(BaseModel):
    # A typo in a key must fail loudly rather than silently keep a default.
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class RetryPolicy(_Model):
    """Retries of a node whose attempt failed with an ENGINEERING (or exhausted CONTRACT) error:
    delay before retry n = min(initial * multiplier^(n-1), max) + jitter * random (agentmesh/backoff.py)."""

    max_attempts: int = Field(3, ge=1, le=20, description="Attempts in all, the first included.")
    initial_backoff_s: float = Field(1.0, ge=0, le=3600)
    max_backoff_s: float = Field(30.0, ge=0, le=86400)
    multiplier: float = Field(2.0, ge=1, le=10)
    jitter_s: float = Field(0.5, ge=0, le=3600)


class WorkflowDefaults(_Model):
    """The policy of every node that does not set its own."""

    retry: RetryPolicy = RetryPolicy()
    timeout_s: float = Field(600.0, gt=0, le=7 * 86400, description="One attempt of one node, at most.")


class AgentStep(_Model):
    """A task for a configured agent."""

    type: Literal["agent"]
    agent: str = Field(min_length=1, description="The id of a configured agent.")
    goal: str = Field(
        min_length=1, max_length=20_000, description="A template: {{ input.x }}, {{ nodes.id.output.y }}."
    )
    output_schema: dict[str, Any] | None = Field(None, description="A JSON Schema the task's final answer must meet.")


class ToolStep(_Model):
    """One governed tool call (permissions, approval, idempotency as any call)."""

    type: Literal["tool"]
    tool: str = Field(min_length=1, description="A tool of the registry.")
    arguments: dict[str, Any] = Field({}, description="JSON whose string leaves are templates.")


Step = Annotated[AgentStep | ToolStep, Field(discriminator="type")]


class _NodeFields(_Model):
    id: str = Field(pattern=NODE_ID)
    description: str = ""
    after: list[str] = Field([], max_length=MAX_NODES, description="Nodes that must have finished first.")
    retry: RetryPolicy | None = Field(None, description="Overrides the workflow's defaults.retry.")
    timeout_s: float | None = Field(None, gt=0, le=7 * 86400, description="Overrides defaults.timeout_s.")
    fallback: str = Field("", description="A node run in this one's place when it fails after its retries.")


class AgentNode(AgentStep, _NodeFields):
    """Runs an agent task; its output is the task's final answer (parsed JSON when it has a schema)."""


class ToolNode(ToolStep, _NodeFields):
    """Runs one tool call; its output is the tool's result."""


class ConditionNode(_NodeFields):
    """Evaluates a CEL expression over `input` and `nodes`; runs `then` when true, `else` when false.
    Its output is {"value": <bool>}; the branch not taken is skipped."""

    type: Literal["condition"]
    when: str = Field(min_length=1, max_length=4000, description="A CEL expression giving a bool.")
    then: list[str] = []
    else_: list[str] = Field([], alias="else")


class ParallelNode(_NodeFields):
    """Runs `do` once per item of the list `over` resolves to, at most `max_concurrency` at once;
    `{{ item }}` is the item in `do`'s templates. Its output is the list of the steps' outputs."""

    type: Literal["parallel"]
    over: str = Field(min_length=1, description="A template that is one reference to a list: {{ input.services }}.")
    do: Step
    max_concurrency: int = Field(4, ge=1, le=256)
    max_items: int = Field(100, ge=1, le=10_000)


class JoinNode(_NodeFields):
    """Waits for its `after` nodes: all of them, any one, or `n` of them succeeded. Its output maps
    each succeeded input to its output."""

    type: Literal["join"]
    mode: Literal["all", "any", "n"] = "all"
    n: int | None = Field(None, ge=1)


Node = Annotated[AgentNode | ToolNode | ConditionNode | ParallelNode | JoinNode, Field(discriminator="type")]

_CRON_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31), ("month", 1, 12), ("day of week", 0, 7))
_CRON_PART = re.compile(r"^(\*|\d{1,2}(?:-\d{1,2})?)(?:/(\d{1,2}))?$")


def check_cron(expression: str) -> str:
    """A five-field cron expression (minute hour day-of-month month day-of-week; `*`, `a`, `a-b`,
    `*/n`, `a-b/n`, lists with `,`): ValueError naming the field that is wrong."""
    fields = expression.split()
    if len(fields) != 5:
        raise ValueError(f"cron needs 5 fields (minute hour day month weekday), got {len(fields)}")
    for text, (name, low, high) in zip(fields, _CRON_FIELDS, strict=True):
        for part in text.split(","):
            match = _CRON_PART.match(part)
            if match is None:
                raise ValueError(f"cron {name} {text!r}: not *, a number, a range or a step")
            if match.group(1) != "*":
                bounds = [int(x) for x in match.group(1).split("-")]
                if any(not low <= b <= high for b in bounds) or bounds[0] > bounds[-1]:
                    raise ValueError(f"cron {name} {text!r}: outside {low}-{high}")
            if match.group(2) is not None and int(match.group(2)) == 0:
                raise ValueError(f"cron {name} {text!r}: a step must be at least 1")
    return expression


class RunAs(_Model):
    """The service identity a scheduled run acts under (nobody started it): its tasks' creator and the
    identity of its tool calls. Least privilege: only what this workflow needs."""

    subject: str = Field("", max_length=128, description='"" is "workflow:<name>".')
    roles: list[Literal["agent", "operator", "admin"]] = Field(["agent"], min_length=1)
    permissions: list[str] = Field(
        [],
        description="Grants (env:group:access) for its tool calls; the run grants of the workflow's agents "
        "(<env>:agent.<id>:run) are added.",
    )


class Schedule(_Model):
    """Starts a run at every tick of `cron` in `timezone` (fired by every dispatcher, once across them)."""

    cron: str = Field(description="Five fields: minute hour day-of-month month day-of-week.")
    timezone: str = "UTC"
    input: dict[str, Any] = {}
    catch_up: Literal["none", "latest"] = Field("latest", description="Ticks missed while down: none, or the latest.")
    overlap: Literal["skip", "allow"] = Field("skip", description="A tick while the previous run is unfinished.")
    run_as: RunAs = RunAs()

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        return check_cron(value)

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            zoneinfo.ZoneInfo(value)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r}") from None
        return value


class WorkflowDefinition(_Model):
    """One workflow: its nodes, their default policy, its input's schema and an optional schedule."""

    name: str = Field(pattern=WORKFLOW_NAME)
    description: str = ""
    input_schema: dict[str, Any] | None = Field(None, description="A JSON Schema a run's input must meet.")
    defaults: WorkflowDefaults = WorkflowDefaults()
    max_concurrency: int = Field(16, ge=1, le=1024, description="Nodes (and parallel items) running at once in a run.")
    schedule: Schedule | None = None
    nodes: list[Node] = Field(min_length=1, max_length=MAX_NODES)

    @model_validator(mode="before")
    @classmethod
    def _node_types_known(cls, data: Any) -> Any:
        # Named here, with the node's id: pydantic's own message would give only the list index.
        nodes = data.get("nodes") if isinstance(data, dict) else None
        for index, node in enumerate(nodes if isinstance(nodes, list) else []):
            if isinstance(node, dict) and node.get("type") not in NODE_TYPES:
                name = node.get("id", f"#{index}")
                raise ValueError(
                    f"node {name!r}: type: unknown node type {node.get('type')!r} (one of {', '.join(NODE_TYPES)})"
                )
        return data

    @model_validator(mode="after")
    def _ids_unique(self) -> WorkflowDefinition:
        seen: set[str] = set()
        for node in self.nodes:
            if node.id in seen:
                raise ValueError(f"node {node.id!r}: id: used by two nodes")
            seen.add(node.id)
        return self


class WorkflowsSettings(_Model):
    """`workflows:` in agentmesh.yaml: inline definitions, a folder of more, and the limits of conditions."""

    definitions: list[WorkflowDefinition] = []
    folder: Path | None = Field(None, description="Every *.yaml, *.yml and *.json file in it is one workflow.")
    condition_max_chars: int = Field(2000, ge=16, le=100_000)
    condition_max_nodes: int = Field(2000, ge=8, le=100_000)
    """Parse-tree nodes of a CEL expression, at most (checked at load)."""
    condition_max_nesting: int = Field(2, ge=0, le=4)
    """Macros (all, exists, map, filter...) inside one another, at most (checked at load)."""
    condition_max_cost: int = Field(1_000_000, ge=1000)
    """Estimated evaluation steps of one condition: its size x (longest list it sees)^nesting."""
    poll_interval_s: float = Field(1.0, gt=0, le=60)
    """How often each dispatcher advances due runs and fires due schedule ticks."""
    wake: bool = True
    """A step's end wakes its run's owner at once (a Redis stream); false: runs move at polls only."""
    lease_s: float = Field(30.0, ge=1, le=3600)
    """A replica advancing a run holds it this long; another takes over after it lapses."""
    run_ttl_s: int = Field(7 * 86400, ge=60)
    """A run and its events are kept this long after their last change."""

    @model_validator(mode="after")
    def _names_unique(self) -> WorkflowsSettings:
        names = [definition.name for definition in self.definitions]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"workflow names used twice: {', '.join(twice)}")
        return self
