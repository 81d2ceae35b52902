"""The calculator's arithmetic guards: every operation whose cost grows with an operand's value is refused
before it runs, with the calculator's CONTRACT error (SCHEMA_INVALID, rule "range")."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from agentmesh.errors import AgentmeshError, ErrorClass, ErrorCode
from tool_svc.builtin.calculator import MAX_INT_BITS, Limits, cheap, evaluate, make
from tool_svc.model import Caller, Invocation


def refused(expression: str, limits: Limits | None = None) -> AgentmeshError:
    with pytest.raises(AgentmeshError) as caught:
        evaluate(expression) if limits is None else evaluate(expression, limits)
    err = caught.value
    assert err.code == ErrorCode.SCHEMA_INVALID and err.error_class == ErrorClass.CONTRACT
    assert err.violations[0].path == "$.expression"
    return err


@pytest.mark.parametrize(
    ("expression", "result"),
    [("1 << 8", 256), ("256 >> 4", 16), ("1 >> 10 ** 100", 0), (f"1 << {MAX_INT_BITS - 1}", 2 ** (MAX_INT_BITS - 1))],
)
def test_shifts_compute(expression: str, result: int) -> None:
    assert evaluate(expression) == result


@pytest.mark.parametrize("expression", ["1 << 10 ** 7", f"1 << {MAX_INT_BITS}", "(2 ** 1000 * 2 ** 1000) << 2100"])
def test_a_shift_past_the_bit_limit_is_refused(expression: str) -> None:
    err = refused(expression)
    assert err.violations[0].rule == "range" and f"{MAX_INT_BITS} bits" in err.message


@pytest.mark.parametrize("expression", ["1.5 << 2", "1 << -1"])
def test_a_shift_of_a_float_or_by_a_negative_count_is_a_math_error(expression: str) -> None:
    assert refused(expression).violations[0].rule == "math"


@pytest.mark.parametrize("expression", ["round(1, -10**7)", "round(1, -1001)", "round(1.5, 10**7)", "round(7, 1001)"])
def test_round_with_huge_digits_is_refused_before_it_runs(expression: str) -> None:
    # round(1, -10**7) used to compute 10**(10**7): ~12 s of one C call for a 0.
    err = refused(expression)
    assert err.violations[0].rule == "range" and "digits" in err.message


@pytest.mark.parametrize(
    ("expression", "result"), [("round(1234, -2)", 1200), ("round(2.675, 2)", 2.67), ("round(1, -1000)", 0)]
)
def test_round_within_the_limit(expression: str, result: float) -> None:
    assert evaluate(expression) == pytest.approx(result)


def test_bit_length_of_results_and_operands_is_capped() -> None:
    small = Limits(max_int_bits=64)
    assert evaluate("2 ** 30 * 2 ** 30", small) == 2**60
    # A result over the cap.
    assert refused("2 ** 31 * 2 ** 31 * 2 ** 31", small).violations[0].rule == "range"
    # An operand over the cap, before any operation.
    assert refused("100000000000000000000000 - 1", small).violations[0].rule == "range"
    # A power refused before it is computed.
    assert "would exceed 64 bits" in refused("3 ** 50", small).message
    assert refused("2 ** 2000 * 2 ** 2000 * 2 ** 2000").violations[0].rule == "range"


def test_the_default_limits_are_the_module_constants() -> None:
    assert Limits().max_int_bits == MAX_INT_BITS
    assert evaluate("round(1, -5)", Limits(max_round_digits=5)) == 0
    assert refused("round(1, -6)", Limits(max_round_digits=5)).violations[0].rule == "range"


@pytest.mark.parametrize(
    ("expression", "inline"),
    [
        ("3 * 2 + 0", True),
        ("(17 * 3) / 4", True),
        ("9" * 30 + " * " + "9" * 30, True),
        ("2 ** 10", False),  # the exponent is where cost hides
        ("1 << 3", False),
        ("9 % 2", False),
        ("sqrt(2)", False),
        ("1e5 * 2", False),
        ("1" + " + 1" * 20, False),  # over INLINE_MAX_CHARS
        ("\N{ARABIC-INDIC DIGIT ONE} + 1", False),  # a digit outside ASCII
    ],
)
async def test_only_expressions_whose_form_bounds_their_cost_skip_the_pool(expression: str, inline: bool) -> None:
    class Pool:
        def __init__(self) -> None:
            self.asked: list[str] = []

        async def run(self, fn: Any, expression: str, *args: Any, **kwargs: Any) -> Any:
            self.asked.append(expression)
            return fn(expression, *args)

    pool = Pool()
    run: Any = make(pool)  # type: ignore[arg-type]
    invocation = Invocation(
        tool=SimpleNamespace(fallback_tool=""),  # type: ignore[arg-type]  # the calculator reads only this
        arguments={"expression": expression},
        session_id="s",
        goal="",
        timeout_s=5,
        caller=Caller(subject="a"),
    )
    assert cheap(expression) is inline
    try:
        produced = await run(invocation)
    except AgentmeshError as err:  # evaluated the same either way: a contract error here
        assert err.code == ErrorCode.SCHEMA_INVALID
    else:
        assert produced.value == {"expression": expression, "result": evaluate(expression)}
    assert pool.asked == ([] if inline else [expression])


def test_an_inline_error_is_the_pools_contract_error() -> None:
    err = refused("1 / 0")
    assert cheap("1 / 0") and err.violations[0].rule == "math"
