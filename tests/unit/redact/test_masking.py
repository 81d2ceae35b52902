"""Masking (agentmesh/redact/spans.py) and the redactor's entry points (agentmesh/redact/__init__.py):
a finding is masked over its whole token and everywhere it recurs, `changed` says whether anything was
masked, structured values stay structured, and what gitleaks vetoes the guesses do not mask."""

from __future__ import annotations

import pytest

from agentmesh.errors import AgentmeshError, ErrorCode, Violation
from agentmesh.redact import MASK, find_secrets, redact_error, redact_field, redact_str, redact_text, redact_value
from agentmesh.redact.spans import Finding, mask, merged, widen

TOKEN = "Xk9vQ2mR7tLp4Wz8Ns3Yd6Hf1Jc5Bg0a"


# --- widen


def test_widen_takes_the_rest_of_a_token_of_letters_and_digits() -> None:
    text = "id abc123XYZ done"
    assert widen(text, 5, 8) == (3, 12)


def test_widen_stops_at_the_ends_of_the_text() -> None:
    assert widen("abc123", 2, 4) == (0, 6)


def test_widen_crosses_only_the_punctuation_the_secret_holds() -> None:
    # The span holds `-`: the token goes on over `-`, not over `.` or `_` (not in the span).
    text = " x.ab-cd-ef_g "
    assert widen(text, 3, 6) == (3, 11)
    # The span holds `+` and `/` (base64): both extend it, on both sides.
    text = " q/rs+tu/v "
    assert widen(text, 2, 6) == (1, 10)
    assert widen(text, 3, 6) == (3, 8)  # `rs+` holds no `/`
    # Without punctuation in the span, none is crossed.
    assert widen(" ab-cd ", 1, 3) == (1, 3)


@pytest.mark.parametrize("c", list("-_+/.~"))
def test_each_separator_a_secret_holds_extends_it(c: str) -> None:
    text = f" a{c}b{c}c{c}d "
    assert widen(text, 1, 4) == (1, 8)


def test_widen_never_crosses_quotes_spaces_or_non_ascii_letters() -> None:
    assert widen('"abc"', 1, 3) == (1, 4)
    assert widen("éabc é", 1, 3) == (1, 4)


@pytest.mark.parametrize(("tail", "taken"), [("", 0), ("=", 1), ("==", 2), ("===", 3), ("====", 3)])
def test_widen_takes_up_to_three_padding_characters(tail: str, taken: int) -> None:
    text = f"abc{tail} x"
    assert widen(text, 0, 3) == (0, 3 + taken)


def test_padding_is_only_taken_at_the_end_of_the_token() -> None:
    assert widen("=abc", 1, 4) == (1, 4)


# --- merged


def test_merged_sorts_widens_and_joins_overlapping_or_touching_spans() -> None:
    text = "aaaa bbbb cccc"
    spans = merged(text, [Finding(11, 12, "r"), Finding(0, 2, "r"), Finding(2, 3, "r")])
    assert spans == [(0, 4), (10, 14)]
    # Touching after widening: `ab` + `-` + `cd` with the `-` inside one finding.
    assert merged("ab-cd x", [Finding(0, 3, "r"), Finding(3, 5, "r")]) == [(0, 5)]


def test_merged_keeps_the_longer_end_of_nested_spans() -> None:
    text = "ab cd-ef gh"
    assert merged(text, [Finding(3, 8, "r"), Finding(3, 4, "r")]) == [(3, 8)]


def test_merged_drops_empty_findings() -> None:
    assert merged("abc def", [Finding(2, 2, "r"), Finding(3, 1, "r")]) == []


# --- mask


def test_mask_without_findings_is_the_text_unchanged() -> None:
    assert mask("hello", []) == ("hello", False)


def test_mask_with_only_empty_findings_changes_nothing() -> None:
    assert mask("hello", [Finding(2, 2, "r")]) == ("hello", False)


def test_mask_replaces_each_span_and_keeps_the_rest() -> None:
    text = f"a {TOKEN} b {TOKEN[:8]}zz c"
    start = text.index(TOKEN)
    assert mask(text, [Finding(start, start + 4, "r")]) == (f"a {MASK} b {TOKEN[:8]}zz c", True)


def test_mask_removes_every_other_occurrence_of_a_found_secret() -> None:
    text = f"{TOKEN} then {TOKEN}, and x{TOKEN}"
    out, changed = mask(text, [Finding(0, len(TOKEN), "r")])
    assert changed and TOKEN not in out and out == f"{MASK} then {MASK}, and x{MASK}"


def test_a_found_value_of_six_characters_is_masked_elsewhere_and_a_shorter_one_is_not() -> None:
    out, _ = mask("k9x2m7 and k9x2m7", [Finding(0, 6, "r")])
    assert out == f"{MASK} and {MASK}"
    out, _ = mask("k9x2m and k9x2m", [Finding(0, 5, "r")])
    assert out == f"{MASK} and k9x2m"


def test_a_longer_secret_is_masked_before_a_shorter_one_inside_it() -> None:
    long, short = "Ab3dEf9hJk2m", "Ab3dEf"
    text = f"{long} {short} ; {long}/{short}!"
    out, _ = mask(text, [Finding(0, len(long), "r"), Finding(len(long) + 1, len(long) + 1 + len(short), "r")])
    assert out == f"{MASK} {MASK} ; {MASK}/{MASK}!"


def test_a_finding_of_the_masks_own_text_is_not_searched_for() -> None:
    text = f"{MASK} REDACTED"
    start = text.index("REDACTED", len(MASK))
    out, changed = mask(text, [Finding(start, start + 8, "r")])
    assert changed and out == f"{MASK} {MASK}"


# --- the entry points


def test_redact_text_masks_and_reports_the_change() -> None:
    assert redact_text(f"password={TOKEN}") == (f"password={MASK}", True)
    assert redact_text("nothing to see") == ("nothing to see", False)


def test_redact_str_returns_the_text_only() -> None:
    assert redact_str(f"Bearer {TOKEN}") == f"Bearer {MASK}"


def test_a_lone_token_is_a_secret_in_a_whole_text_and_not_in_a_field() -> None:
    assert redact_text(TOKEN) == (MASK, True)
    assert redact_text(TOKEN, whole_text=False) == (TOKEN, False)
    assert redact_field(TOKEN) == (TOKEN, False)
    assert redact_field(f"token={TOKEN}") == (f"token={MASK}", True)


def test_find_secrets_reports_each_detectors_findings() -> None:
    text = f"api_key = '{TOKEN}'"
    rules = {f.rule for f in find_secrets(text)}
    assert "assignment:assignment" in rules
    assert any(r.startswith("gitleaks:") for r in rules)
    assert find_secrets(TOKEN, whole_text=False) == []
    assert [f.rule for f in find_secrets(TOKEN)] == ["context:lone-token"]


def test_a_gitleaks_veto_drops_an_overlapping_guess_but_not_structure() -> None:
    # AWS's documented example key id: gitleaks' allowlist rejects it, so the assignment grammar's guess
    # of the same value goes too.
    text = "aws_access_key_token = AKIAIOSFODNN7EXAMPLE"
    assert redact_text(text) == (text, False)
    # A URL's credentials are structure, never vetoed, even where a rule rejected the same span.
    url = "https://user:AKIAIOSFODNN7EXAMPLE@example.com/"
    assert redact_text(url)[1]


def test_a_veto_ending_where_a_guess_starts_still_covers_it() -> None:
    from agentmesh.redact import _Vetoes

    vetoes = _Vetoes([Finding(10, 20, "gitleaks:x"), Finding(0, 3, "gitleaks:y")])
    assert vetoes.covers(Finding(20, 25, "assignment:assignment"))
    assert vetoes.covers(Finding(5, 10, "context:lone-token"))
    assert vetoes.covers(Finding(3, 4, "context:auth-scheme"))
    assert vetoes.covers(Finding(12, 14, "context:vendor-prefix"))
    assert not vetoes.covers(Finding(4, 9, "assignment:assignment"))
    assert not vetoes.covers(Finding(21, 25, "assignment:assignment"))
    assert not vetoes.covers(Finding(12, 14, "context:jwt"))
    assert not _Vetoes([]).covers(Finding(0, 5, "assignment:assignment"))


def test_a_long_veto_seen_first_covers_a_guess_after_a_short_one() -> None:
    from agentmesh.redact import _Vetoes

    # Sorted by start: (0, 50) then (5, 6); a guess at 30-35 is inside the first.
    vetoes = _Vetoes([Finding(5, 6, "gitleaks:a"), Finding(0, 50, "gitleaks:b")])
    assert vetoes.covers(Finding(30, 35, "assignment:assignment"))


def test_a_keyboard_run_under_the_generic_rule_is_a_stand_in() -> None:
    text = 'api_token = "abcdef0123456789abcd"'
    assert redact_text(text) == (text, False)
    # The same key with a random value is masked.
    assert redact_text(f'api_token = "{TOKEN}"') == (f'api_token = "{MASK}"', True)


# --- structured values


def test_redact_value_masks_secret_named_keys_whole_and_walks_the_rest() -> None:
    value = {
        "password": 1234567,
        "api_key": 3.5,
        "token": "plain words",
        "secret": True,
        "pwd": "",
        "auth": None,
        "items": [f"Bearer {TOKEN}", 3, {"client_secret": "x9"}],
        "name": "orders",
    }
    out, changed = redact_value(value)
    assert changed
    assert out == {
        "password": MASK,
        "api_key": MASK,
        "token": MASK,
        "secret": True,
        "pwd": "",
        "auth": None,
        "items": [f"Bearer {MASK}", 3, {"client_secret": MASK}],
        "name": "orders",
    }


def test_redact_value_judges_keys_alike_whether_remembered_or_too_long_to_be() -> None:
    """Key verdicts are remembered for keys up to 64 characters (issue 45): the same verdict every
    time, and a longer key is still judged by its words."""
    long_secret, long_plain = "upstream_service_" * 4 + "password", "upstream_service_" * 4 + "name"
    value = {"api_key": "v1", "role": "user", long_secret: "v2", long_plain: "v3"}
    for _ in range(2):
        out, changed = redact_value(value)
        assert changed
        assert out == {"api_key": MASK, "role": "user", long_secret: MASK, long_plain: "v3"}


def test_redact_value_of_clean_values_reports_no_change() -> None:
    value = {"a": [1, "two", {"b": None}], "secret": False, "token": ""}
    assert redact_value(value) == (value, False)
    assert redact_value(["x", ["y"]]) == (["x", ["y"]], False)
    assert redact_value(7) == (7, False)


def test_a_change_deep_in_a_list_or_dict_is_reported() -> None:
    assert redact_value([["a"], [f"token={TOKEN}"]]) == ([["a"], [f"token={MASK}"]], True)
    assert redact_value({"a": {"b": f"token={TOKEN}"}, "c": 1}) == ({"a": {"b": f"token={MASK}"}, "c": 1}, True)
    # A change early is not lost by a clean value after it.
    assert redact_value([f"token={TOKEN}", "clean"])[1]
    assert redact_value({"a": f"token={TOKEN}", "b": "clean"})[1]


def test_redact_value_uses_the_given_string_masker() -> None:
    seen: list[str] = []

    def text(s: str) -> tuple[str, bool]:
        seen.append(s)
        return s.upper(), s == "b"

    assert redact_value({"k": ["a", "b"]}, text) == ({"k": ["A", "B"]}, True)
    assert seen == ["a", "b"]


def test_redact_value_keys_that_are_not_strings() -> None:
    assert redact_value({1: "x"}) == ({1: "x"}, False)


# --- errors


def test_a_clean_error_is_returned_as_is() -> None:
    error = AgentmeshError(ErrorCode.FAILED_PRECONDITION, "bad input", metadata={"field": "name"})
    assert redact_error(error) is error


def test_redact_error_masks_message_violations_and_metadata() -> None:
    error = AgentmeshError(
        ErrorCode.FAILED_PRECONDITION,
        f"login failed: password={TOKEN}",
        violations=(
            Violation(
                path=f"token={TOKEN}",
                rule="secret.rule",
                expected=f"Bearer {TOKEN}",
                actual=f"secret: {TOKEN}",
                hint=f"apikey={TOKEN}",
            ),
        ),
        metadata={"header": f"Bearer {TOKEN}", "approval_id": TOKEN},
    )
    out = redact_error(error)
    assert out is not error
    assert TOKEN not in out.message and MASK in out.message
    v = out.violations[0]
    assert MASK in v.path and MASK in v.expected and MASK in v.actual and MASK in v.hint and v.rule == "secret.rule"
    assert TOKEN not in repr(v)
    # Metadata values are ids: a lone token stays; an auth header does not.
    assert out.metadata == {"header": f"Bearer {MASK}", "approval_id": TOKEN}
    assert out.code == error.code


@pytest.mark.parametrize("where", ["message", "violation", "metadata"])
def test_a_secret_in_any_one_part_of_an_error_makes_a_new_error(where: str) -> None:
    secret = f"password={TOKEN}"
    error = AgentmeshError(
        ErrorCode.FAILED_PRECONDITION,
        secret if where == "message" else "bad",
        violations=(Violation(path="p", rule="r", expected="e", actual=secret if where == "violation" else "a"),),
        metadata={"m": secret if where == "metadata" else "v"},
    )
    out = redact_error(error)
    assert out is not error
    assert TOKEN not in f"{out.message} {out.violations} {out.metadata}"


def test_spans_that_touch_merge_into_one_mask() -> None:
    assert merged('ab"cd', [Finding(0, 2, "r"), Finding(2, 5, "r")]) == [(0, 5)]
    assert mask('ab"cd', [Finding(0, 2, "r"), Finding(2, 5, "r")]) == (MASK, True)


def test_empty_structures_are_unchanged() -> None:
    values: list[object] = [[], {}, [[]], {"a": {}}]
    for value in values:
        out, changed = redact_value(value)
        assert out == value and changed is False


def test_lone_surrogates_are_kept_and_the_secrets_beside_them_masked() -> None:
    # JSON may escape a lone surrogate (`"\ud800"`); UTF-8, which RE2 reads, cannot hold one.
    assert redact_text("\ud800") == ("\ud800", False)
    assert redact_text(f"\udfff password={TOKEN} \ud800") == (f"\udfff password={MASK} \ud800", True)
    assert redact_value({"a": "\ud800", "b": [f"Bearer {TOKEN}\udc00"]}) == (
        {"a": "\ud800", "b": [f"Bearer {MASK}\udc00"]},
        True,
    )
