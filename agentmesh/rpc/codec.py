"""The protobuf mappings several services share: Role, ToolCall, usage, Timestamp, Duration, PayloadRef.

Each exists only here; a service's `server.py` maps its own messages and calls these for the shared
ones (errors and ErrorDetail are `agentmesh.rpc.status`'s). Decoders validate what
protobuf cannot (an enum value we do not know, a Timestamp outside 0001-9999, a negative Duration)
and raise InvalidRequestError naming the field, so a bad value is INVALID_ARGUMENT at the edge
rather than a failure deep in a service.
"""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import duration_pb2, timestamp_pb2

from agentmesh.chat import (
    DEFAULT_MAX_JSON_DEPTH,
    Correction,
    NextStep,
    Role,
    ToolCall,
    Usage,
    json_depth_exceeds,
    lone_surrogate_path,
)
from agentmesh.errors import ErrorCode, InvalidRequestError
from agentmesh.payloads import StoredPayload
from agentmesh.v1 import common_pb2

__all__ = [
    "correction_from_pb",
    "correction_to_pb",
    "duration",
    "duration_seconds",
    "json_value",
    "millis",
    "payload_ref_from_pb",
    "payload_ref_to_pb",
    "role_from_pb",
    "role_to_pb",
    "seconds",
    "timestamp",
    "timestamp_ms",
    "tool_call_from_pb",
    "tool_call_to_pb",
    "usage_from_pb",
    "usage_to_pb",
]

_ROLE_TO_PB = {
    Role.SYSTEM: common_pb2.ROLE_SYSTEM,
    Role.USER: common_pb2.ROLE_USER,
    Role.ASSISTANT: common_pb2.ROLE_ASSISTANT,
    Role.TOOL: common_pb2.ROLE_TOOL,
}
_ROLE_FROM_PB = {pb: role for role, pb in _ROLE_TO_PB.items()}

# google.protobuf.Timestamp's documented range: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z.
_MIN_SECONDS = -62_135_596_800
_MAX_SECONDS = 253_402_300_799
# google.protobuf.Duration's documented range: about +-10,000 years.
_MAX_DURATION_SECONDS = 315_576_000_000


# --- Role, ToolCall, usage ---------------------------------------------------------------------------


def role_to_pb(role: Role) -> common_pb2.Role:
    return _ROLE_TO_PB[role]


def role_from_pb(value: int, field: str) -> Role:
    """The Role of a message's `role` field; ROLE_UNSPECIFIED or an unknown number is INVALID_ARGUMENT."""
    role: Role | None = _ROLE_FROM_PB.get(value)  # type: ignore[call-overload]
    if role is None:
        raise InvalidRequestError(field, "must be ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT or ROLE_TOOL")
    return role


def tool_call_to_pb(call: ToolCall) -> common_pb2.ToolCall:
    return common_pb2.ToolCall(id=call.id, name=call.name, arguments_json=call.arguments_json)


def tool_call_from_pb(pb: common_pb2.ToolCall) -> ToolCall:
    return ToolCall(id=pb.id, name=pb.name, arguments_json=pb.arguments_json)


def usage_to_pb(usage: Usage) -> common_pb2.TokenUsage:
    return common_pb2.TokenUsage(
        input_tokens=usage.input_tokens, output_tokens=usage.output_tokens, total_tokens=usage.total_tokens
    )


def usage_from_pb(pb: common_pb2.TokenUsage) -> Usage:
    return Usage(input_tokens=pb.input_tokens, output_tokens=pb.output_tokens)


# --- the dispatcher's correction of a failed call ---------------------------------------------------


def correction_to_pb(correction: Correction) -> common_pb2.Correction:
    return common_pb2.Correction(
        next_step=int(correction.next_step),  # type: ignore[arg-type]
        attempt=correction.attempt,
        max_attempts=correction.max_attempts,
        fallback_tool=correction.fallback_tool,
        failed_with=int(correction.failed_with) if correction.failed_with is not None else 0,  # type: ignore[arg-type]
    )


def correction_from_pb(pb: common_pb2.Correction, field: str) -> Correction | None:
    """The Correction of a message or result; None when unset; an unknown enum is INVALID_ARGUMENT."""
    if pb.next_step == common_pb2.NEXT_STEP_UNSPECIFIED:
        return None
    try:
        next_step = NextStep(pb.next_step)
        failed_with = ErrorCode(pb.failed_with) if pb.failed_with else None
    except ValueError:
        raise InvalidRequestError(field, "has an unknown next_step or failed_with") from None
    if pb.attempt < 0 or pb.max_attempts < 0:
        raise InvalidRequestError(field, "attempt and max_attempts must not be negative")
    return Correction(
        next_step=next_step,
        attempt=pb.attempt,
        max_attempts=pb.max_attempts,
        fallback_tool=pb.fallback_tool,
        failed_with=failed_with,
    )


# --- Timestamp and Duration ------------------------------------------------------------------------


def timestamp(unix_s: float) -> timestamp_pb2.Timestamp:
    """A Timestamp of Unix seconds (nanosecond precision)."""
    value = timestamp_pb2.Timestamp()
    value.FromNanoseconds(round(unix_s * 1e9))
    return value


def timestamp_ms(unix_ms: int) -> timestamp_pb2.Timestamp:
    """A Timestamp of Unix milliseconds."""
    value = timestamp_pb2.Timestamp()
    value.FromMilliseconds(unix_ms)
    return value


def _checked(stamp: timestamp_pb2.Timestamp, field: str) -> timestamp_pb2.Timestamp:
    if not _MIN_SECONDS <= stamp.seconds <= _MAX_SECONDS or not 0 <= stamp.nanos <= 999_999_999:
        raise InvalidRequestError(field, "is outside the Timestamp range 0001-01-01 to 9999-12-31")
    return stamp


def seconds(stamp: timestamp_pb2.Timestamp, field: str) -> float:
    """Unix seconds of a Timestamp; out of range is INVALID_ARGUMENT naming `field`."""
    return float(_checked(stamp, field).ToNanoseconds()) / 1e9


def millis(stamp: timestamp_pb2.Timestamp, field: str) -> int:
    """Unix milliseconds of a Timestamp; out of range is INVALID_ARGUMENT naming `field`."""
    return int(_checked(stamp, field).ToMilliseconds())


def duration(value_s: float) -> duration_pb2.Duration:
    """A Duration of seconds (nanosecond precision)."""
    value = duration_pb2.Duration()
    value.FromNanoseconds(round(value_s * 1e9))
    return value


def duration_seconds(value: duration_pb2.Duration, field: str, *, allow_negative: bool = False) -> float:
    """Seconds of a Duration; out of range (or negative, unless allowed) is INVALID_ARGUMENT."""
    if abs(value.seconds) > _MAX_DURATION_SECONDS or abs(value.nanos) > 999_999_999:
        raise InvalidRequestError(field, "is outside the Duration range")
    result = float(value.ToNanoseconds()) / 1e9
    if result < 0 and not allow_negative:
        raise InvalidRequestError(field, f"must not be negative, got {result}s")
    return result


# --- JSON text in a request field ----------------------------------------------------------------


def _not_a_number(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def json_value(text: str, field: str, *, max_depth: int = DEFAULT_MAX_JSON_DEPTH) -> Any:
    """The value of a request's JSON text, checked before and after parsing; INVALID_ARGUMENT naming
    `field` when it nests deeper than `max_depth` (`server.max_json_depth`, found by a bracket scan
    before the parser runs), is not JSON (NaN and Infinity included), or holds a lone surrogate escape
    ("\\ud800": not valid Unicode, so no reply could carry it back)."""
    if json_depth_exceeds(text, max_depth):
        raise InvalidRequestError(field, f"nests arrays/objects deeper than {max_depth} levels (server.max_json_depth)")
    try:
        value = json.loads(text, parse_constant=_not_a_number)
    except (ValueError, RecursionError) as exc:
        raise InvalidRequestError(field, f"is not JSON: {str(exc)[:200]}") from None
    where = lone_surrogate_path(text, value)
    if where is not None:
        raise InvalidRequestError(
            field, f"must be valid Unicode: a lone surrogate escape (e.g. \\ud800) at {where[:120]}"
        )
    return value


# --- payload references ------------------------------------------------------------------------------


def payload_ref_to_pb(ref: StoredPayload) -> common_pb2.PayloadRef:
    return common_pb2.PayloadRef(
        ref_id=ref.ref_id,
        session_id=ref.session_id,
        size_bytes=ref.size_bytes,
        media_type=ref.media_type,
        sha256=ref.sha256,
        expire_time=timestamp(ref.expire_at),
    )


def payload_ref_from_pb(ref: common_pb2.PayloadRef, field: str) -> StoredPayload:
    return StoredPayload(
        ref_id=ref.ref_id,
        session_id=ref.session_id,
        size_bytes=ref.size_bytes,
        media_type=ref.media_type,
        sha256=ref.sha256,
        expire_at=seconds(ref.expire_time, f"{field}.expire_time") if ref.HasField("expire_time") else 0.0,
    )
