import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WorkflowRunStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WORKFLOW_RUN_STATUS_UNSPECIFIED: _ClassVar[WorkflowRunStatus]
    WORKFLOW_RUN_STATUS_RUNNING: _ClassVar[WorkflowRunStatus]
    WORKFLOW_RUN_STATUS_SUCCEEDED: _ClassVar[WorkflowRunStatus]
    WORKFLOW_RUN_STATUS_FAILED: _ClassVar[WorkflowRunStatus]
    WORKFLOW_RUN_STATUS_ABORTED: _ClassVar[WorkflowRunStatus]

class WorkflowNodeStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WORKFLOW_NODE_STATUS_UNSPECIFIED: _ClassVar[WorkflowNodeStatus]
    WORKFLOW_NODE_STATUS_PENDING: _ClassVar[WorkflowNodeStatus]
    WORKFLOW_NODE_STATUS_RUNNING: _ClassVar[WorkflowNodeStatus]
    WORKFLOW_NODE_STATUS_SUCCEEDED: _ClassVar[WorkflowNodeStatus]
    WORKFLOW_NODE_STATUS_FAILED: _ClassVar[WorkflowNodeStatus]
    WORKFLOW_NODE_STATUS_FELL_BACK: _ClassVar[WorkflowNodeStatus]
    WORKFLOW_NODE_STATUS_SKIPPED: _ClassVar[WorkflowNodeStatus]
    WORKFLOW_NODE_STATUS_CANCELLED: _ClassVar[WorkflowNodeStatus]

class WorkflowEventKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WORKFLOW_EVENT_KIND_UNSPECIFIED: _ClassVar[WorkflowEventKind]
    WORKFLOW_EVENT_KIND_RUN: _ClassVar[WorkflowEventKind]
    WORKFLOW_EVENT_KIND_NODE: _ClassVar[WorkflowEventKind]
WORKFLOW_RUN_STATUS_UNSPECIFIED: WorkflowRunStatus
WORKFLOW_RUN_STATUS_RUNNING: WorkflowRunStatus
WORKFLOW_RUN_STATUS_SUCCEEDED: WorkflowRunStatus
WORKFLOW_RUN_STATUS_FAILED: WorkflowRunStatus
WORKFLOW_RUN_STATUS_ABORTED: WorkflowRunStatus
WORKFLOW_NODE_STATUS_UNSPECIFIED: WorkflowNodeStatus
WORKFLOW_NODE_STATUS_PENDING: WorkflowNodeStatus
WORKFLOW_NODE_STATUS_RUNNING: WorkflowNodeStatus
WORKFLOW_NODE_STATUS_SUCCEEDED: WorkflowNodeStatus
WORKFLOW_NODE_STATUS_FAILED: WorkflowNodeStatus
WORKFLOW_NODE_STATUS_FELL_BACK: WorkflowNodeStatus
WORKFLOW_NODE_STATUS_SKIPPED: WorkflowNodeStatus
WORKFLOW_NODE_STATUS_CANCELLED: WorkflowNodeStatus
WORKFLOW_EVENT_KIND_UNSPECIFIED: WorkflowEventKind
WORKFLOW_EVENT_KIND_RUN: WorkflowEventKind
WORKFLOW_EVENT_KIND_NODE: WorkflowEventKind

class WorkflowNode(_message.Message):
    __slots__ = ("node_id", "status", "attempts", "output_json", "error_code", "reason", "task_id")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    status: WorkflowNodeStatus
    attempts: int
    output_json: str
    error_code: str
    reason: str
    task_id: str
    def __init__(self, node_id: _Optional[str] = ..., status: _Optional[_Union[WorkflowNodeStatus, str]] = ..., attempts: _Optional[int] = ..., output_json: _Optional[str] = ..., error_code: _Optional[str] = ..., reason: _Optional[str] = ..., task_id: _Optional[str] = ...) -> None: ...

class WorkflowRun(_message.Message):
    __slots__ = ("run_id", "workflow", "status", "input_json", "nodes", "error_code", "created_by", "create_time", "last_sequence")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    INPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    workflow: str
    status: WorkflowRunStatus
    input_json: str
    nodes: _containers.RepeatedCompositeFieldContainer[WorkflowNode]
    error_code: str
    created_by: str
    create_time: _timestamp_pb2.Timestamp
    last_sequence: int
    def __init__(self, run_id: _Optional[str] = ..., workflow: _Optional[str] = ..., status: _Optional[_Union[WorkflowRunStatus, str]] = ..., input_json: _Optional[str] = ..., nodes: _Optional[_Iterable[_Union[WorkflowNode, _Mapping]]] = ..., error_code: _Optional[str] = ..., created_by: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_sequence: _Optional[int] = ...) -> None: ...

class WorkflowEvent(_message.Message):
    __slots__ = ("run_id", "sequence", "kind", "run_status", "node_id", "item", "node_status", "attempt", "error_code", "reason")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    RUN_STATUS_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ITEM_FIELD_NUMBER: _ClassVar[int]
    NODE_STATUS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    sequence: int
    kind: WorkflowEventKind
    run_status: WorkflowRunStatus
    node_id: str
    item: int
    node_status: WorkflowNodeStatus
    attempt: int
    error_code: str
    reason: str
    def __init__(self, run_id: _Optional[str] = ..., sequence: _Optional[int] = ..., kind: _Optional[_Union[WorkflowEventKind, str]] = ..., run_status: _Optional[_Union[WorkflowRunStatus, str]] = ..., node_id: _Optional[str] = ..., item: _Optional[int] = ..., node_status: _Optional[_Union[WorkflowNodeStatus, str]] = ..., attempt: _Optional[int] = ..., error_code: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class Workflow(_message.Message):
    __slots__ = ("name", "description", "input_schema_json", "node_ids", "schedule_cron", "definition")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    NODE_IDS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_CRON_FIELD_NUMBER: _ClassVar[int]
    DEFINITION_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    input_schema_json: str
    node_ids: _containers.RepeatedScalarFieldContainer[str]
    schedule_cron: str
    definition: _struct_pb2.Struct
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., input_schema_json: _Optional[str] = ..., node_ids: _Optional[_Iterable[str]] = ..., schedule_cron: _Optional[str] = ..., definition: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class StartWorkflowRunRequest(_message.Message):
    __slots__ = ("workflow", "input_json", "run_id")
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    INPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    workflow: str
    input_json: str
    run_id: str
    def __init__(self, workflow: _Optional[str] = ..., input_json: _Optional[str] = ..., run_id: _Optional[str] = ...) -> None: ...

class StartWorkflowRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: WorkflowRun
    def __init__(self, run: _Optional[_Union[WorkflowRun, _Mapping]] = ...) -> None: ...

class GetWorkflowRunRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class GetWorkflowRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: WorkflowRun
    def __init__(self, run: _Optional[_Union[WorkflowRun, _Mapping]] = ...) -> None: ...

class WatchWorkflowRunRequest(_message.Message):
    __slots__ = ("run_id", "after_sequence")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    after_sequence: int
    def __init__(self, run_id: _Optional[str] = ..., after_sequence: _Optional[int] = ...) -> None: ...

class WatchWorkflowRunResponse(_message.Message):
    __slots__ = ("event",)
    EVENT_FIELD_NUMBER: _ClassVar[int]
    event: WorkflowEvent
    def __init__(self, event: _Optional[_Union[WorkflowEvent, _Mapping]] = ...) -> None: ...

class CancelWorkflowRunRequest(_message.Message):
    __slots__ = ("run_id", "reason")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    reason: str
    def __init__(self, run_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelWorkflowRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: WorkflowRun
    def __init__(self, run: _Optional[_Union[WorkflowRun, _Mapping]] = ...) -> None: ...

class ListWorkflowRunsRequest(_message.Message):
    __slots__ = ("workflow", "page_size", "page_token")
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    workflow: str
    page_size: int
    page_token: str
    def __init__(self, workflow: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListWorkflowRunsResponse(_message.Message):
    __slots__ = ("runs", "next_page_token")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[WorkflowRun]
    next_page_token: str
    def __init__(self, runs: _Optional[_Iterable[_Union[WorkflowRun, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListWorkflowsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListWorkflowsResponse(_message.Message):
    __slots__ = ("workflows",)
    WORKFLOWS_FIELD_NUMBER: _ClassVar[int]
    workflows: _containers.RepeatedCompositeFieldContainer[Workflow]
    def __init__(self, workflows: _Optional[_Iterable[_Union[Workflow, _Mapping]]] = ...) -> None: ...
