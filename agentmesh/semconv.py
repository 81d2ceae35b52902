"""Names that spans, logs and baggage share: our own attributes and the OTel semantic conventions.

Domain code tags its spans with these; the RPC edge (`agentmesh.rpc.telemetry`) and the CLI's trace
view read them. Plain strings only: no grpc, no OTel SDK.
"""

from __future__ import annotations

import re

__all__ = [
    "ATTR_ERROR_CLASS",
    "ATTR_ERROR_CODE",
    "ATTR_REQUEST_ID",
    "ATTR_TASK_ID",
    "BAGGAGE_REQUEST_ID",
    "ERROR_TYPE",
    "GEN_AI_AGENT_ID",
    "GEN_AI_AGENT_NAME",
    "GEN_AI_CONVERSATION_ID",
    "GEN_AI_OPERATION_NAME",
    "GEN_AI_PROVIDER_NAME",
    "GEN_AI_REQUEST_MAX_TOKENS",
    "GEN_AI_REQUEST_MODEL",
    "GEN_AI_REQUEST_TEMPERATURE",
    "GEN_AI_RESPONSE_FINISH_REASONS",
    "GEN_AI_RESPONSE_MODEL",
    "GEN_AI_TOOL_CALL_ID",
    "GEN_AI_TOOL_NAME",
    "GEN_AI_USAGE_INPUT_TOKENS",
    "GEN_AI_USAGE_OUTPUT_TOKENS",
    "UNTRACED_PREFIXES",
    "is_valid_request_id",
    "traced_method",
]

ATTR_REQUEST_ID = "agentmesh.request_id"
BAGGAGE_REQUEST_ID = ATTR_REQUEST_ID
"""The W3C baggage key carrying the request id (same name as the span attribute)."""
ATTR_TASK_ID = "agentmesh.task_id"
ATTR_ERROR_CODE = "agentmesh.error.code"
ERROR_TYPE = "error.type"
"""OTel: what kind of failure ended a failed span (our ErrorCode name, a gRPC status name, an HTTP status
code, an exception's class); every span with an ERROR status has it."""
ATTR_ERROR_CLASS = "agentmesh.error.class"

# OTel GenAI semantic conventions (https://opentelemetry.io/docs/specs/semconv/gen-ai/).
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
"""`chat`, `execute_tool`, `invoke_agent`, ..."""
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
GEN_AI_REQUEST_TEMPERATURE = "gen_ai.request.temperature"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_AGENT_ID = "gen_ai.agent.id"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"

UNTRACED_PREFIXES = ("/grpc.health.v1.", "/grpc.reflection.")
"""Probes and reflection are not traced: a k8s probe every few seconds would drown the real spans."""

# An incoming request id is copied into logs and spans; anything else is replaced, so a caller cannot
# inject log lines or unbounded attribute values.
_REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")


def is_valid_request_id(value: str) -> bool:
    """Whether an incoming request id is safe to keep (short, printable, no separators)."""
    return bool(_REQUEST_ID_RE.match(value))


def traced_method(method: str | bytes) -> bool:
    """Whether calls of this full method name (`/pkg.Service/Method`) get spans."""
    name = method.decode() if isinstance(method, bytes) else method
    return not name.startswith(UNTRACED_PREFIXES)
