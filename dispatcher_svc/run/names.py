"""The names a run gives its appends and tool calls, stable across resumes (pure).

Every append names its message (a client_message_id, or the tool result's qualified tool_call_id)
and context_svc keeps it once; every ExecuteTool carries an idempotency key, and tool_svc replays it.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

from agentmesh.chat import ToolCall
from dispatcher_svc.model import ModelReply

READ_PAYLOAD_TOOL = "read_payload"
"""The built-in tool that reads offloaded payloads; offered once the task has one."""


def message_id(task_id: str, part: str) -> str:
    """The client_message_id of one of a task's appends (at most 128 characters, as context_svc wants)."""
    raw = f"{task_id}:{part}"
    return raw if len(raw) <= 128 else "m-" + hashlib.sha256(raw.encode()).hexdigest()[:40]


def qualified_call_id(task_id: str, step: int, index: int) -> str:
    """A tool call's id, unique in its session (task, step, index) and valid for every provider
    (letters, digits, `_` and `-` only): context_svc keeps one result per id."""
    return f"call_{hashlib.sha256(task_id.encode()).hexdigest()[:10]}_{step}_{index}"


def idempotency_key(task_id: str, step: int, index: int, call: ToolCall) -> str:
    """task + step.index + tool_call_id + argument hash: a resumed step replays, a new step runs."""
    call_id = "".join(ch for ch in call.id if ch.isprintable() and not ch.isspace() and ch not in "{}")[:96]
    return f"{task_id}:{step}.{index}:{call_id}:{call.arguments_sha256()[:32]}"


def qualify(reply: ModelReply, task_id: str, step: int) -> ModelReply:
    """Gives every tool call an id unique in the session (task, step, index): a model's own ids repeat
    across steps and tasks, and context_svc keeps one result per id. Done before the reply is
    checkpointed, so a resumed run uses the same ids."""
    calls = tuple(replace(call, id=qualified_call_id(task_id, step, i)) for i, call in enumerate(reply.tool_calls))
    return replace(reply, tool_calls=calls)
