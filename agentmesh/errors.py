"""The agentmesh error vocabulary as plain Python (docs/design.md §3).

Domain code raises and inspects these errors; it never touches grpc or protobuf, so this module
must not import either. The gRPC mapping lives in ``agentmesh.rpc.status``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, TypedDict, Unpack

__all__ = [
    "ECHO_CHARS",
    "ECHO_MARK",
    "ERROR_CLASS",
    "AgentmeshError",
    "ErrorClass",
    "ErrorCode",
    "ErrorOptions",
    "FailedPreconditionError",
    "InvalidRequestError",
    "NotFoundError",
    "OverloadedError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "UnauthenticatedError",
    "UnavailableError",
    "Violation",
    "default_retryable",
    "echo",
    "error_class",
    "error_from_json",
    "error_to_json",
    "model_text",
]


class ErrorCode(enum.IntEnum):
    """Mirror of ``agentmesh.v1.ErrorCode`` without the ``ERROR_CODE_`` prefix; same numbers."""

    UNSPECIFIED = 0
    # CONTRACT (1-99)
    SCHEMA_INVALID = 1
    ARGUMENTS_NOT_JSON = 2
    UNKNOWN_TOOL = 3
    IDEMPOTENCY_CONFLICT = 4
    VERIFICATION_REJECTED = 5
    # ENGINEERING (100-199)
    UPSTREAM_NOT_FOUND = 100
    UPSTREAM_TIMEOUT = 101
    UPSTREAM_UNAVAILABLE = 102
    UPSTREAM_REJECTED = 103
    RATE_LIMITED = 104
    CIRCUIT_OPEN = 105
    PERMISSION_DENIED = 106
    APPROVAL_DENIED = 107
    APPROVAL_EXPIRED = 108
    OUTPUT_INVALID = 109
    SANDBOX_UNAVAILABLE = 110
    PROVIDER_AUTH_FAILED = 111
    CONTEXT_LENGTH_EXCEEDED = 112
    CONTENT_FILTERED = 113
    INVALID_REQUEST = 114
    INTERNAL = 115
    NOT_FOUND = 116
    UNAVAILABLE = 117
    UNAUTHENTICATED = 118
    PAYLOAD_TOO_LARGE = 119
    OVERLOADED = 120
    CANCELLED = 121
    DEADLINE_EXCEEDED = 122
    FAILED_PRECONDITION = 123
    OUTCOME_UNKNOWN = 124
    CLAIM_UNSUPPORTED = 125
    HANDOFF_DEPTH_EXCEEDED = 126
    HANDOFF_FAILED = 127
    # FATAL (200-299)
    DANGEROUS_OPERATION = 200
    BUDGET_EXHAUSTED = 201
    MAX_STEPS_EXCEEDED = 202
    LOOP_DETECTED = 203
    SANDBOX_VIOLATION = 204
    BUDGET_EXCEEDED = 205


class ErrorClass(enum.IntEnum):
    """Who must act on an error; mirror of ``agentmesh.v1.ErrorClass``."""

    UNSPECIFIED = 0
    CONTRACT = 1
    ENGINEERING = 2
    FATAL = 3


def _table() -> dict[ErrorCode, ErrorClass]:
    c, e, f = ErrorClass.CONTRACT, ErrorClass.ENGINEERING, ErrorClass.FATAL
    return {
        ErrorCode.SCHEMA_INVALID: c,
        ErrorCode.ARGUMENTS_NOT_JSON: c,
        ErrorCode.UNKNOWN_TOOL: c,
        ErrorCode.IDEMPOTENCY_CONFLICT: c,
        ErrorCode.VERIFICATION_REJECTED: c,
        ErrorCode.UPSTREAM_NOT_FOUND: e,
        ErrorCode.UPSTREAM_TIMEOUT: e,
        ErrorCode.UPSTREAM_UNAVAILABLE: e,
        ErrorCode.UPSTREAM_REJECTED: e,
        ErrorCode.RATE_LIMITED: e,
        ErrorCode.CIRCUIT_OPEN: e,
        ErrorCode.PERMISSION_DENIED: e,
        ErrorCode.APPROVAL_DENIED: e,
        ErrorCode.APPROVAL_EXPIRED: e,
        ErrorCode.OUTPUT_INVALID: e,
        ErrorCode.SANDBOX_UNAVAILABLE: e,
        ErrorCode.PROVIDER_AUTH_FAILED: e,
        ErrorCode.CONTEXT_LENGTH_EXCEEDED: e,
        ErrorCode.CONTENT_FILTERED: e,
        ErrorCode.INVALID_REQUEST: e,
        ErrorCode.INTERNAL: e,
        # Faults of the RPC itself (not in DESIGN's table): the model cannot fix them.
        ErrorCode.NOT_FOUND: e,
        ErrorCode.UNAVAILABLE: e,
        ErrorCode.UNAUTHENTICATED: e,
        ErrorCode.PAYLOAD_TOO_LARGE: e,
        ErrorCode.OVERLOADED: e,
        ErrorCode.CANCELLED: e,
        ErrorCode.DEADLINE_EXCEEDED: e,
        ErrorCode.FAILED_PRECONDITION: e,
        ErrorCode.OUTCOME_UNKNOWN: e,
        ErrorCode.CLAIM_UNSUPPORTED: e,
        ErrorCode.HANDOFF_DEPTH_EXCEEDED: e,
        ErrorCode.HANDOFF_FAILED: e,
        ErrorCode.DANGEROUS_OPERATION: f,
        ErrorCode.BUDGET_EXHAUSTED: f,
        ErrorCode.MAX_STEPS_EXCEEDED: f,
        ErrorCode.LOOP_DETECTED: f,
        ErrorCode.SANDBOX_VIOLATION: f,
        ErrorCode.BUDGET_EXCEEDED: f,
    }


# The one table deriving a code's class (docs/design.md §3); read-only so nobody patches it at runtime.
ERROR_CLASS: Mapping[ErrorCode, ErrorClass] = MappingProxyType(_table())

# Codes where the same request may succeed later unchanged.
_RETRYABLE: frozenset[ErrorCode] = frozenset(
    {
        ErrorCode.UNAVAILABLE,
        ErrorCode.UPSTREAM_TIMEOUT,
        ErrorCode.UPSTREAM_UNAVAILABLE,
        ErrorCode.RATE_LIMITED,
        ErrorCode.OVERLOADED,
        ErrorCode.CIRCUIT_OPEN,
    }
)


def error_class(code: ErrorCode | int) -> ErrorClass:
    """The class of ``code``; ValueError for UNSPECIFIED or a number this build does not know."""
    try:
        return ERROR_CLASS[ErrorCode(code)]
    except (KeyError, ValueError):
        raise ValueError(f"error code {code!r} has no error class") from None


def default_retryable(code: ErrorCode | int) -> bool:
    """Whether ``code`` is transient by default (the raiser may override per error)."""
    return code in _RETRYABLE


@dataclass(frozen=True, slots=True)
class Violation:
    """One violated rule, located by a JSON path (or a request field name)."""

    path: str = ""
    rule: str = ""
    expected: str = ""
    actual: str = ""
    hint: str = ""


class _BaseOptions(TypedDict, total=False):
    violations: Iterable[Violation]
    retryable: bool | None
    retry_after: float | None
    fallback_tool: str
    metadata: Mapping[str, str] | None


class ErrorOptions(_BaseOptions, total=False):
    """Optional fields of an AgentmeshError, shared by the convenience subclasses."""

    missing_permission: str


class AgentmeshError(Exception):
    """A typed agentmesh failure; converts to ``agentmesh.v1.ErrorDetail`` and a gRPC status.

    Catch this (not the subclasses) and switch on ``code``: errors decoded from the wire are
    always plain AgentmeshError.
    """

    def __init__(
        self,
        code: ErrorCode | int,
        message: str = "",
        *,
        violations: Iterable[Violation] = (),
        retryable: bool | None = None,
        retry_after: float | None = None,
        fallback_tool: str = "",
        missing_permission: str = "",
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        code = ErrorCode(code)
        # Fail at the raise site rather than later when the class is looked up.
        error_class(code)
        if retry_after is not None and retry_after < 0:
            raise ValueError(f"retry_after must be >= 0, got {retry_after}")
        super().__init__(code, message)
        self.code: ErrorCode = code
        self.message: str = message
        self.violations: tuple[Violation, ...] = tuple(violations)
        self.retryable: bool = default_retryable(code) if retryable is None else retryable
        self.retry_after: float | None = retry_after
        self.fallback_tool: str = fallback_tool
        self.missing_permission: str = missing_permission
        self.metadata: dict[str, str] = dict(metadata or {})

    @property
    def error_class(self) -> ErrorClass:
        return ERROR_CLASS[self.code]

    def replace(self, **changes: Any) -> AgentmeshError:
        """A plain AgentmeshError with these fields changed and the others copied (as
        ``dataclasses.replace``): ``err.replace(fallback_tool="orders_cache")``."""
        fields: dict[str, Any] = {
            "code": self.code,
            "message": self.message,
            "violations": self.violations,
            "retryable": self.retryable,
            "retry_after": self.retry_after,
            "fallback_tool": self.fallback_tool,
            "missing_permission": self.missing_permission,
            "metadata": self.metadata,
        }
        unknown = set(changes) - set(fields)
        if unknown:
            raise TypeError(f"AgentmeshError has no fields {sorted(unknown)}")
        fields.update(changes)
        code = fields.pop("code")
        message = fields.pop("message")
        return AgentmeshError(code, message, **fields)

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}" if self.message else self.code.name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code.name}, {self.message!r})"


class _FixedCodeError(AgentmeshError):
    CODE: ClassVar[ErrorCode]

    def __init__(self, message: str = "", **options: Unpack[ErrorOptions]) -> None:
        super().__init__(self.CODE, message, **options)


class NotFoundError(_FixedCodeError):
    CODE = ErrorCode.NOT_FOUND


class UnavailableError(_FixedCodeError):
    CODE = ErrorCode.UNAVAILABLE


class UnauthenticatedError(_FixedCodeError):
    CODE = ErrorCode.UNAUTHENTICATED


class PayloadTooLargeError(_FixedCodeError):
    CODE = ErrorCode.PAYLOAD_TOO_LARGE


class OverloadedError(_FixedCodeError):
    CODE = ErrorCode.OVERLOADED


class FailedPreconditionError(_FixedCodeError):
    CODE = ErrorCode.FAILED_PRECONDITION


class InvalidRequestError(AgentmeshError):
    """A malformed request to an agentmesh service; ``field`` becomes a Violation path."""

    def __init__(self, field: str, reason: str, **options: Unpack[ErrorOptions]) -> None:
        super().__init__(ErrorCode.INVALID_REQUEST, f"{field}: {reason}", **options)
        self.violations = (Violation(path=field, rule="invalid", hint=reason), *self.violations)
        self.field = field


class PermissionDeniedError(AgentmeshError):
    """The caller's identity lacks ``missing_permission``."""

    def __init__(self, missing_permission: str, message: str = "", **options: Unpack[_BaseOptions]) -> None:
        super().__init__(
            ErrorCode.PERMISSION_DENIED,
            message or f"missing permission {missing_permission}",
            missing_permission=missing_permission,
            **options,
        )


# Model-produced values can be huge; the model only needs enough to recognise its mistake.
_MAX_VALUE_CHARS = 200

# What an error may echo of a caller's value: enough to recognise it, never enough to bloat the
# status trailer (a value is echoed up to four times: message and violation, twice each).
ECHO_CHARS = 64
ECHO_MARK = "…"


def echo(value: object, limit: int = ECHO_CHARS) -> str:
    """A short prefix of a caller's value for an error message or violation: at most `limit`
    characters and 2 * `limit` UTF-8 bytes (fewer characters when they are wide), marked "…" when
    clipped. Every message or violation built from request values echoes them through this.
    """
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit and len(text.encode("utf-8", "surrogatepass")) <= 2 * limit:
        return text
    budget = 2 * limit - len(ECHO_MARK.encode())
    kept: list[str] = []
    for char in text[: limit - 1]:
        budget -= len(char.encode("utf-8", "surrogatepass"))
        if budget < 0:
            break
        kept.append(char)
    return "".join(kept) + ECHO_MARK


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_VALUE_CHARS else text[: _MAX_VALUE_CHARS - 3] + "..."


def model_text(err: AgentmeshError) -> str:
    """The short structured text a model is shown for ``err``: fields only, never a traceback."""
    lines = [f"error {err.code.name} ({err.error_class.name}): {_clip(err.message)}"]
    for v in err.violations:
        parts = [v.path or "$"]
        if v.rule:
            parts.append(f"rule {v.rule}")
        if v.expected:
            parts.append(f"expected {_clip(v.expected)}")
        if v.actual:
            parts.append(f"got {_clip(v.actual)}")
        if v.hint:
            parts.append(f"hint: {_clip(v.hint)}")
        lines.append("- " + "; ".join(parts))
    if err.missing_permission:
        lines.append(f"missing_permission: {err.missing_permission}")
    # Only stated when true: "retryable: no" would read as "do not fix and call again" to a model.
    if err.retryable:
        after = f" after {err.retry_after:g}s" if err.retry_after is not None else ""
        lines.append(f"retryable: yes{after}")
    if err.fallback_tool:
        lines.append(f"fallback_tool: {err.fallback_tool}")
    lines.extend(f"{key}: {_clip(value)}" for key, value in sorted(err.metadata.items()))
    return "\n".join(lines)


def error_to_json(err: AgentmeshError) -> dict[str, Any]:
    """The compact JSON form stored in Redis (task checkpoints and events, session logs); falsy fields omitted."""
    data: dict[str, Any] = {"code": err.code.name, "message": err.message}
    if err.violations:
        data["violations"] = [[v.path, v.rule, v.expected, v.actual, v.hint] for v in err.violations]
    if err.retryable:
        data["retryable"] = True
    if err.retry_after is not None:
        data["retry_after"] = err.retry_after
    if err.fallback_tool:
        data["fallback_tool"] = err.fallback_tool
    if err.missing_permission:
        data["missing_permission"] = err.missing_permission
    if err.metadata:
        data["metadata"] = err.metadata
    return data


def error_from_json(data: Mapping[str, Any]) -> AgentmeshError:
    """An error from `error_to_json`; an unknown or unset code reads as INTERNAL."""
    code = ErrorCode.__members__.get(str(data.get("code")), ErrorCode.INTERNAL)
    if code == ErrorCode.UNSPECIFIED:
        code = ErrorCode.INTERNAL
    error_class(code)
    return AgentmeshError(
        code,
        str(data.get("message", "")),
        violations=[Violation(*v) for v in data.get("violations", [])],
        retryable=bool(data.get("retryable", False)),
        retry_after=data.get("retry_after"),
        fallback_tool=str(data.get("fallback_tool", "")),
        missing_permission=str(data.get("missing_permission", "")),
        metadata=data.get("metadata") or {},
    )
