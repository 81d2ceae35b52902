"""Load-time checks of a workflow definition, and the checked, compiled `Workflow` they produce.

Refused, with the workflow, the node and the field named (WorkflowInvalidError): edges to nodes that
do not exist, cycles, unknown agents or tools, misused fallbacks, joins and branches, templates that
do not parse or read a node that cannot have run yet (not an ancestor), conditions that are not CEL
or exceed the cost limits, and JSON Schemas that are not schemas. (Unknown node types and wrong
field types are refused before, by the pydantic model in agentmesh/workflow_config.py.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator  # type: ignore[import-untyped, unused-ignore]
from jsonschema.exceptions import SchemaError  # type: ignore[import-untyped, unused-ignore]

from agentmesh.config import Settings
from agentmesh.workflow_config import (
    AgentStep,
    ConditionNode,
    JoinNode,
    Node,
    ParallelNode,
    RetryPolicy,
    ToolStep,
    WorkflowDefinition,
    WorkflowsSettings,
)
from dispatcher_svc.workflows.conditions import Condition, ConditionError, compile_condition
from dispatcher_svc.workflows.errors import WorkflowInvalidError
from dispatcher_svc.workflows.graph import ancestors, dependencies, find_cycle, topological_order
from dispatcher_svc.workflows.templates import Ref, TemplateSyntaxError, json_strings, refs_in

__all__ = ["Names", "Workflow", "compile_workflow"]


@dataclass(frozen=True)
class Names:
    """What a definition may name: configured agents, and tools (registry entries, built-ins, and
    `<prefix>__<tool>` of a configured MCP server, whose tool list is known only at run time)."""

    agents: frozenset[str]
    tools: frozenset[str]
    tool_prefixes: tuple[str, ...] = ()

    @classmethod
    def of(cls, settings: Settings) -> Names:
        tools = {entry.name for entry in settings.tools.registry} | set(settings.tools.builtins)
        prefixes = tuple(f"{server.prefix or server.name}__" for server in settings.tools.mcp_servers)
        return cls(frozenset(agent.id for agent in settings.agents), frozenset(tools), prefixes)

    def has_tool(self, name: str) -> bool:
        return name in self.tools or any(name.startswith(p) and len(name) > len(p) for p in self.tool_prefixes)


@dataclass(frozen=True)
class Workflow:
    """A checked definition and its graph, ready for the scheduler."""

    definition: WorkflowDefinition
    limits: WorkflowsSettings
    nodes: Mapping[str, Node]
    deps: Mapping[str, tuple[str, ...]]
    dependents: Mapping[str, tuple[str, ...]]
    order: tuple[str, ...]
    conditions: Mapping[str, Condition]
    fallback_of: Mapping[str, str]
    """Fallback node id -> the node it stands in for."""
    branches: Mapping[str, tuple[tuple[str, bool], ...]] = field(default_factory=dict)
    """Node id -> (condition id, the value that runs it) for each condition that targets it."""

    @property
    def name(self) -> str:
        return self.definition.name

    def retry(self, node: str) -> RetryPolicy:
        return self.nodes[node].retry or self.definition.defaults.retry

    def timeout_s(self, node: str) -> float:
        return self.nodes[node].timeout_s or self.definition.defaults.timeout_s


def _templates(node: Node) -> Iterable[tuple[str, str, bool]]:
    """(field, template, may use item) of every template of a node."""
    if isinstance(node, AgentStep):
        yield "goal", node.goal, False
    if isinstance(node, ToolStep):
        for text in json_strings(node.arguments):
            yield "arguments", text, False
    if isinstance(node, ParallelNode):
        yield "over", node.over, False
        if isinstance(node.do, AgentStep):
            yield "do.goal", node.do.goal, True
        else:
            for text in json_strings(node.do.arguments):
                yield "do.arguments", text, True


def _schemas(definition: WorkflowDefinition) -> Iterable[tuple[str, str, dict[str, Any] | None]]:
    yield "", "input_schema", definition.input_schema
    for node in definition.nodes:
        if isinstance(node, AgentStep):
            yield node.id, "output_schema", node.output_schema
        if isinstance(node, ParallelNode) and isinstance(node.do, AgentStep):
            yield node.id, "do.output_schema", node.do.output_schema


def _check_edges(definition: WorkflowDefinition) -> dict[str, str]:
    """Edges name existing nodes; fallbacks, branches and joins are used as they must be.
    Returns fallback id -> the node it stands in for."""
    name = definition.name
    ids = {node.id for node in definition.nodes}
    fallback_of: dict[str, str] = {}
    for node in definition.nodes:
        edges: list[tuple[str, list[str]]] = [("after", node.after)]
        if isinstance(node, ConditionNode):
            edges += [("then", node.then), ("else", node.else_)]
        if node.fallback:
            edges.append(("fallback", [node.fallback]))
        for field_name, targets in edges:
            for target in targets:
                if target not in ids:
                    raise WorkflowInvalidError(name, node.id, field_name, f"unknown node {target!r}")
                if target == node.id and field_name != "after":
                    raise WorkflowInvalidError(name, node.id, field_name, "a node cannot name itself here")
        if isinstance(node, ConditionNode):
            both = set(node.then) & set(node.else_)
            if both:
                raise WorkflowInvalidError(name, node.id, "else", f"{sorted(both)[0]!r} is in then and else")
        if node.fallback:
            if node.fallback in fallback_of:
                raise WorkflowInvalidError(
                    name,
                    node.id,
                    "fallback",
                    f"{node.fallback!r} is already the fallback of {fallback_of[node.fallback]!r}",
                )
            fallback_of[node.fallback] = node.id
        if isinstance(node, JoinNode):
            if not node.after:
                raise WorkflowInvalidError(name, node.id, "after", "a join needs the nodes it waits for")
            if node.mode == "n" and (node.n is None or node.n > len(node.after)):
                raise WorkflowInvalidError(name, node.id, "n", f"mode n needs 1 <= n <= {len(node.after)} (its inputs)")
            if node.mode != "n" and node.n is not None:
                raise WorkflowInvalidError(name, node.id, "n", f"n is for mode n, not {node.mode}")
    by_id = {node.id: node for node in definition.nodes}
    for fallback, protected in fallback_of.items():
        if not isinstance(by_id[fallback], AgentStep | ToolStep):
            raise WorkflowInvalidError(name, protected, "fallback", f"{fallback!r} is not an agent or tool node")
    for node in definition.nodes:
        targets = [*node.after] + ([*node.then, *node.else_] if isinstance(node, ConditionNode) else [])
        for target in targets:
            if target in fallback_of:
                field_name = "after" if target in node.after else "then/else"
                raise WorkflowInvalidError(
                    name,
                    node.id,
                    field_name,
                    f"{target!r} is a fallback node: wait for {fallback_of[target]!r}, whose output it stands in for",
                )
    return fallback_of


def _check_names(definition: WorkflowDefinition, names: Names) -> None:
    for node in definition.nodes:
        steps: list[tuple[str, AgentStep | ToolStep]] = []
        if isinstance(node, AgentStep | ToolStep):
            steps.append(("", node))
        if isinstance(node, ParallelNode):
            steps.append(("do.", node.do))
        for prefix, step in steps:
            if isinstance(step, AgentStep) and step.agent not in names.agents:
                raise WorkflowInvalidError(definition.name, node.id, f"{prefix}agent", f"unknown agent {step.agent!r}")
            if isinstance(step, ToolStep) and not names.has_tool(step.tool):
                raise WorkflowInvalidError(definition.name, node.id, f"{prefix}tool", f"unknown tool {step.tool!r}")


def _check_ref(
    workflow: str, node: str, field_name: str, ref: Ref, seen: frozenset[str], ids: set[str], item_ok: bool
) -> None:
    if ref.root == "item" and not item_ok:
        raise WorkflowInvalidError(workflow, node, field_name, "item exists only in a parallel node's do")
    if ref.root == "nodes" and ref.node not in ids:
        raise WorkflowInvalidError(workflow, node, field_name, f"{ref.json_path}: unknown node {ref.node!r}")
    if ref.root == "nodes" and ref.node not in seen:
        raise WorkflowInvalidError(
            workflow,
            node,
            field_name,
            f"{ref.json_path}: {ref.node!r} is not an ancestor of {node!r}, so it cannot have run yet "
            "(add it to after)",
        )


def compile_workflow(definition: WorkflowDefinition, names: Names, limits: WorkflowsSettings) -> Workflow:
    """The checked workflow; WorkflowInvalidError naming the node and the field of the first problem."""
    name = definition.name
    fallback_of = _check_edges(definition)
    deps = dependencies(definition.nodes)
    cycle = find_cycle(deps)
    if cycle:
        path = " -> ".join(cycle)
        raise WorkflowInvalidError(name, cycle[0], "after", f"cycle: {path} (each waits for the next)")
    _check_names(definition, names)
    seen = ancestors(deps)
    ids = set(deps)
    conditions: dict[str, Condition] = {}
    for node in definition.nodes:
        for field_name, text, item_ok in _templates(node):
            try:
                refs = refs_in(text)
            except TemplateSyntaxError as exc:
                raise WorkflowInvalidError(name, node.id, field_name, str(exc)) from None
            whole = text.strip().startswith("{{") and text.strip().endswith("}}")
            if field_name == "over" and (len(refs) != 1 or not whole):
                raise WorkflowInvalidError(name, node.id, "over", "must be one reference to a list: {{ input.items }}")
            for ref in refs:
                _check_ref(name, node.id, field_name, ref, seen[node.id], ids, item_ok)
        if isinstance(node, ConditionNode):
            try:
                condition = compile_condition(node.when, limits)
            except ConditionError as exc:
                raise WorkflowInvalidError(name, node.id, "when", str(exc)) from None
            for read in sorted(condition.nodes):
                _check_ref(name, node.id, "when", Ref("nodes", read, ()), seen[node.id], ids, False)
            conditions[node.id] = condition
    for node_id, field_name, schema in _schemas(definition):
        if schema is not None:
            try:
                Draft202012Validator.check_schema(schema)
            except SchemaError as exc:
                raise WorkflowInvalidError(name, node_id, field_name, f"not a JSON Schema: {exc.message}") from None
    branches: dict[str, list[tuple[str, bool]]] = {}
    for spec in definition.nodes:
        if isinstance(spec, ConditionNode):
            for target in spec.then:
                branches.setdefault(target, []).append((spec.id, True))
            for target in spec.else_:
                branches.setdefault(target, []).append((spec.id, False))
    dependents: dict[str, list[str]] = {node_id: [] for node_id in deps}
    for node_id, waits in deps.items():
        for dep in waits:
            dependents[dep].append(node_id)
    return Workflow(
        definition=definition,
        limits=limits,
        nodes={node.id: node for node in definition.nodes},
        deps={node: tuple(waits) for node, waits in deps.items()},
        dependents={node: tuple(after) for node, after in dependents.items()},
        order=tuple(topological_order(deps)),
        conditions=conditions,
        fallback_of=fallback_of,
        branches={node: tuple(conds) for node, conds in branches.items()},
    )
