"""The gRPC side of the error vocabulary: AgentmeshError <-> rich gRPC status and ErrorDetail.

A fault of the RPC itself travels as a gRPC status whose ``grpc-status-details-bin`` trailer holds a
``google.rpc.Status`` with the standard details any language can read (ErrorInfo with our code as
reason, RetryInfo, BadRequest) plus our own ``agentmesh.v1.ErrorDetail`` for Python clients.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NoReturn

import grpc
import grpc.aio
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError

# googleapis-common-protos ships .pyi files but no py.typed marker, so mypy will not read them.
from google.rpc import error_details_pb2, status_pb2  # type: ignore[import-untyped]
from grpc_status import rpc_status

from agentmesh import callctx
from agentmesh.errors import (
    ECHO_MARK,
    AgentmeshError,
    ErrorCode,
    Violation,
    default_retryable,
    error_class,
)
from agentmesh.rpc import codec
from agentmesh.v1 import common_pb2

__all__ = [
    "DOMAIN",
    "GRPC_STATUS",
    "RichDetails",
    "abort",
    "checked_from_detail",
    "code_for_grpc_status",
    "error_of_status",
    "from_detail",
    "from_rpc_error",
    "rich_details",
    "send_request_id",
    "to_detail",
    "to_rpc_status",
    "to_status",
]

# ErrorInfo.domain of every agentmesh error.
DOMAIN = "agentmesh.v1"
_DETAILS_KEY = "grpc-status-details-bin"
# ErrorInfo.metadata keys we own; err.metadata cannot override them.
_META_CLASS, _META_FALLBACK, _META_PERMISSION = "error_class", "fallback_tool", "missing_permission"

_S = grpc.StatusCode
# Status used when a code is raised as an RPC fault. Choices beyond docs/design.md §3:
# - PAYLOAD_TOO_LARGE -> RESOURCE_EXHAUSTED: what gRPC itself returns for an oversized message.
# - FATAL codes -> FAILED_PRECONDITION, not ABORTED: gRPC clients and retry policies treat ABORTED
#   as "retry at a higher level", while a FATAL stop must wait for a human.
# - BUDGET_EXCEEDED -> RESOURCE_EXHAUSTED (FATAL all the same): a spend quota of the caller is used up,
#   AIP-193's quota status; unlike RATE_LIMITED it has no RetryInfo (the period's end is in `resets_at`).
# - IDEMPOTENCY_CONFLICT -> ALREADY_EXISTS: the key is taken by a different request.
# - UPSTREAM_REJECTED -> INVALID_ARGUMENT: provider_svc maps an upstream 400 there (docs/design.md §3).
# - CIRCUIT_OPEN / SANDBOX_UNAVAILABLE -> UNAVAILABLE: transient, the same call may succeed later.
GRPC_STATUS: Mapping[ErrorCode, grpc.StatusCode] = MappingProxyType(
    {
        ErrorCode.SCHEMA_INVALID: _S.INVALID_ARGUMENT,
        ErrorCode.ARGUMENTS_NOT_JSON: _S.INVALID_ARGUMENT,
        ErrorCode.UNKNOWN_TOOL: _S.NOT_FOUND,
        ErrorCode.IDEMPOTENCY_CONFLICT: _S.ALREADY_EXISTS,
        ErrorCode.VERIFICATION_REJECTED: _S.FAILED_PRECONDITION,
        ErrorCode.UPSTREAM_NOT_FOUND: _S.NOT_FOUND,
        ErrorCode.UPSTREAM_TIMEOUT: _S.DEADLINE_EXCEEDED,
        ErrorCode.UPSTREAM_UNAVAILABLE: _S.UNAVAILABLE,
        ErrorCode.UPSTREAM_REJECTED: _S.INVALID_ARGUMENT,
        ErrorCode.RATE_LIMITED: _S.RESOURCE_EXHAUSTED,
        ErrorCode.CIRCUIT_OPEN: _S.UNAVAILABLE,
        ErrorCode.PERMISSION_DENIED: _S.PERMISSION_DENIED,
        ErrorCode.APPROVAL_DENIED: _S.PERMISSION_DENIED,
        ErrorCode.APPROVAL_EXPIRED: _S.FAILED_PRECONDITION,
        ErrorCode.OUTPUT_INVALID: _S.INTERNAL,
        ErrorCode.SANDBOX_UNAVAILABLE: _S.UNAVAILABLE,
        ErrorCode.PROVIDER_AUTH_FAILED: _S.FAILED_PRECONDITION,
        ErrorCode.CONTEXT_LENGTH_EXCEEDED: _S.INVALID_ARGUMENT,
        ErrorCode.CONTENT_FILTERED: _S.INVALID_ARGUMENT,
        ErrorCode.INVALID_REQUEST: _S.INVALID_ARGUMENT,
        ErrorCode.INTERNAL: _S.INTERNAL,
        ErrorCode.NOT_FOUND: _S.NOT_FOUND,
        ErrorCode.UNAVAILABLE: _S.UNAVAILABLE,
        ErrorCode.UNAUTHENTICATED: _S.UNAUTHENTICATED,
        ErrorCode.PAYLOAD_TOO_LARGE: _S.RESOURCE_EXHAUSTED,
        ErrorCode.OVERLOADED: _S.RESOURCE_EXHAUSTED,
        ErrorCode.CANCELLED: _S.CANCELLED,
        ErrorCode.DEADLINE_EXCEEDED: _S.DEADLINE_EXCEEDED,
        ErrorCode.FAILED_PRECONDITION: _S.FAILED_PRECONDITION,
        ErrorCode.OUTCOME_UNKNOWN: _S.FAILED_PRECONDITION,
        ErrorCode.CLAIM_UNSUPPORTED: _S.FAILED_PRECONDITION,
        ErrorCode.HANDOFF_DEPTH_EXCEEDED: _S.FAILED_PRECONDITION,
        ErrorCode.HANDOFF_FAILED: _S.FAILED_PRECONDITION,
        ErrorCode.DANGEROUS_OPERATION: _S.FAILED_PRECONDITION,
        ErrorCode.BUDGET_EXHAUSTED: _S.FAILED_PRECONDITION,
        ErrorCode.MAX_STEPS_EXCEEDED: _S.FAILED_PRECONDITION,
        ErrorCode.LOOP_DETECTED: _S.FAILED_PRECONDITION,
        ErrorCode.SANDBOX_VIOLATION: _S.FAILED_PRECONDITION,
        ErrorCode.BUDGET_EXCEEDED: _S.RESOURCE_EXHAUSTED,
    }
)

# Closest code for a status that carries no agentmesh details (gRPC-generated, or a foreign peer).
_BARE: Mapping[grpc.StatusCode, ErrorCode] = MappingProxyType(
    {
        _S.CANCELLED: ErrorCode.CANCELLED,
        _S.INVALID_ARGUMENT: ErrorCode.INVALID_REQUEST,
        _S.OUT_OF_RANGE: ErrorCode.INVALID_REQUEST,
        _S.DEADLINE_EXCEEDED: ErrorCode.DEADLINE_EXCEEDED,
        _S.NOT_FOUND: ErrorCode.NOT_FOUND,
        # Only agentmesh's own ALREADY_EXISTS means an idempotency conflict (and it has details).
        _S.ALREADY_EXISTS: ErrorCode.FAILED_PRECONDITION,
        _S.PERMISSION_DENIED: ErrorCode.PERMISSION_DENIED,
        _S.RESOURCE_EXHAUSTED: ErrorCode.OVERLOADED,
        _S.FAILED_PRECONDITION: ErrorCode.FAILED_PRECONDITION,
        _S.ABORTED: ErrorCode.FAILED_PRECONDITION,
        _S.UNAVAILABLE: ErrorCode.UNAVAILABLE,
        _S.UNAUTHENTICATED: ErrorCode.UNAUTHENTICATED,
    }
)

# gRPC clients may refuse trailers above 8 KiB and always refuse them above 16 KiB (measured with
# grpcio 1.85), and a refused trailer turns our error into an opaque RESOURCE_EXHAUSTED. The trailer
# carries the Status base64-encoded (4/3) and its message again in grpc-message, percent-encoded
# (up to 3x for non-ASCII text); the message and violations are in the Status twice (ErrorDetail and
# Status.message / BadRequest). So the Status stays at 2 KiB and a shrunk one far below: limits are
# UTF-8 bytes, not characters, since an emoji is four of them.
_MAX_STATUS_BYTES = 2048
_SHRUNK_VIOLATIONS = 3
_SHRUNK_FIELD_BYTES = 80
_SHRUNK_MESSAGE_BYTES = 256
_SHRUNK_METADATA_KEYS = 8


def code_for_grpc_status(status: grpc.StatusCode, details: str = "") -> ErrorCode:
    """The closest ErrorCode for a bare gRPC status (no agentmesh details attached)."""
    # gRPC's own message-size check reports RESOURCE_EXHAUSTED "... message larger than max ...".
    if status == _S.RESOURCE_EXHAUSTED and "larger than max" in details:
        return ErrorCode.PAYLOAD_TOO_LARGE
    return _BARE.get(status, ErrorCode.INTERNAL)


# By name, not number: the generated constructor accepts enum names, and a name missing from the
# proto fails loudly instead of sending a number the peer cannot read.
def _pb_code(code: ErrorCode) -> str:
    return f"ERROR_CODE_{code.name}"


def _pb_class(code: ErrorCode) -> str:
    return f"ERROR_CLASS_{error_class(code).name}"


def to_detail(err: AgentmeshError) -> common_pb2.ErrorDetail:
    """``err`` as the typed ``agentmesh.v1.ErrorDetail`` (in-band errors and rich statuses)."""
    detail = common_pb2.ErrorDetail(
        code=_pb_code(err.code),
        error_class=_pb_class(err.code),
        message=err.message,
        violations=[
            common_pb2.FieldViolation(path=v.path, rule=v.rule, expected=v.expected, actual=v.actual, hint=v.hint)
            for v in err.violations
        ],
        retryable=err.retryable,
        fallback_tool=err.fallback_tool,
        missing_permission=err.missing_permission,
        metadata=err.metadata,
    )
    if err.retry_after is not None:
        detail.retry_after.CopyFrom(codec.duration(err.retry_after))
    return detail


def from_detail(detail: common_pb2.ErrorDetail) -> AgentmeshError:
    """The AgentmeshError carried by ``detail``; its class is re-derived from the code.

    A code this build does not know (a newer peer) or UNSPECIFIED becomes INTERNAL, with the
    original number kept in ``metadata["unknown_error_code"]``.
    """
    metadata = dict(detail.metadata)
    number = int(detail.code)
    try:
        code = ErrorCode(number)
        error_class(code)
    except ValueError:
        code = ErrorCode.INTERNAL
        metadata["unknown_error_code"] = str(number)
    return AgentmeshError(
        code,
        detail.message,
        violations=[
            Violation(path=v.path, rule=v.rule, expected=v.expected, actual=v.actual, hint=v.hint)
            for v in detail.violations
        ],
        retryable=detail.retryable,
        retry_after=codec.duration_seconds(detail.retry_after, "retry_after", allow_negative=True)
        if detail.HasField("retry_after")
        else None,
        fallback_tool=detail.fallback_tool,
        missing_permission=detail.missing_permission,
        metadata=metadata,
    )


def _violation_text(v: Violation) -> str:
    parts = [v.rule] if v.rule else []
    if v.expected:
        parts.append(f"expected {v.expected}")
    if v.actual:
        parts.append(f"got {v.actual}")
    if v.hint:
        parts.append(f"hint: {v.hint}")
    return "; ".join(parts)


def _pack(message: Any) -> Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def _build_rpc_status(err: AgentmeshError, request_id: str = "") -> Any:
    info_metadata = dict(err.metadata)
    info_metadata[_META_CLASS] = err.error_class.name
    if err.fallback_tool:
        info_metadata[_META_FALLBACK] = err.fallback_tool
    if err.missing_permission:
        info_metadata[_META_PERMISSION] = err.missing_permission
    details = [_pack(error_details_pb2.ErrorInfo(reason=err.code.name, domain=DOMAIN, metadata=info_metadata))]
    if err.retry_after is not None:
        details.append(_pack(error_details_pb2.RetryInfo(retry_delay=codec.duration(err.retry_after))))
    if err.violations:
        details.append(
            _pack(
                error_details_pb2.BadRequest(
                    field_violations=[
                        error_details_pb2.BadRequest.FieldViolation(
                            field=v.path, description=_violation_text(v), reason=v.rule.upper()
                        )
                        for v in err.violations
                    ]
                )
            )
        )
    detail = to_detail(err)
    detail.request_id = request_id
    details.append(_pack(detail))
    return status_pb2.Status(code=GRPC_STATUS[err.code].value[0], message=err.message or err.code.name, details=details)


def _clip(text: str, limit: int) -> str:
    """`text` cut to at most `limit` UTF-8 bytes (on a character boundary), marked "…" if cut."""
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= limit:
        return text
    kept = raw[: max(limit - len(ECHO_MARK.encode()), 0)].decode("utf-8", "ignore")
    return kept + ECHO_MARK


def _shrunk(err: AgentmeshError, *, keep_details: bool) -> AgentmeshError:
    n = _SHRUNK_FIELD_BYTES
    kept = err.violations[:_SHRUNK_VIOLATIONS] if keep_details else ()
    metadata = (
        {_clip(k, n): _clip(v, n) for k, v in sorted(err.metadata.items())[:_SHRUNK_METADATA_KEYS]}
        if keep_details
        else {}
    )
    metadata["details_truncated"] = "true"
    if len(kept) < len(err.violations):
        metadata["violations_omitted"] = str(len(err.violations) - len(kept))
    return err.replace(
        message=_clip(err.message, _SHRUNK_MESSAGE_BYTES),
        violations=[Violation(*(_clip(f, n) for f in (v.path, v.rule, v.expected, v.actual, v.hint))) for v in kept],
        fallback_tool=_clip(err.fallback_tool, n),
        missing_permission=_clip(err.missing_permission, n),
        metadata=metadata,
    )


def to_rpc_status(err: AgentmeshError, request_id: str = "") -> Any:
    """``err`` as a ``google.rpc.Status``, shrunk if needed to fit in a gRPC trailer; its ErrorDetail
    carries ``request_id`` (the failed call's).

    Oversized errors keep their code, class, retry and fallback facts; message, violations and
    metadata are clipped and ``metadata["details_truncated"] = "true"`` is set.
    """
    status = _build_rpc_status(err, request_id)
    if status.ByteSize() > _MAX_STATUS_BYTES:
        status = _build_rpc_status(_shrunk(err, keep_details=True), request_id)
    if status.ByteSize() > _MAX_STATUS_BYTES:
        status = _build_rpc_status(_shrunk(err, keep_details=False), request_id)
    return status


@dataclass(frozen=True)
class _Status(grpc.Status):
    code: grpc.StatusCode
    details: str
    trailing_metadata: tuple[tuple[str, str | bytes], ...]


def to_status(err: AgentmeshError, request_id: str = "") -> grpc.Status:
    """``err`` as a ``grpc.Status`` for ``abort_with_status``: rich details in the trailer, and the request
    id there too (``x-request-id``) when given."""
    status: grpc.Status = rpc_status.to_status(to_rpc_status(err, request_id))
    if not request_id:
        return status
    trailers = (*tuple(status.trailing_metadata or ()), (callctx.REQUEST_ID_HEADER, request_id))
    return _Status(status.code, status.details, trailers)


async def abort(context: grpc.aio.ServicerContext[Any, Any], err: AgentmeshError) -> NoReturn:
    """End the current RPC with ``err`` as a rich gRPC status (raises, never returns). The call's request
    id goes into the ErrorDetail and the trailers, and into the initial metadata when none was sent yet
    (`send_request_id`)."""
    rid = callctx.current_request_id() or ""
    await send_request_id(context)
    # grpc-stubs 1.53 lacks aio's abort_with_status; grpcio 1.85 has it (see the contract tests).
    await context.abort_with_status(to_status(err, rid))  # type: ignore[attr-defined]
    raise AssertionError("abort_with_status returned")  # pragma: no cover - it always raises


_initial_metadata_sent: ContextVar[bool] = ContextVar("agentmesh_initial_metadata_sent", default=False)


async def send_request_id(context: grpc.aio.ServicerContext[Any, Any]) -> None:
    """Sends the call's initial metadata with its `x-request-id`, once per call (grpc.aio runs each call in
    a task of its own, so the flag is the call's): before its first response message, or its error.
    A context that cannot send it (a servicer sent its own) is left as it is."""
    if _initial_metadata_sent.get():
        return
    _initial_metadata_sent.set(True)
    rid = callctx.current_request_id()
    send = getattr(context, "send_initial_metadata", None)
    if not rid or send is None:
        return
    with contextlib.suppress(grpc.aio.UsageError):  # already sent by the servicer: its metadata stands
        await send(((callctx.REQUEST_ID_HEADER, rid),))


@dataclass(frozen=True)
class RichDetails:
    """The standard and agentmesh details of a failed call; a field is None when absent.

    The message fields are ``google.rpc`` protos (typed Any because googleapis-common-protos
    ships no py.typed marker).
    """

    status: Any = None
    error_info: Any = None
    retry_info: Any = None
    bad_request: Any = None
    detail: common_pb2.ErrorDetail | None = None


def _call_parts(exc: grpc.RpcError) -> tuple[grpc.StatusCode, str, list[tuple[str, Any]]]:
    # A plain grpc.RpcError has none of the Call methods; the ones raised by calls do.
    code_fn = getattr(exc, "code", None)
    details_fn = getattr(exc, "details", None)
    trailers_fn = getattr(exc, "trailing_metadata", None)
    code = code_fn() if callable(code_fn) else _S.UNKNOWN
    details = (details_fn() if callable(details_fn) else None) or ""
    raw: Iterable[Any] = (trailers_fn() if callable(trailers_fn) else None) or ()
    trailers = [(str(key), value) for key, value in raw]
    return code, details, trailers


def _parse(trailers: list[tuple[str, Any]]) -> RichDetails:
    raw = next((v for k, v in trailers if k == _DETAILS_KEY and isinstance(v, bytes)), None)
    if raw is None:
        return RichDetails()
    try:
        status = status_pb2.Status.FromString(raw)
    except DecodeError:
        return RichDetails()
    found: dict[str, Any] = {"status": status}
    kinds = {
        "error_info": error_details_pb2.ErrorInfo,
        "retry_info": error_details_pb2.RetryInfo,
        "bad_request": error_details_pb2.BadRequest,
        "detail": common_pb2.ErrorDetail,
    }
    for packed in status.details:
        for name, kind in kinds.items():
            if name not in found and packed.Is(kind.DESCRIPTOR):
                message = kind()
                packed.Unpack(message)
                found[name] = message
    return RichDetails(**found)


def error_of_status(status: grpc.Status) -> AgentmeshError:
    """The AgentmeshError a rich status (`to_status`) carries; the closest code for a bare one."""
    rich = _parse([(str(k), v) for k, v in status.trailing_metadata or ()])
    if rich.detail is not None:
        return from_detail(rich.detail)
    return AgentmeshError(code_for_grpc_status(status.code, status.details or ""), status.details or "")


def rich_details(exc: grpc.RpcError) -> RichDetails:
    """The ``google.rpc`` details (and our ErrorDetail) of a failed call, read from its trailer."""
    return _parse(_call_parts(exc)[2])


def _from_error_info(info: Any, rich: RichDetails, message: str) -> AgentmeshError | None:
    code = ErrorCode.__members__.get(info.reason)
    if info.domain != DOMAIN or code is None or code == ErrorCode.UNSPECIFIED:
        return None
    metadata = dict(info.metadata)
    for key in (_META_CLASS, _META_FALLBACK, _META_PERMISSION):
        metadata.pop(key, None)
    violations = (
        [Violation(path=v.field, rule=v.reason.lower(), hint=v.description) for v in rich.bad_request.field_violations]
        if rich.bad_request is not None
        else []
    )
    retry_after = rich.retry_info.retry_delay.ToNanoseconds() / 1e9 if rich.retry_info is not None else None
    return AgentmeshError(
        code,
        message,
        violations=violations,
        retry_after=retry_after,
        fallback_tool=info.metadata.get(_META_FALLBACK, ""),
        missing_permission=info.metadata.get(_META_PERMISSION, ""),
        metadata=metadata,
    )


def from_rpc_error(exc: grpc.RpcError) -> AgentmeshError:
    """The AgentmeshError behind a failed call (``grpc.aio.AioRpcError`` or a sync ``RpcError``).

    Prefers our ErrorDetail, then the ErrorInfo reason (a non-Python agentmesh peer), then the
    closest code for the bare status; the last keeps the status name in ``metadata["grpc_status"]``.
    """
    status_code, message, trailers = _call_parts(exc)
    rich = _parse(trailers)
    if rich.detail is not None:
        return from_detail(rich.detail)
    if rich.error_info is not None:
        from_info = _from_error_info(rich.error_info, rich, message)
        if from_info is not None:
            return from_info
    code = code_for_grpc_status(status_code, message)
    return AgentmeshError(
        code,
        message,
        retryable=default_retryable(code),
        metadata={"grpc_status": status_code.name},
    )


# --- an ErrorDetail a caller sent (ToolResult.error) ------------------------------------------------


def checked_from_detail(detail: common_pb2.ErrorDetail, field: str) -> AgentmeshError:
    """The AgentmeshError of an ErrorDetail in a request; a negative retry_after is INVALID_ARGUMENT."""
    if detail.HasField("retry_after"):
        codec.duration_seconds(detail.retry_after, f"{field}.retry_after")
    return from_detail(detail)
