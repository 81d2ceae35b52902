import datetime

from google.api import field_behavior_pb2 as _field_behavior_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_CODE_UNSPECIFIED: _ClassVar[ErrorCode]
    ERROR_CODE_SCHEMA_INVALID: _ClassVar[ErrorCode]
    ERROR_CODE_ARGUMENTS_NOT_JSON: _ClassVar[ErrorCode]
    ERROR_CODE_UNKNOWN_TOOL: _ClassVar[ErrorCode]
    ERROR_CODE_IDEMPOTENCY_CONFLICT: _ClassVar[ErrorCode]
    ERROR_CODE_VERIFICATION_REJECTED: _ClassVar[ErrorCode]
    ERROR_CODE_UPSTREAM_NOT_FOUND: _ClassVar[ErrorCode]
    ERROR_CODE_UPSTREAM_TIMEOUT: _ClassVar[ErrorCode]
    ERROR_CODE_UPSTREAM_UNAVAILABLE: _ClassVar[ErrorCode]
    ERROR_CODE_UPSTREAM_REJECTED: _ClassVar[ErrorCode]
    ERROR_CODE_RATE_LIMITED: _ClassVar[ErrorCode]
    ERROR_CODE_CIRCUIT_OPEN: _ClassVar[ErrorCode]
    ERROR_CODE_PERMISSION_DENIED: _ClassVar[ErrorCode]
    ERROR_CODE_APPROVAL_DENIED: _ClassVar[ErrorCode]
    ERROR_CODE_APPROVAL_EXPIRED: _ClassVar[ErrorCode]
    ERROR_CODE_OUTPUT_INVALID: _ClassVar[ErrorCode]
    ERROR_CODE_SANDBOX_UNAVAILABLE: _ClassVar[ErrorCode]
    ERROR_CODE_PROVIDER_AUTH_FAILED: _ClassVar[ErrorCode]
    ERROR_CODE_CONTEXT_LENGTH_EXCEEDED: _ClassVar[ErrorCode]
    ERROR_CODE_CONTENT_FILTERED: _ClassVar[ErrorCode]
    ERROR_CODE_INVALID_REQUEST: _ClassVar[ErrorCode]
    ERROR_CODE_INTERNAL: _ClassVar[ErrorCode]
    ERROR_CODE_NOT_FOUND: _ClassVar[ErrorCode]
    ERROR_CODE_UNAVAILABLE: _ClassVar[ErrorCode]
    ERROR_CODE_UNAUTHENTICATED: _ClassVar[ErrorCode]
    ERROR_CODE_PAYLOAD_TOO_LARGE: _ClassVar[ErrorCode]
    ERROR_CODE_OVERLOADED: _ClassVar[ErrorCode]
    ERROR_CODE_CANCELLED: _ClassVar[ErrorCode]
    ERROR_CODE_DEADLINE_EXCEEDED: _ClassVar[ErrorCode]
    ERROR_CODE_FAILED_PRECONDITION: _ClassVar[ErrorCode]
    ERROR_CODE_OUTCOME_UNKNOWN: _ClassVar[ErrorCode]
    ERROR_CODE_CLAIM_UNSUPPORTED: _ClassVar[ErrorCode]
    ERROR_CODE_HANDOFF_DEPTH_EXCEEDED: _ClassVar[ErrorCode]
    ERROR_CODE_HANDOFF_FAILED: _ClassVar[ErrorCode]
    ERROR_CODE_DANGEROUS_OPERATION: _ClassVar[ErrorCode]
    ERROR_CODE_BUDGET_EXHAUSTED: _ClassVar[ErrorCode]
    ERROR_CODE_MAX_STEPS_EXCEEDED: _ClassVar[ErrorCode]
    ERROR_CODE_LOOP_DETECTED: _ClassVar[ErrorCode]
    ERROR_CODE_SANDBOX_VIOLATION: _ClassVar[ErrorCode]
    ERROR_CODE_BUDGET_EXCEEDED: _ClassVar[ErrorCode]

class ErrorClass(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_CLASS_UNSPECIFIED: _ClassVar[ErrorClass]
    ERROR_CLASS_CONTRACT: _ClassVar[ErrorClass]
    ERROR_CLASS_ENGINEERING: _ClassVar[ErrorClass]
    ERROR_CLASS_FATAL: _ClassVar[ErrorClass]

class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLE_UNSPECIFIED: _ClassVar[Role]
    ROLE_SYSTEM: _ClassVar[Role]
    ROLE_USER: _ClassVar[Role]
    ROLE_ASSISTANT: _ClassVar[Role]
    ROLE_TOOL: _ClassVar[Role]

class ResultType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESULT_TYPE_UNSPECIFIED: _ClassVar[ResultType]
    RESULT_TYPE_STRUCTURED: _ClassVar[ResultType]
    RESULT_TYPE_TEXT: _ClassVar[ResultType]

class AccessMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACCESS_MODE_UNSPECIFIED: _ClassVar[AccessMode]
    ACCESS_MODE_READ: _ClassVar[AccessMode]
    ACCESS_MODE_WRITE: _ClassVar[AccessMode]

class ApprovalKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    APPROVAL_KIND_UNSPECIFIED: _ClassVar[ApprovalKind]
    APPROVAL_KIND_CALL: _ClassVar[ApprovalKind]
    APPROVAL_KIND_REGISTER_TOOL: _ClassVar[ApprovalKind]
    APPROVAL_KIND_SETTLEMENT: _ClassVar[ApprovalKind]

class SettlementOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SETTLEMENT_OUTCOME_UNSPECIFIED: _ClassVar[SettlementOutcome]
    SETTLEMENT_OUTCOME_RAN: _ClassVar[SettlementOutcome]
    SETTLEMENT_OUTCOME_NOT_RAN: _ClassVar[SettlementOutcome]

class ApprovalState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    APPROVAL_STATE_UNSPECIFIED: _ClassVar[ApprovalState]
    APPROVAL_STATE_PENDING: _ClassVar[ApprovalState]
    APPROVAL_STATE_APPROVED: _ClassVar[ApprovalState]
    APPROVAL_STATE_DENIED: _ClassVar[ApprovalState]
    APPROVAL_STATE_EXPIRED: _ClassVar[ApprovalState]

class NextStep(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NEXT_STEP_UNSPECIFIED: _ClassVar[NextStep]
    NEXT_STEP_FIX_ARGUMENTS: _ClassVar[NextStep]
    NEXT_STEP_STOP_CORRECTING: _ClassVar[NextStep]
    NEXT_STEP_USE_FALLBACK: _ClassVar[NextStep]
    NEXT_STEP_NOT_REPEATED: _ClassVar[NextStep]
ERROR_CODE_UNSPECIFIED: ErrorCode
ERROR_CODE_SCHEMA_INVALID: ErrorCode
ERROR_CODE_ARGUMENTS_NOT_JSON: ErrorCode
ERROR_CODE_UNKNOWN_TOOL: ErrorCode
ERROR_CODE_IDEMPOTENCY_CONFLICT: ErrorCode
ERROR_CODE_VERIFICATION_REJECTED: ErrorCode
ERROR_CODE_UPSTREAM_NOT_FOUND: ErrorCode
ERROR_CODE_UPSTREAM_TIMEOUT: ErrorCode
ERROR_CODE_UPSTREAM_UNAVAILABLE: ErrorCode
ERROR_CODE_UPSTREAM_REJECTED: ErrorCode
ERROR_CODE_RATE_LIMITED: ErrorCode
ERROR_CODE_CIRCUIT_OPEN: ErrorCode
ERROR_CODE_PERMISSION_DENIED: ErrorCode
ERROR_CODE_APPROVAL_DENIED: ErrorCode
ERROR_CODE_APPROVAL_EXPIRED: ErrorCode
ERROR_CODE_OUTPUT_INVALID: ErrorCode
ERROR_CODE_SANDBOX_UNAVAILABLE: ErrorCode
ERROR_CODE_PROVIDER_AUTH_FAILED: ErrorCode
ERROR_CODE_CONTEXT_LENGTH_EXCEEDED: ErrorCode
ERROR_CODE_CONTENT_FILTERED: ErrorCode
ERROR_CODE_INVALID_REQUEST: ErrorCode
ERROR_CODE_INTERNAL: ErrorCode
ERROR_CODE_NOT_FOUND: ErrorCode
ERROR_CODE_UNAVAILABLE: ErrorCode
ERROR_CODE_UNAUTHENTICATED: ErrorCode
ERROR_CODE_PAYLOAD_TOO_LARGE: ErrorCode
ERROR_CODE_OVERLOADED: ErrorCode
ERROR_CODE_CANCELLED: ErrorCode
ERROR_CODE_DEADLINE_EXCEEDED: ErrorCode
ERROR_CODE_FAILED_PRECONDITION: ErrorCode
ERROR_CODE_OUTCOME_UNKNOWN: ErrorCode
ERROR_CODE_CLAIM_UNSUPPORTED: ErrorCode
ERROR_CODE_HANDOFF_DEPTH_EXCEEDED: ErrorCode
ERROR_CODE_HANDOFF_FAILED: ErrorCode
ERROR_CODE_DANGEROUS_OPERATION: ErrorCode
ERROR_CODE_BUDGET_EXHAUSTED: ErrorCode
ERROR_CODE_MAX_STEPS_EXCEEDED: ErrorCode
ERROR_CODE_LOOP_DETECTED: ErrorCode
ERROR_CODE_SANDBOX_VIOLATION: ErrorCode
ERROR_CODE_BUDGET_EXCEEDED: ErrorCode
ERROR_CLASS_UNSPECIFIED: ErrorClass
ERROR_CLASS_CONTRACT: ErrorClass
ERROR_CLASS_ENGINEERING: ErrorClass
ERROR_CLASS_FATAL: ErrorClass
ROLE_UNSPECIFIED: Role
ROLE_SYSTEM: Role
ROLE_USER: Role
ROLE_ASSISTANT: Role
ROLE_TOOL: Role
RESULT_TYPE_UNSPECIFIED: ResultType
RESULT_TYPE_STRUCTURED: ResultType
RESULT_TYPE_TEXT: ResultType
ACCESS_MODE_UNSPECIFIED: AccessMode
ACCESS_MODE_READ: AccessMode
ACCESS_MODE_WRITE: AccessMode
APPROVAL_KIND_UNSPECIFIED: ApprovalKind
APPROVAL_KIND_CALL: ApprovalKind
APPROVAL_KIND_REGISTER_TOOL: ApprovalKind
APPROVAL_KIND_SETTLEMENT: ApprovalKind
SETTLEMENT_OUTCOME_UNSPECIFIED: SettlementOutcome
SETTLEMENT_OUTCOME_RAN: SettlementOutcome
SETTLEMENT_OUTCOME_NOT_RAN: SettlementOutcome
APPROVAL_STATE_UNSPECIFIED: ApprovalState
APPROVAL_STATE_PENDING: ApprovalState
APPROVAL_STATE_APPROVED: ApprovalState
APPROVAL_STATE_DENIED: ApprovalState
APPROVAL_STATE_EXPIRED: ApprovalState
NEXT_STEP_UNSPECIFIED: NextStep
NEXT_STEP_FIX_ARGUMENTS: NextStep
NEXT_STEP_STOP_CORRECTING: NextStep
NEXT_STEP_USE_FALLBACK: NextStep
NEXT_STEP_NOT_REPEATED: NextStep

class FieldViolation(_message.Message):
    __slots__ = ("path", "rule", "expected", "actual", "hint")
    PATH_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_FIELD_NUMBER: _ClassVar[int]
    ACTUAL_FIELD_NUMBER: _ClassVar[int]
    HINT_FIELD_NUMBER: _ClassVar[int]
    path: str
    rule: str
    expected: str
    actual: str
    hint: str
    def __init__(self, path: _Optional[str] = ..., rule: _Optional[str] = ..., expected: _Optional[str] = ..., actual: _Optional[str] = ..., hint: _Optional[str] = ...) -> None: ...

class ErrorDetail(_message.Message):
    __slots__ = ("code", "error_class", "message", "violations", "retryable", "retry_after", "fallback_tool", "missing_permission", "metadata", "request_id")
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
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    code: ErrorCode
    error_class: ErrorClass
    message: str
    violations: _containers.RepeatedCompositeFieldContainer[FieldViolation]
    retryable: bool
    retry_after: _duration_pb2.Duration
    fallback_tool: str
    missing_permission: str
    metadata: _containers.ScalarMap[str, str]
    request_id: str
    def __init__(self, code: _Optional[_Union[ErrorCode, str]] = ..., error_class: _Optional[_Union[ErrorClass, str]] = ..., message: _Optional[str] = ..., violations: _Optional[_Iterable[_Union[FieldViolation, _Mapping]]] = ..., retryable: _Optional[bool] = ..., retry_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., fallback_tool: _Optional[str] = ..., missing_permission: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., request_id: _Optional[str] = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ("id", "name", "arguments_json")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    arguments_json: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., arguments_json: _Optional[str] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ("role", "content", "tool_calls", "tool_call_id", "name", "token_count", "create_time", "tool_error", "correction")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    TOOL_ERROR_FIELD_NUMBER: _ClassVar[int]
    CORRECTION_FIELD_NUMBER: _ClassVar[int]
    role: Role
    content: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    tool_call_id: str
    name: str
    token_count: int
    create_time: _timestamp_pb2.Timestamp
    tool_error: ErrorDetail
    correction: Correction
    def __init__(self, role: _Optional[_Union[Role, str]] = ..., content: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ..., tool_call_id: _Optional[str] = ..., name: _Optional[str] = ..., token_count: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., tool_error: _Optional[_Union[ErrorDetail, _Mapping]] = ..., correction: _Optional[_Union[Correction, _Mapping]] = ...) -> None: ...

class ToolPermission(_message.Message):
    __slots__ = ("environment", "group", "access")
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    ACCESS_FIELD_NUMBER: _ClassVar[int]
    environment: str
    group: str
    access: AccessMode
    def __init__(self, environment: _Optional[str] = ..., group: _Optional[str] = ..., access: _Optional[_Union[AccessMode, str]] = ...) -> None: ...

class RetryPolicy(_message.Message):
    __slots__ = ("max_attempts", "initial_backoff", "max_backoff", "max_jitter")
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    INITIAL_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    MAX_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    MAX_JITTER_FIELD_NUMBER: _ClassVar[int]
    max_attempts: int
    initial_backoff: _duration_pb2.Duration
    max_backoff: _duration_pb2.Duration
    max_jitter: _duration_pb2.Duration
    def __init__(self, max_attempts: _Optional[int] = ..., initial_backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_jitter: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ToolSpec(_message.Message):
    __slots__ = ("name", "description", "examples", "input_schema_json", "output_schema_json", "result_type", "permission", "impact", "timeout", "retry_policy", "idempotent", "requires_approval", "fallback_tool", "executor", "endpoint_url", "http_method", "upstream_idempotency_key", "unavailable_reason", "mcp_server", "mcp_tool")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    RESULT_TYPE_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_FIELD_NUMBER: _ClassVar[int]
    IMPACT_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    RETRY_POLICY_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENT_FIELD_NUMBER: _ClassVar[int]
    REQUIRES_APPROVAL_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_TOOL_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_URL_FIELD_NUMBER: _ClassVar[int]
    HTTP_METHOD_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_REASON_FIELD_NUMBER: _ClassVar[int]
    MCP_SERVER_FIELD_NUMBER: _ClassVar[int]
    MCP_TOOL_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    examples: _containers.RepeatedScalarFieldContainer[str]
    input_schema_json: str
    output_schema_json: str
    result_type: ResultType
    permission: ToolPermission
    impact: str
    timeout: _duration_pb2.Duration
    retry_policy: RetryPolicy
    idempotent: bool
    requires_approval: bool
    fallback_tool: str
    executor: str
    endpoint_url: str
    http_method: str
    upstream_idempotency_key: bool
    unavailable_reason: str
    mcp_server: str
    mcp_tool: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., examples: _Optional[_Iterable[str]] = ..., input_schema_json: _Optional[str] = ..., output_schema_json: _Optional[str] = ..., result_type: _Optional[_Union[ResultType, str]] = ..., permission: _Optional[_Union[ToolPermission, _Mapping]] = ..., impact: _Optional[str] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., retry_policy: _Optional[_Union[RetryPolicy, _Mapping]] = ..., idempotent: _Optional[bool] = ..., requires_approval: _Optional[bool] = ..., fallback_tool: _Optional[str] = ..., executor: _Optional[str] = ..., endpoint_url: _Optional[str] = ..., http_method: _Optional[str] = ..., upstream_idempotency_key: _Optional[bool] = ..., unavailable_reason: _Optional[str] = ..., mcp_server: _Optional[str] = ..., mcp_tool: _Optional[str] = ...) -> None: ...

class TokenUsage(_message.Message):
    __slots__ = ("input_tokens", "output_tokens", "total_tokens")
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    input_tokens: int
    output_tokens: int
    total_tokens: int
    def __init__(self, input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., total_tokens: _Optional[int] = ...) -> None: ...

class PayloadRef(_message.Message):
    __slots__ = ("ref_id", "session_id", "size_bytes", "media_type", "sha256", "expire_time")
    REF_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    ref_id: str
    session_id: str
    size_bytes: int
    media_type: str
    sha256: str
    expire_time: _timestamp_pb2.Timestamp
    def __init__(self, ref_id: _Optional[str] = ..., session_id: _Optional[str] = ..., size_bytes: _Optional[int] = ..., media_type: _Optional[str] = ..., sha256: _Optional[str] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ToolResult(_message.Message):
    __slots__ = ("tool_call_id", "tool_name", "output", "error", "pending_approval", "stats", "correction")
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    PENDING_APPROVAL_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    CORRECTION_FIELD_NUMBER: _ClassVar[int]
    tool_call_id: str
    tool_name: str
    output: ToolOutput
    error: ErrorDetail
    pending_approval: PendingApproval
    stats: ExecutionStats
    correction: Correction
    def __init__(self, tool_call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., output: _Optional[_Union[ToolOutput, _Mapping]] = ..., error: _Optional[_Union[ErrorDetail, _Mapping]] = ..., pending_approval: _Optional[_Union[PendingApproval, _Mapping]] = ..., stats: _Optional[_Union[ExecutionStats, _Mapping]] = ..., correction: _Optional[_Union[Correction, _Mapping]] = ...) -> None: ...

class ToolOutput(_message.Message):
    __slots__ = ("inline", "ref", "digest", "result_type", "redacted")
    INLINE_FIELD_NUMBER: _ClassVar[int]
    REF_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    RESULT_TYPE_FIELD_NUMBER: _ClassVar[int]
    REDACTED_FIELD_NUMBER: _ClassVar[int]
    inline: str
    ref: PayloadRef
    digest: str
    result_type: ResultType
    redacted: bool
    def __init__(self, inline: _Optional[str] = ..., ref: _Optional[_Union[PayloadRef, _Mapping]] = ..., digest: _Optional[str] = ..., result_type: _Optional[_Union[ResultType, str]] = ..., redacted: _Optional[bool] = ...) -> None: ...

class PendingApproval(_message.Message):
    __slots__ = ("approval_id", "plan", "impact", "arguments_sha256", "expire_time", "requested_by", "kind")
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    IMPACT_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_SHA256_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_BY_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    plan: ToolCall
    impact: str
    arguments_sha256: str
    expire_time: _timestamp_pb2.Timestamp
    requested_by: str
    kind: ApprovalKind
    def __init__(self, approval_id: _Optional[str] = ..., plan: _Optional[_Union[ToolCall, _Mapping]] = ..., impact: _Optional[str] = ..., arguments_sha256: _Optional[str] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., requested_by: _Optional[str] = ..., kind: _Optional[_Union[ApprovalKind, str]] = ...) -> None: ...

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
    __slots__ = ("request", "state", "resolved_by", "reason", "resolve_time", "settlement")
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_BY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RESOLVE_TIME_FIELD_NUMBER: _ClassVar[int]
    SETTLEMENT_FIELD_NUMBER: _ClassVar[int]
    request: PendingApproval
    state: ApprovalState
    resolved_by: str
    reason: str
    resolve_time: _timestamp_pb2.Timestamp
    settlement: SettlementOutcome
    def __init__(self, request: _Optional[_Union[PendingApproval, _Mapping]] = ..., state: _Optional[_Union[ApprovalState, str]] = ..., resolved_by: _Optional[str] = ..., reason: _Optional[str] = ..., resolve_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., settlement: _Optional[_Union[SettlementOutcome, str]] = ...) -> None: ...

class Correction(_message.Message):
    __slots__ = ("next_step", "attempt", "max_attempts", "fallback_tool", "failed_with")
    NEXT_STEP_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_TOOL_FIELD_NUMBER: _ClassVar[int]
    FAILED_WITH_FIELD_NUMBER: _ClassVar[int]
    next_step: NextStep
    attempt: int
    max_attempts: int
    fallback_tool: str
    failed_with: ErrorCode
    def __init__(self, next_step: _Optional[_Union[NextStep, str]] = ..., attempt: _Optional[int] = ..., max_attempts: _Optional[int] = ..., fallback_tool: _Optional[str] = ..., failed_with: _Optional[_Union[ErrorCode, str]] = ...) -> None: ...
