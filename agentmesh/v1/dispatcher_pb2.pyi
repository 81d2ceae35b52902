import datetime

from agentmesh.v1 import common_pb2 as _common_pb2
from google.api import field_behavior_pb2 as _field_behavior_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TaskStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_STATUS_UNSPECIFIED: _ClassVar[TaskStatus]
    TASK_STATUS_PENDING: _ClassVar[TaskStatus]
    TASK_STATUS_RUNNING: _ClassVar[TaskStatus]
    TASK_STATUS_WAITING_APPROVAL: _ClassVar[TaskStatus]
    TASK_STATUS_SUCCEEDED: _ClassVar[TaskStatus]
    TASK_STATUS_FAILED: _ClassVar[TaskStatus]
    TASK_STATUS_ABORTED: _ClassVar[TaskStatus]
    TASK_STATUS_CANCELLED: _ClassVar[TaskStatus]
    TASK_STATUS_HANDED_OFF: _ClassVar[TaskStatus]
    TASK_STATUS_WAITING_CHILD: _ClassVar[TaskStatus]

class TaskEventKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_EVENT_KIND_UNSPECIFIED: _ClassVar[TaskEventKind]
    TASK_EVENT_KIND_HEARTBEAT: _ClassVar[TaskEventKind]
    TASK_EVENT_KIND_STATUS: _ClassVar[TaskEventKind]
    TASK_EVENT_KIND_STEP_STARTED: _ClassVar[TaskEventKind]
    TASK_EVENT_KIND_MODEL_REPLY: _ClassVar[TaskEventKind]
    TASK_EVENT_KIND_TOOL_CALL: _ClassVar[TaskEventKind]
    TASK_EVENT_KIND_TOOL_RESULT: _ClassVar[TaskEventKind]
    TASK_EVENT_KIND_CORRECTION: _ClassVar[TaskEventKind]
    TASK_EVENT_KIND_FALLBACK: _ClassVar[TaskEventKind]
    TASK_EVENT_KIND_APPROVAL_REQUIRED: _ClassVar[TaskEventKind]
    TASK_EVENT_KIND_APPROVAL_RESOLVED: _ClassVar[TaskEventKind]
    TASK_EVENT_KIND_INCIDENT: _ClassVar[TaskEventKind]
    TASK_EVENT_KIND_ANSWER: _ClassVar[TaskEventKind]
    TASK_EVENT_KIND_CONTEXT: _ClassVar[TaskEventKind]
    TASK_EVENT_KIND_CLAIM_CHECK: _ClassVar[TaskEventKind]
    TASK_EVENT_KIND_HANDOFF: _ClassVar[TaskEventKind]

class TaskApprovalKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_APPROVAL_KIND_UNSPECIFIED: _ClassVar[TaskApprovalKind]
    TASK_APPROVAL_KIND_APPROVAL: _ClassVar[TaskApprovalKind]
    TASK_APPROVAL_KIND_SETTLEMENT: _ClassVar[TaskApprovalKind]

class TraceSpanKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRACE_SPAN_KIND_UNSPECIFIED: _ClassVar[TraceSpanKind]
    TRACE_SPAN_KIND_INTERNAL: _ClassVar[TraceSpanKind]
    TRACE_SPAN_KIND_SERVER: _ClassVar[TraceSpanKind]
    TRACE_SPAN_KIND_CLIENT: _ClassVar[TraceSpanKind]
    TRACE_SPAN_KIND_PRODUCER: _ClassVar[TraceSpanKind]
    TRACE_SPAN_KIND_CONSUMER: _ClassVar[TraceSpanKind]

class TraceSpanStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRACE_SPAN_STATUS_UNSPECIFIED: _ClassVar[TraceSpanStatus]
    TRACE_SPAN_STATUS_OK: _ClassVar[TraceSpanStatus]
    TRACE_SPAN_STATUS_ERROR: _ClassVar[TraceSpanStatus]
TASK_STATUS_UNSPECIFIED: TaskStatus
TASK_STATUS_PENDING: TaskStatus
TASK_STATUS_RUNNING: TaskStatus
TASK_STATUS_WAITING_APPROVAL: TaskStatus
TASK_STATUS_SUCCEEDED: TaskStatus
TASK_STATUS_FAILED: TaskStatus
TASK_STATUS_ABORTED: TaskStatus
TASK_STATUS_CANCELLED: TaskStatus
TASK_STATUS_HANDED_OFF: TaskStatus
TASK_STATUS_WAITING_CHILD: TaskStatus
TASK_EVENT_KIND_UNSPECIFIED: TaskEventKind
TASK_EVENT_KIND_HEARTBEAT: TaskEventKind
TASK_EVENT_KIND_STATUS: TaskEventKind
TASK_EVENT_KIND_STEP_STARTED: TaskEventKind
TASK_EVENT_KIND_MODEL_REPLY: TaskEventKind
TASK_EVENT_KIND_TOOL_CALL: TaskEventKind
TASK_EVENT_KIND_TOOL_RESULT: TaskEventKind
TASK_EVENT_KIND_CORRECTION: TaskEventKind
TASK_EVENT_KIND_FALLBACK: TaskEventKind
TASK_EVENT_KIND_APPROVAL_REQUIRED: TaskEventKind
TASK_EVENT_KIND_APPROVAL_RESOLVED: TaskEventKind
TASK_EVENT_KIND_INCIDENT: TaskEventKind
TASK_EVENT_KIND_ANSWER: TaskEventKind
TASK_EVENT_KIND_CONTEXT: TaskEventKind
TASK_EVENT_KIND_CLAIM_CHECK: TaskEventKind
TASK_EVENT_KIND_HANDOFF: TaskEventKind
TASK_APPROVAL_KIND_UNSPECIFIED: TaskApprovalKind
TASK_APPROVAL_KIND_APPROVAL: TaskApprovalKind
TASK_APPROVAL_KIND_SETTLEMENT: TaskApprovalKind
TRACE_SPAN_KIND_UNSPECIFIED: TraceSpanKind
TRACE_SPAN_KIND_INTERNAL: TraceSpanKind
TRACE_SPAN_KIND_SERVER: TraceSpanKind
TRACE_SPAN_KIND_CLIENT: TraceSpanKind
TRACE_SPAN_KIND_PRODUCER: TraceSpanKind
TRACE_SPAN_KIND_CONSUMER: TraceSpanKind
TRACE_SPAN_STATUS_UNSPECIFIED: TraceSpanStatus
TRACE_SPAN_STATUS_OK: TraceSpanStatus
TRACE_SPAN_STATUS_ERROR: TraceSpanStatus

class Agent(_message.Message):
    __slots__ = ("agent_id", "description", "model", "tools", "capabilities", "token_budget", "max_steps", "output_schema_json")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    TOKEN_BUDGET_FIELD_NUMBER: _ClassVar[int]
    MAX_STEPS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    description: str
    model: str
    tools: _containers.RepeatedScalarFieldContainer[str]
    capabilities: _containers.RepeatedScalarFieldContainer[str]
    token_budget: int
    max_steps: int
    output_schema_json: str
    def __init__(self, agent_id: _Optional[str] = ..., description: _Optional[str] = ..., model: _Optional[str] = ..., tools: _Optional[_Iterable[str]] = ..., capabilities: _Optional[_Iterable[str]] = ..., token_budget: _Optional[int] = ..., max_steps: _Optional[int] = ..., output_schema_json: _Optional[str] = ...) -> None: ...

class Task(_message.Message):
    __slots__ = ("task_id", "agent_id", "goal", "status", "step", "usage", "answer", "error", "session_id", "request_id", "pending_approval", "last_sequence", "create_time", "update_time", "created_by", "output_json", "output", "output_schema_json", "parent_task_id", "root_task_id", "child_task_id")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    GOAL_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PENDING_APPROVAL_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    PARENT_TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ROOT_TASK_ID_FIELD_NUMBER: _ClassVar[int]
    CHILD_TASK_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    agent_id: str
    goal: str
    status: TaskStatus
    step: int
    usage: _common_pb2.TokenUsage
    answer: str
    error: _common_pb2.ErrorDetail
    session_id: str
    request_id: str
    pending_approval: _common_pb2.PendingApproval
    last_sequence: int
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    created_by: str
    output_json: str
    output: _struct_pb2.Value
    output_schema_json: str
    parent_task_id: str
    root_task_id: str
    child_task_id: str
    def __init__(self, task_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., goal: _Optional[str] = ..., status: _Optional[_Union[TaskStatus, str]] = ..., step: _Optional[int] = ..., usage: _Optional[_Union[_common_pb2.TokenUsage, _Mapping]] = ..., answer: _Optional[str] = ..., error: _Optional[_Union[_common_pb2.ErrorDetail, _Mapping]] = ..., session_id: _Optional[str] = ..., request_id: _Optional[str] = ..., pending_approval: _Optional[_Union[_common_pb2.PendingApproval, _Mapping]] = ..., last_sequence: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., created_by: _Optional[str] = ..., output_json: _Optional[str] = ..., output: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., output_schema_json: _Optional[str] = ..., parent_task_id: _Optional[str] = ..., root_task_id: _Optional[str] = ..., child_task_id: _Optional[str] = ...) -> None: ...

class StartTaskRequest(_message.Message):
    __slots__ = ("agent_id", "goal", "token_budget", "max_steps", "task_id", "session_id", "output_schema_json", "capability")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    GOAL_FIELD_NUMBER: _ClassVar[int]
    TOKEN_BUDGET_FIELD_NUMBER: _ClassVar[int]
    MAX_STEPS_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    CAPABILITY_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    goal: str
    token_budget: int
    max_steps: int
    task_id: str
    session_id: str
    output_schema_json: str
    capability: str
    def __init__(self, agent_id: _Optional[str] = ..., goal: _Optional[str] = ..., token_budget: _Optional[int] = ..., max_steps: _Optional[int] = ..., task_id: _Optional[str] = ..., session_id: _Optional[str] = ..., output_schema_json: _Optional[str] = ..., capability: _Optional[str] = ...) -> None: ...

class StartTaskResponse(_message.Message):
    __slots__ = ("task",)
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: Task
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ...) -> None: ...

class RunTaskRequest(_message.Message):
    __slots__ = ("start",)
    START_FIELD_NUMBER: _ClassVar[int]
    start: StartTaskRequest
    def __init__(self, start: _Optional[_Union[StartTaskRequest, _Mapping]] = ...) -> None: ...

class TaskEvent(_message.Message):
    __slots__ = ("task_id", "sequence", "kind", "time", "status", "step", "message", "tool_call", "tool_result", "error", "pending_approval", "usage", "attributes", "output_json", "output")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    PENDING_APPROVAL_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    sequence: int
    kind: TaskEventKind
    time: _timestamp_pb2.Timestamp
    status: TaskStatus
    step: int
    message: str
    tool_call: _common_pb2.ToolCall
    tool_result: _common_pb2.ToolResult
    error: _common_pb2.ErrorDetail
    pending_approval: _common_pb2.PendingApproval
    usage: _common_pb2.TokenUsage
    attributes: _containers.ScalarMap[str, str]
    output_json: str
    output: _struct_pb2.Value
    def __init__(self, task_id: _Optional[str] = ..., sequence: _Optional[int] = ..., kind: _Optional[_Union[TaskEventKind, str]] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., status: _Optional[_Union[TaskStatus, str]] = ..., step: _Optional[int] = ..., message: _Optional[str] = ..., tool_call: _Optional[_Union[_common_pb2.ToolCall, _Mapping]] = ..., tool_result: _Optional[_Union[_common_pb2.ToolResult, _Mapping]] = ..., error: _Optional[_Union[_common_pb2.ErrorDetail, _Mapping]] = ..., pending_approval: _Optional[_Union[_common_pb2.PendingApproval, _Mapping]] = ..., usage: _Optional[_Union[_common_pb2.TokenUsage, _Mapping]] = ..., attributes: _Optional[_Mapping[str, str]] = ..., output_json: _Optional[str] = ..., output: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class RunTaskResponse(_message.Message):
    __slots__ = ("event",)
    EVENT_FIELD_NUMBER: _ClassVar[int]
    event: TaskEvent
    def __init__(self, event: _Optional[_Union[TaskEvent, _Mapping]] = ...) -> None: ...

class WatchTaskResponse(_message.Message):
    __slots__ = ("event",)
    EVENT_FIELD_NUMBER: _ClassVar[int]
    event: TaskEvent
    def __init__(self, event: _Optional[_Union[TaskEvent, _Mapping]] = ...) -> None: ...

class GetTaskRequest(_message.Message):
    __slots__ = ("task_id",)
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    def __init__(self, task_id: _Optional[str] = ...) -> None: ...

class GetTaskResponse(_message.Message):
    __slots__ = ("task",)
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: Task
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ...) -> None: ...

class WatchTaskRequest(_message.Message):
    __slots__ = ("task_id", "after_sequence")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    after_sequence: int
    def __init__(self, task_id: _Optional[str] = ..., after_sequence: _Optional[int] = ...) -> None: ...

class CancelTaskRequest(_message.Message):
    __slots__ = ("task_id", "reason")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    reason: str
    def __init__(self, task_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelTaskResponse(_message.Message):
    __slots__ = ("task",)
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: Task
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ...) -> None: ...

class DispatcherServiceResolveApprovalRequest(_message.Message):
    __slots__ = ("task_id", "approval_id", "approve", "reason", "arguments_sha256", "settlement")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    APPROVE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_SHA256_FIELD_NUMBER: _ClassVar[int]
    SETTLEMENT_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    approval_id: str
    approve: bool
    reason: str
    arguments_sha256: str
    settlement: _common_pb2.SettlementOutcome
    def __init__(self, task_id: _Optional[str] = ..., approval_id: _Optional[str] = ..., approve: _Optional[bool] = ..., reason: _Optional[str] = ..., arguments_sha256: _Optional[str] = ..., settlement: _Optional[_Union[_common_pb2.SettlementOutcome, str]] = ...) -> None: ...

class DispatcherServiceResolveApprovalResponse(_message.Message):
    __slots__ = ("approval", "task")
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    approval: _common_pb2.Approval
    task: Task
    def __init__(self, approval: _Optional[_Union[_common_pb2.Approval, _Mapping]] = ..., task: _Optional[_Union[Task, _Mapping]] = ...) -> None: ...

class ListAgentsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListAgentsResponse(_message.Message):
    __slots__ = ("agents",)
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    agents: _containers.RepeatedCompositeFieldContainer[Agent]
    def __init__(self, agents: _Optional[_Iterable[_Union[Agent, _Mapping]]] = ...) -> None: ...

class GetStepPromptRequest(_message.Message):
    __slots__ = ("task_id", "step")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    step: int
    def __init__(self, task_id: _Optional[str] = ..., step: _Optional[int] = ...) -> None: ...

class StepPrompt(_message.Message):
    __slots__ = ("task_id", "step", "session_id", "model", "format", "request_json", "redacted", "create_time")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_JSON_FIELD_NUMBER: _ClassVar[int]
    REDACTED_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    step: int
    session_id: str
    model: str
    format: str
    request_json: str
    redacted: bool
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, task_id: _Optional[str] = ..., step: _Optional[int] = ..., session_id: _Optional[str] = ..., model: _Optional[str] = ..., format: _Optional[str] = ..., request_json: _Optional[str] = ..., redacted: _Optional[bool] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GetStepPromptResponse(_message.Message):
    __slots__ = ("prompt",)
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    prompt: StepPrompt
    def __init__(self, prompt: _Optional[_Union[StepPrompt, _Mapping]] = ...) -> None: ...

class ListTasksRequest(_message.Message):
    __slots__ = ("agent_id", "status", "created_by", "root_task_id", "created_after", "created_before", "page_size", "page_token")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    ROOT_TASK_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AFTER_FIELD_NUMBER: _ClassVar[int]
    CREATED_BEFORE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    status: TaskStatus
    created_by: str
    root_task_id: str
    created_after: _timestamp_pb2.Timestamp
    created_before: _timestamp_pb2.Timestamp
    page_size: int
    page_token: str
    def __init__(self, agent_id: _Optional[str] = ..., status: _Optional[_Union[TaskStatus, str]] = ..., created_by: _Optional[str] = ..., root_task_id: _Optional[str] = ..., created_after: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., created_before: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListTasksResponse(_message.Message):
    __slots__ = ("tasks", "next_page_token")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[Task]
    next_page_token: str
    def __init__(self, tasks: _Optional[_Iterable[_Union[Task, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class TaskApproval(_message.Message):
    __slots__ = ("task_id", "agent_id", "kind", "pending_approval", "wait_time", "created_by", "goal")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PENDING_APPROVAL_FIELD_NUMBER: _ClassVar[int]
    WAIT_TIME_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    GOAL_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    agent_id: str
    kind: TaskApprovalKind
    pending_approval: _common_pb2.PendingApproval
    wait_time: _timestamp_pb2.Timestamp
    created_by: str
    goal: str
    def __init__(self, task_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., kind: _Optional[_Union[TaskApprovalKind, str]] = ..., pending_approval: _Optional[_Union[_common_pb2.PendingApproval, _Mapping]] = ..., wait_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., created_by: _Optional[str] = ..., goal: _Optional[str] = ...) -> None: ...

class ListApprovalsRequest(_message.Message):
    __slots__ = ("agent_id", "kind", "page_size", "page_token")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    kind: TaskApprovalKind
    page_size: int
    page_token: str
    def __init__(self, agent_id: _Optional[str] = ..., kind: _Optional[_Union[TaskApprovalKind, str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListApprovalsResponse(_message.Message):
    __slots__ = ("approvals", "next_page_token")
    APPROVALS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    approvals: _containers.RepeatedCompositeFieldContainer[TaskApproval]
    next_page_token: str
    def __init__(self, approvals: _Optional[_Iterable[_Union[TaskApproval, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetTaskTraceRequest(_message.Message):
    __slots__ = ("task_id",)
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    def __init__(self, task_id: _Optional[str] = ...) -> None: ...

class TraceSpan(_message.Message):
    __slots__ = ("trace_id", "span_id", "parent_span_id", "name", "kind", "service", "start_time", "end_time", "status", "status_message", "attributes")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STATUS_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: TraceSpanKind
    service: str
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    status: TraceSpanStatus
    status_message: str
    attributes: _containers.ScalarMap[str, str]
    def __init__(self, trace_id: _Optional[str] = ..., span_id: _Optional[str] = ..., parent_span_id: _Optional[str] = ..., name: _Optional[str] = ..., kind: _Optional[_Union[TraceSpanKind, str]] = ..., service: _Optional[str] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., status: _Optional[_Union[TraceSpanStatus, str]] = ..., status_message: _Optional[str] = ..., attributes: _Optional[_Mapping[str, str]] = ...) -> None: ...

class GetTaskTraceResponse(_message.Message):
    __slots__ = ("spans", "truncated")
    SPANS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    spans: _containers.RepeatedCompositeFieldContainer[TraceSpan]
    truncated: bool
    def __init__(self, spans: _Optional[_Iterable[_Union[TraceSpan, _Mapping]]] = ..., truncated: _Optional[bool] = ...) -> None: ...
