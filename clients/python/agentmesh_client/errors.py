"""Typed errors of agentmesh calls, read from the rich gRPC status the services send.

A failed call raises a subclass of `AgentmeshError` named after its gRPC status (`NotFound`,
`PermissionDenied`, `Unauthenticated`, ...). Each carries what the server said: `.code` (the
`grpc.StatusCode`), `.reason` (agentmesh's error code, e.g. "UNKNOWN_TOOL" or "NOT_FOUND"),
`.error_class` ("CONTRACT", "ENGINEERING" or "FATAL"), `.detail` (the `agentmesh.v1.ErrorDetail`
message: violations, retryable, retry_after, missing_permission, metadata) and `.request_id` (the
`x-request-id` the call was sent with, to find it in the servers' logs and traces).

The details travel in the `grpc-status-details-bin` trailer as a `google.rpc.Status`; this module
parses it with googleapis-common-protos alone (no grpcio-status).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

import grpc
from google.protobuf.message import DecodeError

# googleapis-common-protos ships .pyi files but no py.typed marker.
from google.rpc import error_details_pb2, status_pb2  # type: ignore[import-untyped]

from agentmesh_client._v1 import common_pb2

__all__ = [
    "Aborted",
    "AgentmeshError",
    "AlreadyExists",
    "Cancelled",
    "DataLoss",
    "DeadlineExceeded",
    "FailedPrecondition",
    "Internal",
    "InvalidArgument",
    "NotFound",
    "OutOfRange",
    "PermissionDenied",
    "ResourceExhausted",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "Unknown",
    "from_rpc_error",
]

DOMAIN = "agentmesh.v1"
"""ErrorInfo.domain of agentmesh's errors."""
DETAILS_TRAILER = "grpc-status-details-bin"


class AgentmeshError(Exception):
    """A failed agentmesh call (see the module docstring for its attributes)."""

    grpc_code: ClassVar[grpc.StatusCode] = grpc.StatusCode.UNKNOWN

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode | None = None,
        reason: str = "",
        error_class: str = "",
        detail: common_pb2.ErrorDetail | None = None,
        error_info: Any = None,
        retry_info: Any = None,
        request_id: str = "",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code: grpc.StatusCode = code or self.grpc_code
        self.reason = reason
        self.error_class = error_class
        self.detail = detail
        self.error_info = error_info
        self.retry_info = retry_info
        self.request_id = request_id

    @property
    def retryable(self) -> bool:
        """Whether the same call may succeed later unchanged (the server's word when it said so)."""
        if self.detail is not None:
            return self.detail.retryable
        return self.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED)

    @property
    def retry_after(self) -> float | None:
        """Seconds to wait before retrying, when the server said."""
        if self.detail is not None and self.detail.HasField("retry_after"):
            return float(self.detail.retry_after.ToNanoseconds() / 1e9)
        if self.retry_info is not None:
            return float(self.retry_info.retry_delay.ToNanoseconds() / 1e9)
        return None

    @property
    def violations(self) -> list[common_pb2.FieldViolation]:
        """The violated rules of a CONTRACT error (path, rule, expected, actual, hint)."""
        return list(self.detail.violations) if self.detail is not None else []

    def __str__(self) -> str:
        head = self.reason or self.code.name
        tail = f" (request {self.request_id})" if self.request_id else ""
        return f"{head}: {self.message}{tail}"


class Cancelled(AgentmeshError):
    grpc_code = grpc.StatusCode.CANCELLED


class Unknown(AgentmeshError):
    grpc_code = grpc.StatusCode.UNKNOWN


class InvalidArgument(AgentmeshError):
    grpc_code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(AgentmeshError):
    grpc_code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFound(AgentmeshError):
    grpc_code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(AgentmeshError):
    grpc_code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(AgentmeshError):
    grpc_code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(AgentmeshError):
    grpc_code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(AgentmeshError):
    grpc_code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(AgentmeshError):
    grpc_code = grpc.StatusCode.ABORTED


class OutOfRange(AgentmeshError):
    grpc_code = grpc.StatusCode.OUT_OF_RANGE


class Unimplemented(AgentmeshError):
    grpc_code = grpc.StatusCode.UNIMPLEMENTED


class Internal(AgentmeshError):
    grpc_code = grpc.StatusCode.INTERNAL


class Unavailable(AgentmeshError):
    grpc_code = grpc.StatusCode.UNAVAILABLE


class DataLoss(AgentmeshError):
    grpc_code = grpc.StatusCode.DATA_LOSS


class Unauthenticated(AgentmeshError):
    grpc_code = grpc.StatusCode.UNAUTHENTICATED


_BY_CODE: dict[grpc.StatusCode, type[AgentmeshError]] = {
    kind.grpc_code: kind
    for kind in (
        Cancelled,
        Unknown,
        InvalidArgument,
        DeadlineExceeded,
        NotFound,
        AlreadyExists,
        PermissionDenied,
        ResourceExhausted,
        FailedPrecondition,
        Aborted,
        OutOfRange,
        Unimplemented,
        Internal,
        Unavailable,
        DataLoss,
        Unauthenticated,
    )
}


def error_type(code: grpc.StatusCode) -> type[AgentmeshError]:
    """The AgentmeshError subclass of a gRPC status code."""
    return _BY_CODE.get(code, AgentmeshError)


def _status_details(trailers: Iterable[Any]) -> tuple[str, Any, Any, common_pb2.ErrorDetail | None]:
    """(Status.message, ErrorInfo, RetryInfo, ErrorDetail) from the details trailer; absent ones None/""."""
    raw = next((value for key, value in trailers if key == DETAILS_TRAILER and isinstance(value, bytes)), None)
    if raw is None:
        return "", None, None, None
    try:
        status = status_pb2.Status.FromString(raw)
    except DecodeError:
        return "", None, None, None
    info = retry = detail = None
    for packed in status.details:
        if info is None and packed.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            packed.Unpack(info)
        elif retry is None and packed.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            packed.Unpack(retry)
        elif detail is None and packed.Is(common_pb2.ErrorDetail.DESCRIPTOR):
            detail = common_pb2.ErrorDetail()
            packed.Unpack(detail)
    return str(status.message), info, retry, detail


def _enum_name(enum: Any, value: int, prefix: str) -> str:
    try:
        return str(enum.Name(value)).removeprefix(prefix)
    except ValueError:
        return str(value)


def from_rpc_error(exc: grpc.RpcError, request_id: str = "") -> AgentmeshError:
    """The typed error of a failed call (a `grpc.RpcError` raised by a stub)."""
    code_fn, details_fn, trailers_fn = (getattr(exc, name, None) for name in ("code", "details", "trailing_metadata"))
    code = code_fn() if callable(code_fn) else grpc.StatusCode.UNKNOWN
    text = (details_fn() if callable(details_fn) else None) or ""
    trailers = (trailers_fn() if callable(trailers_fn) else None) or ()
    status_message, info, retry, detail = _status_details(trailers)
    reason = error_class = ""
    if detail is not None:
        reason = _enum_name(common_pb2.ErrorCode, detail.code, "ERROR_CODE_")
        error_class = _enum_name(common_pb2.ErrorClass, detail.error_class, "ERROR_CLASS_")
    elif info is not None and info.domain == DOMAIN:
        reason = str(info.reason)
        error_class = str(info.metadata.get("error_class", ""))
    message = (detail.message if detail is not None and detail.message else "") or status_message or text
    return error_type(code)(
        message or code.name,
        code=code,
        reason=reason,
        error_class=error_class,
        detail=detail,
        error_info=info,
        retry_info=retry,
        request_id=request_id,
    )
