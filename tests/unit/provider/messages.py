"""Tool messages as context_svc hands them to a model: content rendered for the model, plus the typed error."""

from __future__ import annotations

from typing import Any

from agentmesh.chat import Role, tool_error_text
from agentmesh.errors import AgentmeshError
from provider_svc.models.base import Message


def tool_message(result: str | AgentmeshError, **fields: Any) -> Message:
    """A ROLE_TOOL message: a plain result, or a failed call's error (rendered and typed)."""
    if isinstance(result, AgentmeshError):
        text = tool_error_text(result, str(fields.get("name", "")))
        return Message(Role.TOOL, text, tool_error=result, **fields)
    return Message(Role.TOOL, result, **fields)
