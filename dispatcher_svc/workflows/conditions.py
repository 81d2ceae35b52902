"""Conditions of workflow nodes: CEL expressions (cel-python, a maintained pure-Python CEL; no eval).

An expression sees `input` and `nodes` (`nodes.<id>.output...`) and must give a bool. Its cost is
bounded twice. At load: its length, the size of its parse tree and how deeply its macros (`all`,
`exists`, `exists_one`, `map`, `filter`) nest. Before each evaluation: an estimate of the steps it
may take, its tree size x (the longest list in the data it sees)^(macro nesting), against
`workflows.condition_max_cost`, since a macro walks a list and nested macros multiply (CEL has no
loops or recursion otherwise, so this bounds the work).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import celpy
import celpy.adapter
import celpy.celparser
import celpy.celtypes
import celpy.evaluation
from lark import Token, Tree

from agentmesh.workflow_config import WorkflowsSettings

__all__ = ["MACROS", "Condition", "ConditionError", "compile_condition", "longest_list"]

MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
_ENV = celpy.Environment()
_to_cel = celpy.adapter.json_to_cel


class ConditionError(ValueError):
    """A condition that does not compile, is too costly, or did not give a bool."""


@dataclass(frozen=True)
class Condition:
    """A compiled CEL expression with what the load-time checks learned of it."""

    source: str
    size: int
    nesting: int
    nodes: frozenset[str]
    """The ids it reads as nodes.<id>."""
    program: Any

    def cost(self, data: Mapping[str, Any]) -> int:
        """The estimated evaluation steps on `data`."""
        return int(self.size * max(1, longest_list(data)) ** self.nesting)

    def evaluate(self, data: Mapping[str, Any], max_cost: int) -> bool:
        """The value on `data` ({"input": ..., "nodes": {id: output}}); ConditionError when the
        estimate exceeds `max_cost`, evaluation fails, or the value is not a bool."""
        cost = self.cost(data)
        if cost > max_cost:
            raise ConditionError(f"estimated cost {cost} is over workflows.condition_max_cost ({max_cost})")
        activation = {
            "input": _to_cel(data.get("input", {})),
            "nodes": _to_cel({node: {"output": out} for node, out in data.get("nodes", {}).items()}),
        }
        try:
            value = self.program.evaluate(activation)
        except celpy.evaluation.CELEvalError as exc:
            raise ConditionError(f"evaluation failed: {exc.args[0] if exc.args else exc}") from None
        if isinstance(value, celpy.evaluation.CELEvalError):
            raise ConditionError(f"evaluation failed: {value.args[0] if value.args else value}")
        if not isinstance(value, bool | celpy.celtypes.BoolType):
            raise ConditionError(f"the value is {type(value).__name__}, not a bool")
        return bool(value)


def longest_list(value: Any, depth: int = 0) -> int:
    """The length of the longest list (or map, or string: macros and functions walk them) in `value`."""
    if depth > 64:
        return 0
    if isinstance(value, Mapping):
        return max([len(value), *(longest_list(v, depth + 1) for v in value.values())])
    if isinstance(value, list):
        return max([len(value), *(longest_list(v, depth + 1) for v in value)])
    return len(value) if isinstance(value, str) else 0


def _is_nodes_ident(tree: Any) -> bool:
    # member -> primary -> ident(IDENT "nodes")
    while isinstance(tree, Tree) and tree.data in ("member", "primary") and len(tree.children) == 1:
        tree = tree.children[0]
    return isinstance(tree, Tree) and tree.data == "ident" and str(tree.children[0]) == "nodes"


def _walk(tree: Tree[Any], depth: int, found: set[str], stats: list[int]) -> None:
    """stats = [tree nodes, deepest macro nesting, `nodes` identifiers read as nodes.<id>, all `nodes` identifiers]."""
    stats[0] += 1
    inner = depth
    if tree.data == "member_dot_arg" and len(tree.children) >= 2 and str(tree.children[1]) in MACROS:
        inner = depth + 1
        stats[1] = max(stats[1], inner)
    if tree.data == "member_dot" and _is_nodes_ident(tree.children[0]) and isinstance(tree.children[1], Token):
        found.add(str(tree.children[1]))
        stats[2] += 1
    if tree.data == "ident" and str(tree.children[0]) == "nodes":
        stats[3] += 1
    for child in tree.children:
        if isinstance(child, Tree):
            # Only the macro's arguments run per element, not the list it is called on.
            nested = inner if tree.data == "member_dot_arg" and child.data == "exprlist" else depth
            _walk(child, nested, found, stats)


def _over(value: int, what: str, key: str, limit: int) -> str:
    return f"{value} {what}, over workflows.{key} ({limit})"


def compile_condition(source: str, limits: WorkflowsSettings) -> Condition:
    """The compiled expression; ConditionError saying which limit or which syntax it breaks."""
    if len(source) > limits.condition_max_chars:
        raise ConditionError(_over(len(source), "characters", "condition_max_chars", limits.condition_max_chars))
    try:
        tree = _ENV.compile(source)
    except celpy.celparser.CELParseError as exc:
        raise ConditionError(f"not CEL: {' '.join(str(exc).split())}") from None
    found: set[str] = set()
    stats = [0, 0, 0, 0]
    _walk(tree, 0, found, stats)
    size, nesting, dotted, idents = stats
    if size > limits.condition_max_nodes:
        raise ConditionError(_over(size, "parse-tree nodes", "condition_max_nodes", limits.condition_max_nodes))
    if nesting > limits.condition_max_nesting:
        raise ConditionError(_over(nesting, "nested macros", "condition_max_nesting", limits.condition_max_nesting))
    if idents > dotted:
        raise ConditionError("read a node's output as nodes.<id>.output (nodes alone or nodes[...] cannot be checked)")
    return Condition(source, size, nesting, frozenset(found), _ENV.program(tree))
