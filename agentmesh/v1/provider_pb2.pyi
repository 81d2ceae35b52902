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

class ToolChoiceMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_CHOICE_MODE_UNSPECIFIED: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_AUTO: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_NONE: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_REQUIRED: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_TOOL: _ClassVar[ToolChoiceMode]

class FinishReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FINISH_REASON_UNSPECIFIED: _ClassVar[FinishReason]
    FINISH_REASON_STOP: _ClassVar[FinishReason]
    FINISH_REASON_LENGTH: _ClassVar[FinishReason]
    FINISH_REASON_TOOL_CALLS: _ClassVar[FinishReason]
    FINISH_REASON_CONTENT_FILTER: _ClassVar[FinishReason]

class SpendGroup(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SPEND_GROUP_UNSPECIFIED: _ClassVar[SpendGroup]
    SPEND_GROUP_DAY: _ClassVar[SpendGroup]
    SPEND_GROUP_AGENT: _ClassVar[SpendGroup]
    SPEND_GROUP_API_KEY: _ClassVar[SpendGroup]
    SPEND_GROUP_MODEL: _ClassVar[SpendGroup]
    SPEND_GROUP_TASK_TAG: _ClassVar[SpendGroup]

class BudgetScopeKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BUDGET_SCOPE_KIND_UNSPECIFIED: _ClassVar[BudgetScopeKind]
    BUDGET_SCOPE_KIND_API_KEY: _ClassVar[BudgetScopeKind]
    BUDGET_SCOPE_KIND_AGENT: _ClassVar[BudgetScopeKind]
    BUDGET_SCOPE_KIND_TENANT: _ClassVar[BudgetScopeKind]
TOOL_CHOICE_MODE_UNSPECIFIED: ToolChoiceMode
TOOL_CHOICE_MODE_AUTO: ToolChoiceMode
TOOL_CHOICE_MODE_NONE: ToolChoiceMode
TOOL_CHOICE_MODE_REQUIRED: ToolChoiceMode
TOOL_CHOICE_MODE_TOOL: ToolChoiceMode
FINISH_REASON_UNSPECIFIED: FinishReason
FINISH_REASON_STOP: FinishReason
FINISH_REASON_LENGTH: FinishReason
FINISH_REASON_TOOL_CALLS: FinishReason
FINISH_REASON_CONTENT_FILTER: FinishReason
SPEND_GROUP_UNSPECIFIED: SpendGroup
SPEND_GROUP_DAY: SpendGroup
SPEND_GROUP_AGENT: SpendGroup
SPEND_GROUP_API_KEY: SpendGroup
SPEND_GROUP_MODEL: SpendGroup
SPEND_GROUP_TASK_TAG: SpendGroup
BUDGET_SCOPE_KIND_UNSPECIFIED: BudgetScopeKind
BUDGET_SCOPE_KIND_API_KEY: BudgetScopeKind
BUDGET_SCOPE_KIND_AGENT: BudgetScopeKind
BUDGET_SCOPE_KIND_TENANT: BudgetScopeKind

class ToolChoice(_message.Message):
    __slots__ = ("mode", "tool_name")
    MODE_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    mode: ToolChoiceMode
    tool_name: str
    def __init__(self, mode: _Optional[_Union[ToolChoiceMode, str]] = ..., tool_name: _Optional[str] = ...) -> None: ...

class SamplingParams(_message.Message):
    __slots__ = ("temperature", "top_p", "max_tokens", "stop", "seed")
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    temperature: float
    top_p: float
    max_tokens: int
    stop: _containers.RepeatedScalarFieldContainer[str]
    seed: int
    def __init__(self, temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., max_tokens: _Optional[int] = ..., stop: _Optional[_Iterable[str]] = ..., seed: _Optional[int] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("model", "task_tag", "messages", "tools", "tool_choice", "sampling", "response_schema_json", "agent_id", "include_request")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TASK_TAG_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_REQUEST_FIELD_NUMBER: _ClassVar[int]
    model: str
    task_tag: str
    messages: _containers.RepeatedCompositeFieldContainer[_common_pb2.Message]
    tools: _containers.RepeatedCompositeFieldContainer[_common_pb2.ToolSpec]
    tool_choice: ToolChoice
    sampling: SamplingParams
    response_schema_json: str
    agent_id: str
    include_request: bool
    def __init__(self, model: _Optional[str] = ..., task_tag: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[_common_pb2.Message, _Mapping]]] = ..., tools: _Optional[_Iterable[_Union[_common_pb2.ToolSpec, _Mapping]]] = ..., tool_choice: _Optional[_Union[ToolChoice, _Mapping]] = ..., sampling: _Optional[_Union[SamplingParams, _Mapping]] = ..., response_schema_json: _Optional[str] = ..., agent_id: _Optional[str] = ..., include_request: _Optional[bool] = ...) -> None: ...

class GenerateStreamRequest(_message.Message):
    __slots__ = ("request",)
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    request: GenerateRequest
    def __init__(self, request: _Optional[_Union[GenerateRequest, _Mapping]] = ...) -> None: ...

class Attempt(_message.Message):
    __slots__ = ("model", "error", "http_status", "duration")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    HTTP_STATUS_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    model: str
    error: _common_pb2.ErrorDetail
    http_status: int
    duration: _duration_pb2.Duration
    def __init__(self, model: _Optional[str] = ..., error: _Optional[_Union[_common_pb2.ErrorDetail, _Mapping]] = ..., http_status: _Optional[int] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class GenerateResponse(_message.Message):
    __slots__ = ("message", "finish_reason", "usage", "model", "cost_usd", "attempts", "latency", "request_json", "request_format", "request_redacted")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_JSON_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FORMAT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_REDACTED_FIELD_NUMBER: _ClassVar[int]
    message: _common_pb2.Message
    finish_reason: FinishReason
    usage: _common_pb2.TokenUsage
    model: str
    cost_usd: float
    attempts: _containers.RepeatedCompositeFieldContainer[Attempt]
    latency: _duration_pb2.Duration
    request_json: str
    request_format: str
    request_redacted: bool
    def __init__(self, message: _Optional[_Union[_common_pb2.Message, _Mapping]] = ..., finish_reason: _Optional[_Union[FinishReason, str]] = ..., usage: _Optional[_Union[_common_pb2.TokenUsage, _Mapping]] = ..., model: _Optional[str] = ..., cost_usd: _Optional[float] = ..., attempts: _Optional[_Iterable[_Union[Attempt, _Mapping]]] = ..., latency: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., request_json: _Optional[str] = ..., request_format: _Optional[str] = ..., request_redacted: _Optional[bool] = ...) -> None: ...

class ToolCallDelta(_message.Message):
    __slots__ = ("index", "id", "name", "arguments_delta")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_DELTA_FIELD_NUMBER: _ClassVar[int]
    index: int
    id: str
    name: str
    arguments_delta: str
    def __init__(self, index: _Optional[int] = ..., id: _Optional[str] = ..., name: _Optional[str] = ..., arguments_delta: _Optional[str] = ...) -> None: ...

class GenerateStreamResponse(_message.Message):
    __slots__ = ("text_delta", "tool_call_delta", "final")
    TEXT_DELTA_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_DELTA_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    text_delta: str
    tool_call_delta: ToolCallDelta
    final: GenerateResponse
    def __init__(self, text_delta: _Optional[str] = ..., tool_call_delta: _Optional[_Union[ToolCallDelta, _Mapping]] = ..., final: _Optional[_Union[GenerateResponse, _Mapping]] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("name", "provider", "provider_type", "aliases", "input_price_per_mtok", "output_price_per_mtok", "unavailable", "unavailable_reason", "tags")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_TYPE_FIELD_NUMBER: _ClassVar[int]
    ALIASES_FIELD_NUMBER: _ClassVar[int]
    INPUT_PRICE_PER_MTOK_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_PRICE_PER_MTOK_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_REASON_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    name: str
    provider: str
    provider_type: str
    aliases: _containers.RepeatedScalarFieldContainer[str]
    input_price_per_mtok: float
    output_price_per_mtok: float
    unavailable: bool
    unavailable_reason: str
    tags: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., provider: _Optional[str] = ..., provider_type: _Optional[str] = ..., aliases: _Optional[_Iterable[str]] = ..., input_price_per_mtok: _Optional[float] = ..., output_price_per_mtok: _Optional[float] = ..., unavailable: _Optional[bool] = ..., unavailable_reason: _Optional[str] = ..., tags: _Optional[_Iterable[str]] = ...) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models", "routes")
    class RoutesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MODELS_FIELD_NUMBER: _ClassVar[int]
    ROUTES_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelInfo]
    routes: _containers.ScalarMap[str, str]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelInfo, _Mapping]]] = ..., routes: _Optional[_Mapping[str, str]] = ...) -> None: ...

class GetUsageRequest(_message.Message):
    __slots__ = ("agent_id", "start_time", "end_time")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    def __init__(self, agent_id: _Optional[str] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class UsageRow(_message.Message):
    __slots__ = ("agent_id", "provider", "model", "day", "calls", "usage", "cost_usd", "total_latency", "task_tag", "api_key_id")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DAY_FIELD_NUMBER: _ClassVar[int]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    TOTAL_LATENCY_FIELD_NUMBER: _ClassVar[int]
    TASK_TAG_FIELD_NUMBER: _ClassVar[int]
    API_KEY_ID_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    provider: str
    model: str
    day: str
    calls: int
    usage: _common_pb2.TokenUsage
    cost_usd: float
    total_latency: _duration_pb2.Duration
    task_tag: str
    api_key_id: str
    def __init__(self, agent_id: _Optional[str] = ..., provider: _Optional[str] = ..., model: _Optional[str] = ..., day: _Optional[str] = ..., calls: _Optional[int] = ..., usage: _Optional[_Union[_common_pb2.TokenUsage, _Mapping]] = ..., cost_usd: _Optional[float] = ..., total_latency: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., task_tag: _Optional[str] = ..., api_key_id: _Optional[str] = ...) -> None: ...

class GetUsageResponse(_message.Message):
    __slots__ = ("rows",)
    ROWS_FIELD_NUMBER: _ClassVar[int]
    rows: _containers.RepeatedCompositeFieldContainer[UsageRow]
    def __init__(self, rows: _Optional[_Iterable[_Union[UsageRow, _Mapping]]] = ...) -> None: ...

class GetSpendSummaryRequest(_message.Message):
    __slots__ = ("group_by", "agent_id", "api_key_id", "model", "start_time", "end_time", "page_size", "page_token")
    GROUP_BY_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    API_KEY_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    group_by: SpendGroup
    agent_id: str
    api_key_id: str
    model: str
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    page_size: int
    page_token: str
    def __init__(self, group_by: _Optional[_Union[SpendGroup, str]] = ..., agent_id: _Optional[str] = ..., api_key_id: _Optional[str] = ..., model: _Optional[str] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class SpendGroupRow(_message.Message):
    __slots__ = ("key", "calls", "usage", "cost_usd", "total_latency")
    KEY_FIELD_NUMBER: _ClassVar[int]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    TOTAL_LATENCY_FIELD_NUMBER: _ClassVar[int]
    key: str
    calls: int
    usage: _common_pb2.TokenUsage
    cost_usd: float
    total_latency: _duration_pb2.Duration
    def __init__(self, key: _Optional[str] = ..., calls: _Optional[int] = ..., usage: _Optional[_Union[_common_pb2.TokenUsage, _Mapping]] = ..., cost_usd: _Optional[float] = ..., total_latency: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class GetSpendSummaryResponse(_message.Message):
    __slots__ = ("rows", "total", "next_page_token", "total_groups")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_GROUPS_FIELD_NUMBER: _ClassVar[int]
    rows: _containers.RepeatedCompositeFieldContainer[SpendGroupRow]
    total: SpendGroupRow
    next_page_token: str
    total_groups: int
    def __init__(self, rows: _Optional[_Iterable[_Union[SpendGroupRow, _Mapping]]] = ..., total: _Optional[_Union[SpendGroupRow, _Mapping]] = ..., next_page_token: _Optional[str] = ..., total_groups: _Optional[int] = ...) -> None: ...

class ListBudgetsRequest(_message.Message):
    __slots__ = ("kind", "page_size", "page_token")
    KIND_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    kind: BudgetScopeKind
    page_size: int
    page_token: str
    def __init__(self, kind: _Optional[_Union[BudgetScopeKind, str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class Budget(_message.Message):
    __slots__ = ("kind", "scope", "name", "agent_id", "budget_usd_day", "budget_usd_month", "spent_day_usd", "spent_month_usd", "reserved_usd", "rpm", "tpm", "revoked", "expire_time")
    KIND_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    BUDGET_USD_DAY_FIELD_NUMBER: _ClassVar[int]
    BUDGET_USD_MONTH_FIELD_NUMBER: _ClassVar[int]
    SPENT_DAY_USD_FIELD_NUMBER: _ClassVar[int]
    SPENT_MONTH_USD_FIELD_NUMBER: _ClassVar[int]
    RESERVED_USD_FIELD_NUMBER: _ClassVar[int]
    RPM_FIELD_NUMBER: _ClassVar[int]
    TPM_FIELD_NUMBER: _ClassVar[int]
    REVOKED_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    kind: BudgetScopeKind
    scope: str
    name: str
    agent_id: str
    budget_usd_day: float
    budget_usd_month: float
    spent_day_usd: float
    spent_month_usd: float
    reserved_usd: float
    rpm: int
    tpm: int
    revoked: bool
    expire_time: _timestamp_pb2.Timestamp
    def __init__(self, kind: _Optional[_Union[BudgetScopeKind, str]] = ..., scope: _Optional[str] = ..., name: _Optional[str] = ..., agent_id: _Optional[str] = ..., budget_usd_day: _Optional[float] = ..., budget_usd_month: _Optional[float] = ..., spent_day_usd: _Optional[float] = ..., spent_month_usd: _Optional[float] = ..., reserved_usd: _Optional[float] = ..., rpm: _Optional[int] = ..., tpm: _Optional[int] = ..., revoked: _Optional[bool] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListBudgetsResponse(_message.Message):
    __slots__ = ("budgets", "next_page_token", "day", "month")
    BUDGETS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    DAY_FIELD_NUMBER: _ClassVar[int]
    MONTH_FIELD_NUMBER: _ClassVar[int]
    budgets: _containers.RepeatedCompositeFieldContainer[Budget]
    next_page_token: str
    day: str
    month: str
    def __init__(self, budgets: _Optional[_Iterable[_Union[Budget, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., day: _Optional[str] = ..., month: _Optional[str] = ...) -> None: ...

class EmbedRequest(_message.Message):
    __slots__ = ("model", "inputs", "agent_id")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    model: str
    inputs: _containers.RepeatedScalarFieldContainer[str]
    agent_id: str
    def __init__(self, model: _Optional[str] = ..., inputs: _Optional[_Iterable[str]] = ..., agent_id: _Optional[str] = ...) -> None: ...

class Embedding(_message.Message):
    __slots__ = ("values", "index", "cached")
    VALUES_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    CACHED_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    index: int
    cached: bool
    def __init__(self, values: _Optional[_Iterable[float]] = ..., index: _Optional[int] = ..., cached: _Optional[bool] = ...) -> None: ...

class EmbedResponse(_message.Message):
    __slots__ = ("embeddings", "model", "dimensions", "usage", "cost_usd", "latency")
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    LATENCY_FIELD_NUMBER: _ClassVar[int]
    embeddings: _containers.RepeatedCompositeFieldContainer[Embedding]
    model: str
    dimensions: int
    usage: _common_pb2.TokenUsage
    cost_usd: float
    latency: _duration_pb2.Duration
    def __init__(self, embeddings: _Optional[_Iterable[_Union[Embedding, _Mapping]]] = ..., model: _Optional[str] = ..., dimensions: _Optional[int] = ..., usage: _Optional[_Union[_common_pb2.TokenUsage, _Mapping]] = ..., cost_usd: _Optional[float] = ..., latency: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...
