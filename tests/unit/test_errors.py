"""The error vocabulary: enum parity with the proto, the class table, model text, purity."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest

from agentmesh.errors import (
    ERROR_CLASS,
    AgentmeshError,
    ErrorClass,
    ErrorCode,
    FailedPreconditionError,
    InvalidRequestError,
    NotFoundError,
    OverloadedError,
    PayloadTooLargeError,
    PermissionDeniedError,
    UnauthenticatedError,
    UnavailableError,
    Violation,
    echo,
    error_class,
    model_text,
)
from agentmesh.rpc.status import GRPC_STATUS, from_detail, to_detail, to_rpc_status
from agentmesh.v1 import common_pb2

# docs/design.md §3, copied code by code so a change to the table is a deliberate, reviewed edit.
DESIGN_CONTRACT = ["SCHEMA_INVALID", "ARGUMENTS_NOT_JSON", "UNKNOWN_TOOL", "IDEMPOTENCY_CONFLICT"]
DESIGN_ENGINEERING = [
    "UPSTREAM_NOT_FOUND",
    "UPSTREAM_TIMEOUT",
    "UPSTREAM_UNAVAILABLE",
    "UPSTREAM_REJECTED",
    "RATE_LIMITED",
    "CIRCUIT_OPEN",
    "PERMISSION_DENIED",
    "APPROVAL_DENIED",
    "APPROVAL_EXPIRED",
    "OUTPUT_INVALID",
    "SANDBOX_UNAVAILABLE",
    "PROVIDER_AUTH_FAILED",
    "CONTEXT_LENGTH_EXCEEDED",
    "CONTENT_FILTERED",
    "INVALID_REQUEST",
    "INTERNAL",
]
DESIGN_FATAL = [
    "DANGEROUS_OPERATION",
    "BUDGET_EXHAUSTED",
    "MAX_STEPS_EXCEEDED",
    "LOOP_DETECTED",
    "SANDBOX_VIOLATION",
]
# In the proto beyond DESIGN's list: faults of the RPC itself.
RPC_ENGINEERING = [
    "NOT_FOUND",
    "UNAVAILABLE",
    "UNAUTHENTICATED",
    "PAYLOAD_TOO_LARGE",
    "OVERLOADED",
    "CANCELLED",
    "DEADLINE_EXCEEDED",
    "FAILED_PRECONDITION",
]
# Issue 18: a write's outcome unknown; an operator settles it (ENGINEERING: the model cannot fix it).
# Issue 41: a final answer claimed an action no write did, again after its correction (the task fails).
# Issue 44: a handoff past the depth limit, a delegate that ended without an answer.
ISSUE_ENGINEERING = ["OUTCOME_UNKNOWN", "CLAIM_UNSUPPORTED", "HANDOFF_DEPTH_EXCEEDED", "HANDOFF_FAILED"]
# Issue 43: a spend budget of a key, agent or tenant is used up (FATAL: a task aborts).
ISSUE_FATAL = ["BUDGET_EXCEEDED"]
# Issue 44: a verifier rejected what an agent hands on (CONTRACT: the producer corrects it once).
ISSUE_CONTRACT = ["VERIFICATION_REJECTED"]
REPO_ROOT = Path(__file__).resolve().parents[2]
MAPPED = [c for c in ErrorCode if c is not ErrorCode.UNSPECIFIED]


def test_error_code_matches_proto_names_and_numbers() -> None:
    items = common_pb2.ErrorCode.items()
    assert all(name.startswith("ERROR_CODE_") for name, _ in items)
    proto = {name.removeprefix("ERROR_CODE_"): number for name, number in items}
    assert {c.name: c.value for c in ErrorCode} == proto


def test_error_class_matches_proto_names_and_numbers() -> None:
    proto = {name.removeprefix("ERROR_CLASS_"): number for name, number in common_pb2.ErrorClass.items()}
    assert {c.name: c.value for c in ErrorClass} == proto


@pytest.mark.parametrize("code", MAPPED, ids=lambda c: c.name)
def test_every_code_has_a_class_and_a_grpc_status(code: ErrorCode) -> None:
    assert error_class(code) in {ErrorClass.CONTRACT, ErrorClass.ENGINEERING, ErrorClass.FATAL}
    assert isinstance(GRPC_STATUS[code], grpc.StatusCode)
    assert GRPC_STATUS[code] is not grpc.StatusCode.OK


def test_unspecified_is_unmapped_everywhere() -> None:
    assert ErrorCode.UNSPECIFIED not in ERROR_CLASS
    assert ErrorCode.UNSPECIFIED not in GRPC_STATUS
    assert set(ERROR_CLASS) == set(GRPC_STATUS) == set(MAPPED)


def test_design_lists_cover_every_code_exactly_once() -> None:
    listed = (
        DESIGN_CONTRACT
        + ISSUE_CONTRACT
        + DESIGN_ENGINEERING
        + DESIGN_FATAL
        + RPC_ENGINEERING
        + ISSUE_ENGINEERING
        + ISSUE_FATAL
    )
    assert sorted(listed) == sorted(c.name for c in MAPPED)


@pytest.mark.parametrize(
    ("name", "expected"),
    [(n, ErrorClass.CONTRACT) for n in DESIGN_CONTRACT + ISSUE_CONTRACT]
    + [(n, ErrorClass.ENGINEERING) for n in DESIGN_ENGINEERING + RPC_ENGINEERING + ISSUE_ENGINEERING]
    + [(n, ErrorClass.FATAL) for n in DESIGN_FATAL + ISSUE_FATAL],
)
def test_class_of_each_code_is_as_designed(name: str, expected: ErrorClass) -> None:
    assert error_class(ErrorCode[name]) is expected
    assert AgentmeshError(ErrorCode[name], "x").error_class is expected


@pytest.mark.parametrize("code", [0, ErrorCode.UNSPECIFIED, 99, 999, -1])
def test_error_class_of_unmapped_code_is_a_clear_value_error(code: int) -> None:
    with pytest.raises(ValueError, match="has no error class"):
        error_class(code)


def test_unspecified_cannot_be_raised() -> None:
    with pytest.raises(ValueError):
        AgentmeshError(ErrorCode.UNSPECIFIED, "nothing")


def test_negative_retry_after_is_rejected() -> None:
    with pytest.raises(ValueError, match="retry_after"):
        AgentmeshError(ErrorCode.RATE_LIMITED, retry_after=-1)


@pytest.mark.parametrize(
    "code",
    [
        ErrorCode.UNAVAILABLE,
        ErrorCode.UPSTREAM_TIMEOUT,
        ErrorCode.UPSTREAM_UNAVAILABLE,
        ErrorCode.RATE_LIMITED,
        ErrorCode.OVERLOADED,
        ErrorCode.CIRCUIT_OPEN,
    ],
)
def test_transient_codes_are_retryable_by_default(code: ErrorCode) -> None:
    assert AgentmeshError(code).retryable
    assert not AgentmeshError(code, retryable=False).retryable


@pytest.mark.parametrize("code", [ErrorCode.SCHEMA_INVALID, ErrorCode.INTERNAL, ErrorCode.BUDGET_EXHAUSTED])
def test_other_codes_are_not_retryable_by_default(code: ErrorCode) -> None:
    assert not AgentmeshError(code).retryable
    assert AgentmeshError(code, retryable=True).retryable


def test_str_is_code_and_message() -> None:
    assert str(AgentmeshError(ErrorCode.SCHEMA_INVALID, "bad order_id")) == "SCHEMA_INVALID: bad order_id"
    assert str(AgentmeshError(ErrorCode.INTERNAL)) == "INTERNAL"


def test_fields_are_copied_not_aliased() -> None:
    metadata = {"k": "v"}
    violations = [Violation(path="$.a")]
    err = AgentmeshError(ErrorCode.SCHEMA_INVALID, violations=violations, metadata=metadata)
    metadata["k"] = "changed"
    violations.clear()
    assert err.metadata == {"k": "v"}
    assert err.violations == (Violation(path="$.a"),)


@pytest.mark.parametrize(
    ("cls", "code"),
    [
        (NotFoundError, ErrorCode.NOT_FOUND),
        (UnavailableError, ErrorCode.UNAVAILABLE),
        (UnauthenticatedError, ErrorCode.UNAUTHENTICATED),
        (PayloadTooLargeError, ErrorCode.PAYLOAD_TOO_LARGE),
        (OverloadedError, ErrorCode.OVERLOADED),
        (FailedPreconditionError, ErrorCode.FAILED_PRECONDITION),
    ],
)
def test_convenience_subclasses_fix_their_code(cls: Any, code: ErrorCode) -> None:
    err = cls("why", metadata={"a": "b"}, retry_after=2.0)
    assert isinstance(err, AgentmeshError)
    assert (err.code, err.message, err.metadata, err.retry_after) == (code, "why", {"a": "b"}, 2.0)


def test_invalid_request_error_adds_a_violation_for_the_field() -> None:
    extra = Violation(path="limit", rule="minimum")
    err = InvalidRequestError("session_id", "must be non-empty", violations=[extra])
    assert err.code is ErrorCode.INVALID_REQUEST
    assert err.field == "session_id"
    assert err.violations[0].path == "session_id"
    assert err.violations[0].hint == "must be non-empty"
    assert err.violations[1] == extra
    assert "session_id" in err.message


def test_permission_denied_error_names_the_missing_permission() -> None:
    err = PermissionDeniedError("prod/k8s/write")
    assert err.code is ErrorCode.PERMISSION_DENIED
    assert err.missing_permission == "prod/k8s/write"
    assert "prod/k8s/write" in err.message
    assert PermissionDeniedError(missing_permission="p", message="custom").message == "custom"


def _schema_error() -> AgentmeshError:
    return AgentmeshError(
        ErrorCode.SCHEMA_INVALID,
        "arguments of get_order violate its input schema",
        violations=[
            Violation(
                path="$.order_id",
                rule="pattern",
                expected=r"^ORD-\d{4}-\d{4}$",
                actual='"ord-2025-12"',
                hint="order_id must match ^ORD-\\d{4}-\\d{4}$ (e.g. ORD-2025-0001)",
            )
        ],
        fallback_tool="search_orders",
        metadata={"closest_tools": "get_order_v2"},
    )


def test_model_text_has_every_structured_field() -> None:
    text = model_text(_schema_error())
    assert text.splitlines()[0] == ("error SCHEMA_INVALID (CONTRACT): arguments of get_order violate its input schema")
    assert "$.order_id" in text
    assert "rule pattern" in text
    assert r"expected ^ORD-\d{4}-\d{4}$" in text
    assert 'got "ord-2025-12"' in text
    assert "hint: order_id must match" in text
    assert "fallback_tool: search_orders" in text
    assert "closest_tools: get_order_v2" in text
    assert "retryable" not in text


def test_model_text_states_retry_and_permission() -> None:
    text = model_text(AgentmeshError(ErrorCode.RATE_LIMITED, "slow down", retry_after=1.5, missing_permission="p"))
    assert "retryable: yes after 1.5s" in text
    assert "missing_permission: p" in text


def test_model_text_never_shows_a_traceback() -> None:
    try:
        try:
            raise KeyError("missing")  # a real chained exception, as a handler would see
        except KeyError as exc:
            raise _schema_error() from exc
    except AgentmeshError as err:
        text = model_text(err)
    assert "Traceback" not in text
    assert "File " not in text
    assert "KeyError" not in text


def test_model_text_clips_huge_values() -> None:
    err = AgentmeshError(ErrorCode.SCHEMA_INVALID, "m", violations=[Violation(path="$.x", actual="a" * 10_000)])
    assert len(model_text(err)) < 400


def test_detail_round_trip() -> None:
    err = _schema_error()
    err.retry_after = 0.25
    back = from_detail(to_detail(err))
    assert type(back) is AgentmeshError
    assert vars(back) == vars(err)
    assert to_detail(err).error_class == common_pb2.ERROR_CLASS_CONTRACT


def test_detail_without_retry_after_round_trips_as_none() -> None:
    assert from_detail(to_detail(AgentmeshError(ErrorCode.INTERNAL))).retry_after is None
    assert from_detail(to_detail(AgentmeshError(ErrorCode.INTERNAL, retry_after=0))).retry_after == 0


def test_detail_with_unknown_code_becomes_internal() -> None:
    detail = common_pb2.ErrorDetail(message="from the future")
    detail.code = 299  # type: ignore[assignment]
    err = from_detail(detail)
    assert err.code is ErrorCode.INTERNAL
    assert err.metadata["unknown_error_code"] == "299"


def test_huge_error_is_shrunk_to_fit_a_trailer() -> None:
    violations = [Violation(path=f"$.v{i}", actual="x" * 5000, hint="h" * 5000) for i in range(50)]
    err = AgentmeshError(
        ErrorCode.SCHEMA_INVALID, "m" * 20_000, violations=violations, fallback_tool="other", retry_after=3
    )
    status = to_rpc_status(err)
    assert status.ByteSize() <= 4096
    info_reasons = [d.type_url for d in status.details]
    assert any(u.endswith("google.rpc.ErrorInfo") for u in info_reasons)
    detail = common_pb2.ErrorDetail()
    assert status.details[-1].Unpack(detail)
    back = from_detail(detail)
    assert (back.code, back.fallback_tool, back.retry_after) == (ErrorCode.SCHEMA_INVALID, "other", 3)
    assert back.metadata["details_truncated"] == "true"
    assert back.metadata["violations_omitted"] == "47"


def test_errors_module_does_not_import_grpc_or_protobuf() -> None:
    code = (
        "import sys, agentmesh.errors; "
        "bad = sorted(m for m in sys.modules if m == 'grpc' or m.startswith(('grpc.', 'grpc_', "
        "'google.protobuf', 'google.rpc', 'agentmesh.v1'))); "
        "assert not bad, bad"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr


def test_replace_copies_every_field_but_the_ones_changed() -> None:
    err = AgentmeshError(
        ErrorCode.UPSTREAM_TIMEOUT,
        "slow",
        violations=[Violation("$.a", "type", "integer", '"x"', "a number")],
        retryable=False,
        retry_after=1.5,
        fallback_tool="cache",
        missing_permission="prod:x:read",
        metadata={"k": "v"},
    )
    changed = err.replace(fallback_tool="other")
    assert changed.fallback_tool == "other" and err.fallback_tool == "cache"
    for name in ("code", "message", "violations", "retryable", "retry_after", "missing_permission", "metadata"):
        assert getattr(changed, name) == getattr(err, name), name
    assert changed.metadata is not err.metadata  # a copy: changing one never changes the other
    with pytest.raises(TypeError, match="no fields"):
        err.replace(colour="red")


def test_echo_keeps_a_short_prefix_of_a_callers_value() -> None:
    assert echo("ops") == "ops"
    assert echo("x" * 64) == "x" * 64
    clipped = echo("x" * 10_000)
    assert clipped.endswith("…") and len(clipped) == 64 and clipped.startswith("xxx")
    # Wide characters: fewer of them, at most 2 * 64 UTF-8 bytes.
    wide = echo("🙂" * 10_000)
    assert wide.startswith("🙂🙂🙂") and wide.endswith("…")
    assert len(wide.encode()) <= 128
    assert echo(12345) == "12345"
    assert len(echo("y" * 500, 10)) == 10


def test_huge_non_ascii_error_is_shrunk_far_below_a_trailer() -> None:
    """Byte limits, not character ones: an emoji is four bytes, and grpc-message repeats the message."""
    err = AgentmeshError(
        ErrorCode.NOT_FOUND,
        "🙂" * 10_000,
        violations=[Violation(path="agent_id", actual="🙂" * 10_000, hint="é" * 10_000)],
        metadata={"k": "🙂" * 10_000},
    )
    status = to_rpc_status(err)
    assert status.ByteSize() <= 2048
    assert len(status.message.encode()) <= 256 and status.message.endswith("…")
    detail = common_pb2.ErrorDetail()
    assert status.details[-1].Unpack(detail)
    assert all(len(v.actual.encode()) <= 80 for v in detail.violations)
