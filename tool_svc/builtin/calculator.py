"""`calculator`: arithmetic by walking the AST of the expression, never eval.

Numbers, + - * / // % **, unary signs, parentheses, a few math functions and constants. Bounds keep a
single call cheap: expression length, AST size, exponent and result magnitude.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from agentmesh.errors import AgentmeshError, ErrorCode, Violation
from tool_svc.model import Invocation, Produced

MAX_EXPRESSION_CHARS = 500
MAX_NODES = 200
MAX_EXPONENT = 1000
MAX_INT_BITS = 4096

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "expression": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_EXPRESSION_CHARS,
            "description": "An arithmetic expression: numbers, + - * / // % **, parentheses, "
            "sqrt, log, log10, exp, sin, cos, tan, abs, round, min, max, pi, e",
            "examples": ["(17 * 3) / 4", "sqrt(2) * 10"],
        }
    },
    "required": ["expression"],
    "additionalProperties": False,
}

OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"expression": {"type": "string"}, "result": {"type": "number"}},
    "required": ["expression", "result"],
}

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sqrt": math.sqrt,
    "log": math.log,
    "log10": math.log10,
    "log2": math.log2,
    "exp": math.exp,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "floor": math.floor,
    "ceil": math.ceil,
}
_CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}


class _Invalid(Exception):
    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule
        self.message = message


def _check_magnitude(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Invalid("type", "the result is not a number")
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise _Invalid("range", f"an intermediate result exceeds {MAX_INT_BITS} bits")
    if isinstance(value, float) and not math.isfinite(value):
        raise _Invalid("range", "the result is not finite")
    return value


def _eval(node: ast.AST) -> Any:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise _Invalid("syntax", f"only numbers are allowed, got {node.value!r}")
        return node.value
    if isinstance(node, ast.Name):
        if node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        raise _Invalid("syntax", f"unknown name {node.id!r}; constants: {', '.join(_CONSTANTS)}")
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _check_magnitude(_UNARY[type(node.op)](_eval(node.operand)))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            if abs(right) > MAX_EXPONENT:
                raise _Invalid("range", f"exponents are limited to {MAX_EXPONENT}")
            # Refuse before computing: a huge base to a legal exponent could still take long.
            if isinstance(left, int) and isinstance(right, int) and left.bit_length() * right > MAX_INT_BITS:
                raise _Invalid("range", f"the result would exceed {MAX_INT_BITS} bits")
        try:
            return _check_magnitude(_BINARY[type(node.op)](left, right))
        except ZeroDivisionError:
            raise _Invalid("math", "division by zero") from None
        except OverflowError:
            raise _Invalid("range", "the result is too large") from None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        function = _FUNCTIONS.get(node.func.id)
        if function is None:
            raise _Invalid("syntax", f"unknown function {node.func.id!r}; functions: {', '.join(_FUNCTIONS)}")
        args = [_eval(arg) for arg in node.args]
        try:
            return _check_magnitude(function(*args))
        except (ValueError, TypeError, OverflowError) as exc:
            raise _Invalid("math", f"{node.func.id}: {exc}") from None
    raise _Invalid("syntax", f"{type(node).__name__} is not allowed in an arithmetic expression")


def evaluate(expression: str) -> int | float:
    """The value of `expression`; raises AgentmeshError SCHEMA_INVALID on any bad input."""
    try:
        if len(expression) > MAX_EXPRESSION_CHARS:
            raise _Invalid("maxLength", f"expressions are limited to {MAX_EXPRESSION_CHARS} characters")
        try:
            tree = ast.parse(expression.strip(), mode="eval")
        except (SyntaxError, ValueError) as exc:
            raise _Invalid("syntax", f"not an arithmetic expression: {getattr(exc, 'msg', exc)}") from None
        if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
            raise _Invalid("complexity", f"expressions are limited to {MAX_NODES} syntax nodes")
        result = _eval(tree)
        return result  # type: ignore[no-any-return]
    except _Invalid as exc:
        raise AgentmeshError(
            ErrorCode.SCHEMA_INVALID,
            f"calculator: {exc.message}",
            violations=[
                Violation(
                    path="$.expression",
                    rule=exc.rule,
                    expected="a valid arithmetic expression",
                    actual=expression[:200],
                    hint=f"{exc.message}; e.g. (17 * 3) / 4",
                )
            ],
        ) from None
    except RecursionError:
        raise AgentmeshError(
            ErrorCode.SCHEMA_INVALID,
            "calculator: expression nested too deeply",
            violations=[Violation(path="$.expression", rule="complexity", hint="use fewer nested parentheses")],
        ) from None


async def run(call: Invocation) -> Produced:
    expression = str(call.arguments["expression"])
    return Produced("structured", value={"expression": expression, "result": evaluate(expression)})
