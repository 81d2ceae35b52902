"""`calculator`: arithmetic by walking the AST of the expression, never eval.

Numbers, + - * / // % ** << >>, unary signs, parentheses, a few math functions and constants. Bounds keep a
single call cheap: expression length, AST size, and every operation that can explode is refused before it
runs (`Limits`): `**` by exponent and result size, `<<` by count and result size, `round` by its digits,
and every integer operand and result by bit length. The evaluation runs in tool_svc's CPU pool
(`tool_svc.cpu`), so a case the bounds miss ends UPSTREAM_TIMEOUT and never stalls the service; only an
expression whose form bounds its cost (`cheap`: short, + - * / on plain numbers) is evaluated in the service.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentmesh.errors import AgentmeshError, ErrorCode, Violation
from tool_svc.cpu import CpuPool
from tool_svc.model import Executor, Invocation, Produced

MAX_EXPRESSION_CHARS = 500
MAX_NODES = 200
MAX_EXPONENT = 1000
MAX_INT_BITS = 4096
MAX_ROUND_DIGITS = 1000
"""`round(x, n)` with |n| over this is refused: for an integer x, n < 0 computes 10**-n."""


@dataclass(frozen=True)
class Limits:
    """The bounds of one evaluation; they travel with the job to the worker (by value)."""

    max_exponent: int = MAX_EXPONENT
    max_int_bits: int = MAX_INT_BITS
    max_round_digits: int = MAX_ROUND_DIGITS


LIMITS = Limits()

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "expression": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_EXPRESSION_CHARS,
            "description": "An arithmetic expression: numbers, + - * / // % ** << >>, parentheses, "
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
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
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


def _check_magnitude(value: Any, limits: Limits) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Invalid("type", "the result is not a number")
    if isinstance(value, int) and value.bit_length() > limits.max_int_bits:
        raise _Invalid("range", f"an intermediate result exceeds {limits.max_int_bits} bits")
    if isinstance(value, float) and not math.isfinite(value):
        raise _Invalid("range", "the result is not finite")
    return value


def _check_binary(op: ast.operator, left: Any, right: Any, limits: Limits) -> None:
    """Refuses, before computing, the operations whose cost grows with the value of an operand."""
    both_int = isinstance(left, int) and isinstance(right, int)
    if isinstance(op, ast.Pow):
        if abs(right) > limits.max_exponent:
            raise _Invalid("range", f"exponents are limited to {limits.max_exponent}")
        # A huge base to a legal exponent could still take long.
        if both_int and left.bit_length() * right > limits.max_int_bits:
            raise _Invalid("range", f"the result would exceed {limits.max_int_bits} bits")
    elif isinstance(op, ast.LShift) and both_int and right > 0 and left.bit_length() + right > limits.max_int_bits:
        # `1 << 10**9` allocates the whole result first; the result check would come too late.
        raise _Invalid("range", f"the result would exceed {limits.max_int_bits} bits")


def _round(args: list[Any], limits: Limits) -> Any:
    if len(args) == 2 and isinstance(args[1], int) and abs(args[1]) > limits.max_round_digits:
        # round(1, -10**7) computes 10**(10**7): seconds of CPU for a 0.
        raise _Invalid("range", f"round: the number of digits is limited to +-{limits.max_round_digits}")
    return round(*args)


def _eval(node: ast.AST, limits: Limits) -> Any:
    if isinstance(node, ast.Expression):
        return _eval(node.body, limits)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise _Invalid("syntax", f"only numbers are allowed, got {node.value!r}")
        return _check_magnitude(node.value, limits)
    if isinstance(node, ast.Name):
        if node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        raise _Invalid("syntax", f"unknown name {node.id!r}; constants: {', '.join(_CONSTANTS)}")
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _check_magnitude(_UNARY[type(node.op)](_eval(node.operand, limits)), limits)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left, limits), _eval(node.right, limits)
        try:
            _check_binary(node.op, left, right, limits)
            return _check_magnitude(_BINARY[type(node.op)](left, right), limits)
        except ZeroDivisionError:
            raise _Invalid("math", "division by zero") from None
        except OverflowError:
            raise _Invalid("range", "the result is too large") from None
        except (TypeError, ValueError) as exc:  # a float shifted, a negative shift count
            raise _Invalid("math", str(exc)) from None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        function = _FUNCTIONS.get(node.func.id)
        if function is None:
            raise _Invalid("syntax", f"unknown function {node.func.id!r}; functions: {', '.join(_FUNCTIONS)}")
        args = [_eval(arg, limits) for arg in node.args]
        try:
            if function is round:
                return _check_magnitude(_round(args, limits), limits)
            return _check_magnitude(function(*args), limits)
        except (ValueError, TypeError, OverflowError) as exc:
            raise _Invalid("math", f"{node.func.id}: {exc}") from None
    raise _Invalid("syntax", f"{type(node).__name__} is not allowed in an arithmetic expression")


def evaluate(expression: str, limits: Limits = LIMITS) -> int | float:
    """The value of `expression`; raises AgentmeshError SCHEMA_INVALID on any bad input. CPU-bound: the
    executor runs it in the CPU pool."""
    try:
        if len(expression) > MAX_EXPRESSION_CHARS:
            raise _Invalid("maxLength", f"expressions are limited to {MAX_EXPRESSION_CHARS} characters")
        try:
            tree = ast.parse(expression.strip(), mode="eval")
        except (SyntaxError, ValueError) as exc:
            raise _Invalid("syntax", f"not an arithmetic expression: {getattr(exc, 'msg', exc)}") from None
        if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
            raise _Invalid("complexity", f"expressions are limited to {MAX_NODES} syntax nodes")
        result = _eval(tree, limits)
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


INLINE_MAX_CHARS = 64
"""An expression of at most this many characters, of `_INLINE_CHARS` alone, is evaluated in the service."""

_INLINE_CHARS = frozenset("0123456789.+-*/() ")


def cheap(expression: str) -> bool:
    """Whether `expression`'s cost is bounded by its form: at most `INLINE_MAX_CHARS` characters of digits,
    points, `+ - * /`, parentheses and spaces (no `**`, no shifts, no functions, no exponent notation).
    Then at most ~30 operations on numbers of a few hundred bits: microseconds, whatever the numbers.

    Such an expression is evaluated in the service: the pool's round trip to a worker process (~1.5 ms,
    bench_peer's task, issue 45) was most of a calculator call. Every other expression runs in the pool.
    """
    return len(expression) <= INLINE_MAX_CHARS and "**" not in expression and _INLINE_CHARS.issuperset(expression)


def make(cpu: CpuPool) -> Executor:
    async def run(call: Invocation) -> Produced:
        expression = str(call.arguments["expression"])
        if cheap(expression):
            result = evaluate(expression, LIMITS)
        else:
            # In the pool: beyond `cheap`, the cost of an expression does not show in its length.
            # `LIMITS` is read at call time and sent by value.
            result = await cpu.run(
                evaluate,
                expression,
                LIMITS,
                timeout_s=call.timeout_s,
                what="calculator",
                fallback_tool=call.tool.fallback_tool,
            )
        return Produced("structured", value={"expression": expression, "result": result})

    return run
