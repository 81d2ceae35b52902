import datetime

from agentmesh.v1 import common_pb2 as _common_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ApprovalState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    APPROVAL_STATE_UNSPECIFIED: _ClassVar[ApprovalState]
    APPROVAL_STATE_PENDING: _ClassVar[ApprovalState]
    APPROVAL_STATE_APPROVED: _ClassVar[ApprovalState]
    APPROVAL_STATE_DENIED: _ClassVar[ApprovalState]
    APPROVAL_STATE_EXPIRED: _ClassVar[ApprovalState]
APPROVAL_STATE_UNSPECIFIED: ApprovalState
APPROVAL_STATE_PENDING: ApprovalState
APPROVAL_STATE_APPROVED: ApprovalState
APPROVAL_STATE_DENIED: ApprovalState
APPROVAL_STATE_EXPIRED: ApprovalState

class ListToolsRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class ListToolsResponse(_message.Message):
    __slots__ = ("tools",)
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[_common_pb2.ToolSpec]
    def __init__(self, tools: _Optional[_Iterable[_Union[_common_pb2.ToolSpec, _Mapping]]] = ...) -> None: ...

class DiscoverToolsRequest(_message.Message):
    __slots__ = ("goal", "k", "permitted_only")
    GOAL_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    PERMITTED_ONLY_FIELD_NUMBER: _ClassVar[int]
    goal: str
    k: int
    permitted_only: bool
    def __init__(self, goal: _Optional[str] = ..., k: _Optional[int] = ..., permitted_only: _Optional[bool] = ...) -> None: ...

class ScoredTool(_message.Message):
    __slots__ = ("tool", "score")
    TOOL_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    tool: _common_pb2.ToolSpec
    score: float
    def __init__(self, tool: _Optional[_Union[_common_pb2.ToolSpec, _Mapping]] = ..., score: _Optional[float] = ...) -> None: ...

class DiscoverToolsResponse(_message.Message):
    __slots__ = ("tools",)
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[ScoredTool]
    def __init__(self, tools: _Optional[_Iterable[_Union[ScoredTool, _Mapping]]] = ...) -> None: ...

class RegisterToolRequest(_message.Message):
    __slots__ = ("tool", "replace")
    TOOL_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    tool: _common_pb2.ToolSpec
    replace: bool
    def __init__(self, tool: _Optional[_Union[_common_pb2.ToolSpec, _Mapping]] = ..., replace: _Optional[bool] = ...) -> None: ...

class RegisterToolResponse(_message.Message):
    __slots__ = ("tool",)
    TOOL_FIELD_NUMBER: _ClassVar[int]
    tool: _common_pb2.ToolSpec
    def __init__(self, tool: _Optional[_Union[_common_pb2.ToolSpec, _Mapping]] = ...) -> None: ...

class ExecuteToolRequest(_message.Message):
    __slots__ = ("call", "session_id", "idempotency_key", "goal")
    CALL_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    GOAL_FIELD_NUMBER: _ClassVar[int]
    call: _common_pb2.ToolCall
    session_id: str
    idempotency_key: str
    goal: str
    def __init__(self, call: _Optional[_Union[_common_pb2.ToolCall, _Mapping]] = ..., session_id: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., goal: _Optional[str] = ...) -> None: ...

class ExecuteToolResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: ToolResult
    def __init__(self, result: _Optional[_Union[ToolResult, _Mapping]] = ...) -> None: ...

class ToolResult(_message.Message):
    __slots__ = ("tool_call_id", "tool_name", "output", "error", "pending_approval", "stats")
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    PENDING_APPROVAL_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    tool_call_id: str
    tool_name: str
    output: ToolOutput
    error: ToolError
    pending_approval: PendingApproval
    stats: ExecutionStats
    def __init__(self, tool_call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., output: _Optional[_Union[ToolOutput, _Mapping]] = ..., error: _Optional[_Union[ToolError, _Mapping]] = ..., pending_approval: _Optional[_Union[PendingApproval, _Mapping]] = ..., stats: _Optional[_Union[ExecutionStats, _Mapping]] = ...) -> None: ...

class ToolOutput(_message.Message):
    __slots__ = ("inline", "ref", "digest", "result_type", "redacted")
    INLINE_FIELD_NUMBER: _ClassVar[int]
    REF_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    RESULT_TYPE_FIELD_NUMBER: _ClassVar[int]
    REDACTED_FIELD_NUMBER: _ClassVar[int]
    inline: str
    ref: _common_pb2.PayloadRef
    digest: str
    result_type: _common_pb2.ResultType
    redacted: bool
    def __init__(self, inline: _Optional[str] = ..., ref: _Optional[_Union[_common_pb2.PayloadRef, _Mapping]] = ..., digest: _Optional[str] = ..., result_type: _Optional[_Union[_common_pb2.ResultType, str]] = ..., redacted: _Optional[bool] = ...) -> None: ...

class ToolError(_message.Message):
    __slots__ = ("code", "error_class", "message", "violations", "retryable", "retry_after", "fallback_tool", "missing_permission", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_CLASS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    VIOLATIONS_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_TOOL_FIELD_NUMBER: _ClassVar[int]
    MISSING_PERMISSION_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    code: _common_pb2.ErrorCode
    error_class: _common_pb2.ErrorClass
    message: str
    violations: _containers.RepeatedCompositeFieldContainer[_common_pb2.FieldViolation]
    retryable: bool
    retry_after: _duration_pb2.Duration
    fallback_tool: str
    missing_permission: str
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_class: _Optional[_Union[_common_pb2.ErrorClass, str]] = ..., message: _Optional[str] = ..., violations: _Optional[_Iterable[_Union[_common_pb2.FieldViolation, _Mapping]]] = ..., retryable: _Optional[bool] = ..., retry_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., fallback_tool: _Optional[str] = ..., missing_permission: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class PendingApproval(_message.Message):
    __slots__ = ("approval_id", "plan", "impact", "arguments_sha256", "expire_time", "requested_by")
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    IMPACT_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_SHA256_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_BY_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    plan: _common_pb2.ToolCall
    impact: str
    arguments_sha256: str
    expire_time: _timestamp_pb2.Timestamp
    requested_by: str
    def __init__(self, approval_id: _Optional[str] = ..., plan: _Optional[_Union[_common_pb2.ToolCall, _Mapping]] = ..., impact: _Optional[str] = ..., arguments_sha256: _Optional[str] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., requested_by: _Optional[str] = ...) -> None: ...

class ExecutionStats(_message.Message):
    __slots__ = ("attempts", "duration", "replayed", "output_bytes")
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    attempts: int
    duration: _duration_pb2.Duration
    replayed: bool
    output_bytes: int
    def __init__(self, attempts: _Optional[int] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., replayed: _Optional[bool] = ..., output_bytes: _Optional[int] = ...) -> None: ...

class Approval(_message.Message):
    __slots__ = ("request", "state", "resolved_by", "reason", "resolve_time")
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_BY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RESOLVE_TIME_FIELD_NUMBER: _ClassVar[int]
    request: PendingApproval
    state: ApprovalState
    resolved_by: str
    reason: str
    resolve_time: _timestamp_pb2.Timestamp
    def __init__(self, request: _Optional[_Union[PendingApproval, _Mapping]] = ..., state: _Optional[_Union[ApprovalState, str]] = ..., resolved_by: _Optional[str] = ..., reason: _Optional[str] = ..., resolve_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ResolveApprovalRequest(_message.Message):
    __slots__ = ("approval_id", "approve", "reason", "arguments_sha256")
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    APPROVE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_SHA256_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    approve: bool
    reason: str
    arguments_sha256: str
    def __init__(self, approval_id: _Optional[str] = ..., approve: _Optional[bool] = ..., reason: _Optional[str] = ..., arguments_sha256: _Optional[str] = ...) -> None: ...

class ResolveApprovalResponse(_message.Message):
    __slots__ = ("approval", "result")
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    approval: Approval
    result: ToolResult
    def __init__(self, approval: _Optional[_Union[Approval, _Mapping]] = ..., result: _Optional[_Union[ToolResult, _Mapping]] = ...) -> None: ...

class GetApprovalRequest(_message.Message):
    __slots__ = ("approval_id",)
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    def __init__(self, approval_id: _Optional[str] = ...) -> None: ...

class GetApprovalResponse(_message.Message):
    __slots__ = ("approval",)
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    approval: Approval
    def __init__(self, approval: _Optional[_Union[Approval, _Mapping]] = ...) -> None: ...
