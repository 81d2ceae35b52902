from agentmesh.v1 import common_pb2 as _common_pb2
from google.api import field_behavior_pb2 as _field_behavior_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class BreakerState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BREAKER_STATE_UNSPECIFIED: _ClassVar[BreakerState]
    BREAKER_STATE_CLOSED: _ClassVar[BreakerState]
    BREAKER_STATE_OPEN: _ClassVar[BreakerState]
    BREAKER_STATE_HALF_OPEN: _ClassVar[BreakerState]
    BREAKER_STATE_RAMPING: _ClassVar[BreakerState]
BREAKER_STATE_UNSPECIFIED: BreakerState
BREAKER_STATE_CLOSED: BreakerState
BREAKER_STATE_OPEN: BreakerState
BREAKER_STATE_HALF_OPEN: BreakerState
BREAKER_STATE_RAMPING: BreakerState

class ListToolsRequest(_message.Message):
    __slots__ = ("group", "permitted_only")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    PERMITTED_ONLY_FIELD_NUMBER: _ClassVar[int]
    group: str
    permitted_only: bool
    def __init__(self, group: _Optional[str] = ..., permitted_only: _Optional[bool] = ...) -> None: ...

class ListToolsResponse(_message.Message):
    __slots__ = ("tools", "breakers")
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    BREAKERS_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[_common_pb2.ToolSpec]
    breakers: _containers.RepeatedCompositeFieldContainer[ToolBreakerCount]
    def __init__(self, tools: _Optional[_Iterable[_Union[_common_pb2.ToolSpec, _Mapping]]] = ..., breakers: _Optional[_Iterable[_Union[ToolBreakerCount, _Mapping]]] = ...) -> None: ...

class ToolBreakerCount(_message.Message):
    __slots__ = ("tool", "state", "count")
    TOOL_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    tool: str
    state: BreakerState
    count: int
    def __init__(self, tool: _Optional[str] = ..., state: _Optional[_Union[BreakerState, str]] = ..., count: _Optional[int] = ...) -> None: ...

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
    __slots__ = ("tool", "pending_approval")
    TOOL_FIELD_NUMBER: _ClassVar[int]
    PENDING_APPROVAL_FIELD_NUMBER: _ClassVar[int]
    tool: _common_pb2.ToolSpec
    pending_approval: _common_pb2.PendingApproval
    def __init__(self, tool: _Optional[_Union[_common_pb2.ToolSpec, _Mapping]] = ..., pending_approval: _Optional[_Union[_common_pb2.PendingApproval, _Mapping]] = ...) -> None: ...

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
    result: _common_pb2.ToolResult
    def __init__(self, result: _Optional[_Union[_common_pb2.ToolResult, _Mapping]] = ...) -> None: ...

class ResolveApprovalRequest(_message.Message):
    __slots__ = ("approval_id", "approve", "reason", "arguments_sha256", "settlement")
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    APPROVE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_SHA256_FIELD_NUMBER: _ClassVar[int]
    SETTLEMENT_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    approve: bool
    reason: str
    arguments_sha256: str
    settlement: _common_pb2.SettlementOutcome
    def __init__(self, approval_id: _Optional[str] = ..., approve: _Optional[bool] = ..., reason: _Optional[str] = ..., arguments_sha256: _Optional[str] = ..., settlement: _Optional[_Union[_common_pb2.SettlementOutcome, str]] = ...) -> None: ...

class ResolveApprovalResponse(_message.Message):
    __slots__ = ("approval", "result")
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    approval: _common_pb2.Approval
    result: _common_pb2.ToolResult
    def __init__(self, approval: _Optional[_Union[_common_pb2.Approval, _Mapping]] = ..., result: _Optional[_Union[_common_pb2.ToolResult, _Mapping]] = ...) -> None: ...

class GetApprovalRequest(_message.Message):
    __slots__ = ("approval_id",)
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    def __init__(self, approval_id: _Optional[str] = ...) -> None: ...

class GetApprovalResponse(_message.Message):
    __slots__ = ("approval",)
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    approval: _common_pb2.Approval
    def __init__(self, approval: _Optional[_Union[_common_pb2.Approval, _Mapping]] = ...) -> None: ...
