import datetime

from agentmesh.v1 import common_pb2 as _common_pb2
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

class ContextBlockKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONTEXT_BLOCK_KIND_UNSPECIFIED: _ClassVar[ContextBlockKind]
    CONTEXT_BLOCK_KIND_SYSTEM: _ClassVar[ContextBlockKind]
    CONTEXT_BLOCK_KIND_SUMMARY: _ClassVar[ContextBlockKind]
    CONTEXT_BLOCK_KIND_RECENT: _ClassVar[ContextBlockKind]
    CONTEXT_BLOCK_KIND_OBSERVATIONS: _ClassVar[ContextBlockKind]

class HandoffFactKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HANDOFF_FACT_KIND_UNSPECIFIED: _ClassVar[HandoffFactKind]
    HANDOFF_FACT_KIND_CONFIRMED: _ClassVar[HandoffFactKind]
    HANDOFF_FACT_KIND_INFERRED: _ClassVar[HandoffFactKind]

class HandoffDemotionReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HANDOFF_DEMOTION_REASON_UNSPECIFIED: _ClassVar[HandoffDemotionReason]
    HANDOFF_DEMOTION_REASON_CITATION_NOT_FOUND: _ClassVar[HandoffDemotionReason]
    HANDOFF_DEMOTION_REASON_VALUE_NOT_IN_SOURCE: _ClassVar[HandoffDemotionReason]
    HANDOFF_DEMOTION_REASON_NO_ACCESS: _ClassVar[HandoffDemotionReason]
    HANDOFF_DEMOTION_REASON_MALFORMED: _ClassVar[HandoffDemotionReason]

class MemoryScope(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MEMORY_SCOPE_UNSPECIFIED: _ClassVar[MemoryScope]
    MEMORY_SCOPE_USER: _ClassVar[MemoryScope]
    MEMORY_SCOPE_AGENT: _ClassVar[MemoryScope]
    MEMORY_SCOPE_TENANT: _ClassVar[MemoryScope]

class MemoryKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MEMORY_KIND_UNSPECIFIED: _ClassVar[MemoryKind]
    MEMORY_KIND_FACT: _ClassVar[MemoryKind]
    MEMORY_KIND_PREFERENCE: _ClassVar[MemoryKind]
    MEMORY_KIND_EVENT: _ClassVar[MemoryKind]
CONTEXT_BLOCK_KIND_UNSPECIFIED: ContextBlockKind
CONTEXT_BLOCK_KIND_SYSTEM: ContextBlockKind
CONTEXT_BLOCK_KIND_SUMMARY: ContextBlockKind
CONTEXT_BLOCK_KIND_RECENT: ContextBlockKind
CONTEXT_BLOCK_KIND_OBSERVATIONS: ContextBlockKind
HANDOFF_FACT_KIND_UNSPECIFIED: HandoffFactKind
HANDOFF_FACT_KIND_CONFIRMED: HandoffFactKind
HANDOFF_FACT_KIND_INFERRED: HandoffFactKind
HANDOFF_DEMOTION_REASON_UNSPECIFIED: HandoffDemotionReason
HANDOFF_DEMOTION_REASON_CITATION_NOT_FOUND: HandoffDemotionReason
HANDOFF_DEMOTION_REASON_VALUE_NOT_IN_SOURCE: HandoffDemotionReason
HANDOFF_DEMOTION_REASON_NO_ACCESS: HandoffDemotionReason
HANDOFF_DEMOTION_REASON_MALFORMED: HandoffDemotionReason
MEMORY_SCOPE_UNSPECIFIED: MemoryScope
MEMORY_SCOPE_USER: MemoryScope
MEMORY_SCOPE_AGENT: MemoryScope
MEMORY_SCOPE_TENANT: MemoryScope
MEMORY_KIND_UNSPECIFIED: MemoryKind
MEMORY_KIND_FACT: MemoryKind
MEMORY_KIND_PREFERENCE: MemoryKind
MEMORY_KIND_EVENT: MemoryKind

class BudgetSettings(_message.Message):
    __slots__ = ("max_context_tokens", "reserve_system_prompt_tokens", "summary_trigger_tokens", "keep_recent_messages", "encoding")
    MAX_CONTEXT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    RESERVE_SYSTEM_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_TRIGGER_TOKENS_FIELD_NUMBER: _ClassVar[int]
    KEEP_RECENT_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    max_context_tokens: int
    reserve_system_prompt_tokens: int
    summary_trigger_tokens: int
    keep_recent_messages: int
    encoding: str
    def __init__(self, max_context_tokens: _Optional[int] = ..., reserve_system_prompt_tokens: _Optional[int] = ..., summary_trigger_tokens: _Optional[int] = ..., keep_recent_messages: _Optional[int] = ..., encoding: _Optional[str] = ...) -> None: ...

class Session(_message.Message):
    __slots__ = ("session_id", "agent_id", "goal", "sub_goals", "system_prompt", "budget", "message_count", "total_tokens", "summary_count", "create_time", "newest_task_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    GOAL_FIELD_NUMBER: _ClassVar[int]
    SUB_GOALS_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROMPT_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_COUNT_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    NEWEST_TASK_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    agent_id: str
    goal: str
    sub_goals: _containers.RepeatedScalarFieldContainer[str]
    system_prompt: str
    budget: BudgetSettings
    message_count: int
    total_tokens: int
    summary_count: int
    create_time: _timestamp_pb2.Timestamp
    newest_task_id: str
    def __init__(self, session_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., goal: _Optional[str] = ..., sub_goals: _Optional[_Iterable[str]] = ..., system_prompt: _Optional[str] = ..., budget: _Optional[_Union[BudgetSettings, _Mapping]] = ..., message_count: _Optional[int] = ..., total_tokens: _Optional[int] = ..., summary_count: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., newest_task_id: _Optional[str] = ...) -> None: ...

class CreateSessionRequest(_message.Message):
    __slots__ = ("session_id", "agent_id", "goal", "sub_goals", "system_prompt", "budget", "goal_message_id", "build_budget_tokens")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    GOAL_FIELD_NUMBER: _ClassVar[int]
    SUB_GOALS_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROMPT_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    GOAL_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    BUILD_BUDGET_TOKENS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    agent_id: str
    goal: str
    sub_goals: _containers.RepeatedScalarFieldContainer[str]
    system_prompt: str
    budget: BudgetSettings
    goal_message_id: str
    build_budget_tokens: int
    def __init__(self, session_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., goal: _Optional[str] = ..., sub_goals: _Optional[_Iterable[str]] = ..., system_prompt: _Optional[str] = ..., budget: _Optional[_Union[BudgetSettings, _Mapping]] = ..., goal_message_id: _Optional[str] = ..., build_budget_tokens: _Optional[int] = ...) -> None: ...

class CreateSessionResponse(_message.Message):
    __slots__ = ("session", "goal_message")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    GOAL_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    session: Session
    goal_message: AppendMessageResponse
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ..., goal_message: _Optional[_Union[AppendMessageResponse, _Mapping]] = ...) -> None: ...

class GetSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class GetSessionResponse(_message.Message):
    __slots__ = ("session", "entities")
    class EntitiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SESSION_FIELD_NUMBER: _ClassVar[int]
    ENTITIES_FIELD_NUMBER: _ClassVar[int]
    session: Session
    entities: _containers.ScalarMap[str, str]
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ..., entities: _Optional[_Mapping[str, str]] = ...) -> None: ...

class AppendMessageRequest(_message.Message):
    __slots__ = ("session_id", "message", "client_message_id", "build_budget_tokens", "following_results")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CLIENT_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    BUILD_BUDGET_TOKENS_FIELD_NUMBER: _ClassVar[int]
    FOLLOWING_RESULTS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    message: _common_pb2.Message
    client_message_id: str
    build_budget_tokens: int
    following_results: _containers.RepeatedCompositeFieldContainer[_common_pb2.ToolResult]
    def __init__(self, session_id: _Optional[str] = ..., message: _Optional[_Union[_common_pb2.Message, _Mapping]] = ..., client_message_id: _Optional[str] = ..., build_budget_tokens: _Optional[int] = ..., following_results: _Optional[_Iterable[_Union[_common_pb2.ToolResult, _Mapping]]] = ...) -> None: ...

class AppendMessageResponse(_message.Message):
    __slots__ = ("index", "token_count", "already_appended", "view", "results")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    ALREADY_APPENDED_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    index: int
    token_count: int
    already_appended: bool
    view: ContextView
    results: _containers.RepeatedCompositeFieldContainer[AppendToolResultResponse]
    def __init__(self, index: _Optional[int] = ..., token_count: _Optional[int] = ..., already_appended: _Optional[bool] = ..., view: _Optional[_Union[ContextView, _Mapping]] = ..., results: _Optional[_Iterable[_Union[AppendToolResultResponse, _Mapping]]] = ...) -> None: ...

class AppendToolResultRequest(_message.Message):
    __slots__ = ("session_id", "result", "build_budget_tokens")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    BUILD_BUDGET_TOKENS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    result: _common_pb2.ToolResult
    build_budget_tokens: int
    def __init__(self, session_id: _Optional[str] = ..., result: _Optional[_Union[_common_pb2.ToolResult, _Mapping]] = ..., build_budget_tokens: _Optional[int] = ...) -> None: ...

class AppendToolResultResponse(_message.Message):
    __slots__ = ("index", "token_count", "ref", "already_appended", "view")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    REF_FIELD_NUMBER: _ClassVar[int]
    ALREADY_APPENDED_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    index: int
    token_count: int
    ref: _common_pb2.PayloadRef
    already_appended: bool
    view: ContextView
    def __init__(self, index: _Optional[int] = ..., token_count: _Optional[int] = ..., ref: _Optional[_Union[_common_pb2.PayloadRef, _Mapping]] = ..., already_appended: _Optional[bool] = ..., view: _Optional[_Union[ContextView, _Mapping]] = ...) -> None: ...

class GetToolResultRequest(_message.Message):
    __slots__ = ("session_id", "tool_call_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    tool_call_id: str
    def __init__(self, session_id: _Optional[str] = ..., tool_call_id: _Optional[str] = ...) -> None: ...

class GetToolResultResponse(_message.Message):
    __slots__ = ("result", "index", "token_count")
    RESULT_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    result: _common_pb2.ToolResult
    index: int
    token_count: int
    def __init__(self, result: _Optional[_Union[_common_pb2.ToolResult, _Mapping]] = ..., index: _Optional[int] = ..., token_count: _Optional[int] = ...) -> None: ...

class ContextBlock(_message.Message):
    __slots__ = ("kind", "tokens", "budget_tokens", "message_count", "text")
    KIND_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    BUDGET_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    kind: ContextBlockKind
    tokens: int
    budget_tokens: int
    message_count: int
    text: str
    def __init__(self, kind: _Optional[_Union[ContextBlockKind, str]] = ..., tokens: _Optional[int] = ..., budget_tokens: _Optional[int] = ..., message_count: _Optional[int] = ..., text: _Optional[str] = ...) -> None: ...

class ContextView(_message.Message):
    __slots__ = ("messages", "blocks", "total_tokens", "budget_tokens", "summarized_messages", "dropped_messages", "compacted", "debug_text")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    BUDGET_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SUMMARIZED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    DROPPED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    COMPACTED_FIELD_NUMBER: _ClassVar[int]
    DEBUG_TEXT_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_common_pb2.Message]
    blocks: _containers.RepeatedCompositeFieldContainer[ContextBlock]
    total_tokens: int
    budget_tokens: int
    summarized_messages: int
    dropped_messages: int
    compacted: bool
    debug_text: str
    def __init__(self, messages: _Optional[_Iterable[_Union[_common_pb2.Message, _Mapping]]] = ..., blocks: _Optional[_Iterable[_Union[ContextBlock, _Mapping]]] = ..., total_tokens: _Optional[int] = ..., budget_tokens: _Optional[int] = ..., summarized_messages: _Optional[int] = ..., dropped_messages: _Optional[int] = ..., compacted: _Optional[bool] = ..., debug_text: _Optional[str] = ...) -> None: ...

class BuildContextRequest(_message.Message):
    __slots__ = ("session_id", "budget_tokens", "debug")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    BUDGET_TOKENS_FIELD_NUMBER: _ClassVar[int]
    DEBUG_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    budget_tokens: int
    debug: bool
    def __init__(self, session_id: _Optional[str] = ..., budget_tokens: _Optional[int] = ..., debug: _Optional[bool] = ...) -> None: ...

class BuildContextResponse(_message.Message):
    __slots__ = ("view",)
    VIEW_FIELD_NUMBER: _ClassVar[int]
    view: ContextView
    def __init__(self, view: _Optional[_Union[ContextView, _Mapping]] = ...) -> None: ...

class LineRange(_message.Message):
    __slots__ = ("start", "end")
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    start: int
    end: int
    def __init__(self, start: _Optional[int] = ..., end: _Optional[int] = ...) -> None: ...

class ByteRange(_message.Message):
    __slots__ = ("start", "end")
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    start: int
    end: int
    def __init__(self, start: _Optional[int] = ..., end: _Optional[int] = ...) -> None: ...

class GetPayloadRequest(_message.Message):
    __slots__ = ("session_id", "ref_id", "json_path", "line_range", "byte_range")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REF_ID_FIELD_NUMBER: _ClassVar[int]
    JSON_PATH_FIELD_NUMBER: _ClassVar[int]
    LINE_RANGE_FIELD_NUMBER: _ClassVar[int]
    BYTE_RANGE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    ref_id: str
    json_path: str
    line_range: LineRange
    byte_range: ByteRange
    def __init__(self, session_id: _Optional[str] = ..., ref_id: _Optional[str] = ..., json_path: _Optional[str] = ..., line_range: _Optional[_Union[LineRange, _Mapping]] = ..., byte_range: _Optional[_Union[ByteRange, _Mapping]] = ...) -> None: ...

class GetPayloadResponse(_message.Message):
    __slots__ = ("ref", "content", "partial")
    REF_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FIELD_NUMBER: _ClassVar[int]
    ref: _common_pb2.PayloadRef
    content: bytes
    partial: bool
    def __init__(self, ref: _Optional[_Union[_common_pb2.PayloadRef, _Mapping]] = ..., content: _Optional[bytes] = ..., partial: _Optional[bool] = ...) -> None: ...

class CompactRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class CompactResponse(_message.Message):
    __slots__ = ("summarized_messages", "summary")
    SUMMARIZED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    summarized_messages: int
    summary: Summary
    def __init__(self, summarized_messages: _Optional[int] = ..., summary: _Optional[_Union[Summary, _Mapping]] = ...) -> None: ...

class Summary(_message.Message):
    __slots__ = ("user_intent", "key_data", "open_questions", "actions_taken", "first_index", "last_index", "summarizer", "token_count")
    USER_INTENT_FIELD_NUMBER: _ClassVar[int]
    KEY_DATA_FIELD_NUMBER: _ClassVar[int]
    OPEN_QUESTIONS_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_TAKEN_FIELD_NUMBER: _ClassVar[int]
    FIRST_INDEX_FIELD_NUMBER: _ClassVar[int]
    LAST_INDEX_FIELD_NUMBER: _ClassVar[int]
    SUMMARIZER_FIELD_NUMBER: _ClassVar[int]
    TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    user_intent: str
    key_data: _containers.RepeatedScalarFieldContainer[str]
    open_questions: _containers.RepeatedScalarFieldContainer[str]
    actions_taken: _containers.RepeatedScalarFieldContainer[str]
    first_index: int
    last_index: int
    summarizer: str
    token_count: int
    def __init__(self, user_intent: _Optional[str] = ..., key_data: _Optional[_Iterable[str]] = ..., open_questions: _Optional[_Iterable[str]] = ..., actions_taken: _Optional[_Iterable[str]] = ..., first_index: _Optional[int] = ..., last_index: _Optional[int] = ..., summarizer: _Optional[str] = ..., token_count: _Optional[int] = ...) -> None: ...

class DeleteSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class DeleteSessionResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class AttachTaskRequest(_message.Message):
    __slots__ = ("session_id", "task_id", "agent_id", "expected_task_id", "expected_generation")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_TASK_ID_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_GENERATION_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    task_id: str
    agent_id: str
    expected_task_id: str
    expected_generation: int
    def __init__(self, session_id: _Optional[str] = ..., task_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., expected_task_id: _Optional[str] = ..., expected_generation: _Optional[int] = ...) -> None: ...

class AttachTaskResponse(_message.Message):
    __slots__ = ("attached", "newest_task_id", "generation", "newest_age")
    ATTACHED_FIELD_NUMBER: _ClassVar[int]
    NEWEST_TASK_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    NEWEST_AGE_FIELD_NUMBER: _ClassVar[int]
    attached: bool
    newest_task_id: str
    generation: int
    newest_age: _duration_pb2.Duration
    def __init__(self, attached: _Optional[bool] = ..., newest_task_id: _Optional[str] = ..., generation: _Optional[int] = ..., newest_age: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class HandoffCitation(_message.Message):
    __slots__ = ("ref_id", "message_index", "json_path", "line_range")
    REF_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_INDEX_FIELD_NUMBER: _ClassVar[int]
    JSON_PATH_FIELD_NUMBER: _ClassVar[int]
    LINE_RANGE_FIELD_NUMBER: _ClassVar[int]
    ref_id: str
    message_index: int
    json_path: str
    line_range: LineRange
    def __init__(self, ref_id: _Optional[str] = ..., message_index: _Optional[int] = ..., json_path: _Optional[str] = ..., line_range: _Optional[_Union[LineRange, _Mapping]] = ...) -> None: ...

class HandoffFact(_message.Message):
    __slots__ = ("statement", "value", "citation", "basis")
    STATEMENT_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    CITATION_FIELD_NUMBER: _ClassVar[int]
    BASIS_FIELD_NUMBER: _ClassVar[int]
    statement: str
    value: str
    citation: HandoffCitation
    basis: str
    def __init__(self, statement: _Optional[str] = ..., value: _Optional[str] = ..., citation: _Optional[_Union[HandoffCitation, _Mapping]] = ..., basis: _Optional[str] = ...) -> None: ...

class HandoffBrief(_message.Message):
    __slots__ = ("summary", "facts", "open_questions", "risks", "artifacts")
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    FACTS_FIELD_NUMBER: _ClassVar[int]
    OPEN_QUESTIONS_FIELD_NUMBER: _ClassVar[int]
    RISKS_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    summary: str
    facts: _containers.RepeatedCompositeFieldContainer[HandoffFact]
    open_questions: _containers.RepeatedScalarFieldContainer[str]
    risks: _containers.RepeatedScalarFieldContainer[str]
    artifacts: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, summary: _Optional[str] = ..., facts: _Optional[_Iterable[_Union[HandoffFact, _Mapping]]] = ..., open_questions: _Optional[_Iterable[str]] = ..., risks: _Optional[_Iterable[str]] = ..., artifacts: _Optional[_Iterable[str]] = ...) -> None: ...

class BuildHandoffRequest(_message.Message):
    __slots__ = ("session_id", "child_session_id", "brief", "max_tokens")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CHILD_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    BRIEF_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    child_session_id: str
    brief: HandoffBrief
    max_tokens: int
    def __init__(self, session_id: _Optional[str] = ..., child_session_id: _Optional[str] = ..., brief: _Optional[_Union[HandoffBrief, _Mapping]] = ..., max_tokens: _Optional[int] = ...) -> None: ...

class CheckedHandoffFact(_message.Message):
    __slots__ = ("fact", "kind", "demotion_reason", "detail", "shown")
    FACT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    DEMOTION_REASON_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    SHOWN_FIELD_NUMBER: _ClassVar[int]
    fact: HandoffFact
    kind: HandoffFactKind
    demotion_reason: HandoffDemotionReason
    detail: str
    shown: bool
    def __init__(self, fact: _Optional[_Union[HandoffFact, _Mapping]] = ..., kind: _Optional[_Union[HandoffFactKind, str]] = ..., demotion_reason: _Optional[_Union[HandoffDemotionReason, str]] = ..., detail: _Optional[str] = ..., shown: _Optional[bool] = ...) -> None: ...

class BuildHandoffResponse(_message.Message):
    __slots__ = ("text", "token_count", "facts", "confirmed_count", "inferred_count", "demoted_count", "record_ref_id", "user_constraints", "granted_ref_ids", "missing_artifacts", "omitted_count", "summary_clipped")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    FACTS_FIELD_NUMBER: _ClassVar[int]
    CONFIRMED_COUNT_FIELD_NUMBER: _ClassVar[int]
    INFERRED_COUNT_FIELD_NUMBER: _ClassVar[int]
    DEMOTED_COUNT_FIELD_NUMBER: _ClassVar[int]
    RECORD_REF_ID_FIELD_NUMBER: _ClassVar[int]
    USER_CONSTRAINTS_FIELD_NUMBER: _ClassVar[int]
    GRANTED_REF_IDS_FIELD_NUMBER: _ClassVar[int]
    MISSING_ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    OMITTED_COUNT_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_CLIPPED_FIELD_NUMBER: _ClassVar[int]
    text: str
    token_count: int
    facts: _containers.RepeatedCompositeFieldContainer[CheckedHandoffFact]
    confirmed_count: int
    inferred_count: int
    demoted_count: int
    record_ref_id: str
    user_constraints: _containers.RepeatedScalarFieldContainer[str]
    granted_ref_ids: _containers.RepeatedScalarFieldContainer[str]
    missing_artifacts: _containers.RepeatedScalarFieldContainer[str]
    omitted_count: int
    summary_clipped: bool
    def __init__(self, text: _Optional[str] = ..., token_count: _Optional[int] = ..., facts: _Optional[_Iterable[_Union[CheckedHandoffFact, _Mapping]]] = ..., confirmed_count: _Optional[int] = ..., inferred_count: _Optional[int] = ..., demoted_count: _Optional[int] = ..., record_ref_id: _Optional[str] = ..., user_constraints: _Optional[_Iterable[str]] = ..., granted_ref_ids: _Optional[_Iterable[str]] = ..., missing_artifacts: _Optional[_Iterable[str]] = ..., omitted_count: _Optional[int] = ..., summary_clipped: _Optional[bool] = ...) -> None: ...

class MemorySubject(_message.Message):
    __slots__ = ("scope", "id")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    scope: MemoryScope
    id: str
    def __init__(self, scope: _Optional[_Union[MemoryScope, str]] = ..., id: _Optional[str] = ...) -> None: ...

class MemorySource(_message.Message):
    __slots__ = ("session_id", "message_index", "task_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_INDEX_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    message_index: int
    task_id: str
    def __init__(self, session_id: _Optional[str] = ..., message_index: _Optional[int] = ..., task_id: _Optional[str] = ...) -> None: ...

class MemoryRecord(_message.Message):
    __slots__ = ("memory_id", "subject", "text", "kind", "source", "create_time", "expire_time", "superseded_by")
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDED_BY_FIELD_NUMBER: _ClassVar[int]
    memory_id: str
    subject: MemorySubject
    text: str
    kind: MemoryKind
    source: MemorySource
    create_time: _timestamp_pb2.Timestamp
    expire_time: _timestamp_pb2.Timestamp
    superseded_by: str
    def __init__(self, memory_id: _Optional[str] = ..., subject: _Optional[_Union[MemorySubject, _Mapping]] = ..., text: _Optional[str] = ..., kind: _Optional[_Union[MemoryKind, str]] = ..., source: _Optional[_Union[MemorySource, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., superseded_by: _Optional[str] = ...) -> None: ...

class RememberRequest(_message.Message):
    __slots__ = ("subject", "text", "kind", "source", "ttl")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    subject: MemorySubject
    text: str
    kind: MemoryKind
    source: MemorySource
    ttl: _duration_pb2.Duration
    def __init__(self, subject: _Optional[_Union[MemorySubject, _Mapping]] = ..., text: _Optional[str] = ..., kind: _Optional[_Union[MemoryKind, str]] = ..., source: _Optional[_Union[MemorySource, _Mapping]] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class RememberResponse(_message.Message):
    __slots__ = ("record", "already_remembered", "superseded_ids")
    RECORD_FIELD_NUMBER: _ClassVar[int]
    ALREADY_REMEMBERED_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDED_IDS_FIELD_NUMBER: _ClassVar[int]
    record: MemoryRecord
    already_remembered: bool
    superseded_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, record: _Optional[_Union[MemoryRecord, _Mapping]] = ..., already_remembered: _Optional[bool] = ..., superseded_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class ListMemoriesRequest(_message.Message):
    __slots__ = ("subject", "include_inactive")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_INACTIVE_FIELD_NUMBER: _ClassVar[int]
    subject: MemorySubject
    include_inactive: bool
    def __init__(self, subject: _Optional[_Union[MemorySubject, _Mapping]] = ..., include_inactive: _Optional[bool] = ...) -> None: ...

class ListMemoriesResponse(_message.Message):
    __slots__ = ("records",)
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[MemoryRecord]
    def __init__(self, records: _Optional[_Iterable[_Union[MemoryRecord, _Mapping]]] = ...) -> None: ...

class ForgetRequest(_message.Message):
    __slots__ = ("memory_id", "subject")
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    memory_id: str
    subject: MemorySubject
    def __init__(self, memory_id: _Optional[str] = ..., subject: _Optional[_Union[MemorySubject, _Mapping]] = ...) -> None: ...

class ForgetResponse(_message.Message):
    __slots__ = ("deleted_count",)
    DELETED_COUNT_FIELD_NUMBER: _ClassVar[int]
    deleted_count: int
    def __init__(self, deleted_count: _Optional[int] = ...) -> None: ...
