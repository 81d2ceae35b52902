"""The edges of a workflow and what follows from them: order, cycles, ancestors.

A node depends on its `after` nodes; a condition's `then`/`else` targets depend on the condition; a
fallback node depends on the node it stands in for (it runs only once that one has failed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agentmesh.workflow_config import ConditionNode, Node

__all__ = ["ancestors", "dependencies", "find_cycle", "topological_order"]


def dependencies(nodes: Sequence[Node]) -> dict[str, list[str]]:
    """Node id -> the ids it waits for, in definition order (ids that exist or not: checked elsewhere)."""
    deps: dict[str, list[str]] = {node.id: list(dict.fromkeys(node.after)) for node in nodes}
    for node in nodes:
        if isinstance(node, ConditionNode):
            for target in [*node.then, *node.else_]:
                if target in deps and node.id not in deps[target]:
                    deps[target].append(node.id)
        if node.fallback in deps and node.id not in deps[node.fallback]:
            deps[node.fallback].append(node.id)
    return deps


def find_cycle(deps: Mapping[str, Sequence[str]]) -> list[str]:
    """One cycle as [a, b, ..., a] (a waits for b ...), or [] when the graph is a DAG."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for dep in deps.get(node, ()):
            if dep not in deps:
                continue
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep]
            if dep not in state:
                cycle = visit(dep)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return []

    for node in deps:
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return []


def topological_order(deps: Mapping[str, Sequence[str]]) -> list[str]:
    """Ids with every node after the ones it waits for (definition order among equals); the graph must be a DAG."""
    order: list[str] = []
    done: set[str] = set()

    def visit(node: str) -> None:
        if node in done:
            return
        done.add(node)
        for dep in deps[node]:
            visit(dep)
        order.append(node)

    for node in deps:
        visit(node)
    return order


def ancestors(deps: Mapping[str, Sequence[str]]) -> dict[str, frozenset[str]]:
    """Node id -> every node that has finished before it can start (transitively); a DAG."""
    found: dict[str, frozenset[str]] = {}
    for node in topological_order(deps):
        acc: set[str] = set()
        for dep in deps[node]:
            acc.add(dep)
            acc |= found[dep]
        found[node] = frozenset(acc)
    return found
