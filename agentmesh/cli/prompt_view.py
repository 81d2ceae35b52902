"""`agentmesh context --task T --step N`: the provider request one step of a task sent, as sent.

Calls GetStepPrompt on the configured dispatcher with a short-lived operator token minted from the
configured auth key (like `agentmesh context <session>`). `--json` prints the request body exactly as
it was sent upstream (secrets masked); without it the body is shown for reading: the parameters
(model, sampling, tool choice, ...), the tools offered with their schemas, then every message in order
with its role, text, tool calls and tool results. Both provider formats are read: OpenAI chat
completions (the scripted model records one too) and Anthropic Messages (top-level `system`, content
blocks).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import sys
from typing import Any, TextIO

import grpc
import grpc.aio

from agentmesh.authenticator import Authenticator
from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.config import Settings
from agentmesh.rpc.channels import create_channel
from agentmesh.rpc.status import from_rpc_error
from agentmesh.v1 import dispatcher_pb2, dispatcher_pb2_grpc

__all__ = ["fetch_step_prompt", "render_step_prompt", "step_prompt_command"]

_CLI_TOKEN_TTL_S = 300
_INDENT = "    "


async def fetch_step_prompt(
    settings: Settings, task_id: str, step: int, *, token: str | None = None, timeout_s: float = 30.0
) -> dispatcher_pb2.StepPrompt:
    """GetStepPrompt of (`task_id`, `step`), called as an operator unless `token` is given."""
    if token is None:
        token = Authenticator(settings.auth, settings.environment).mint(
            subject="agentmesh-cli", roles=["operator"], ttl_s=_CLI_TOKEN_TTL_S
        )
    channel = create_channel(settings.services.endpoint("dispatcher").dial_target, settings)
    try:
        stub = dispatcher_pb2_grpc.DispatcherServiceStub(channel)  # type: ignore[no-untyped-call]
        response = await stub.GetStepPrompt(
            dispatcher_pb2.GetStepPromptRequest(task_id=task_id, step=step),
            metadata=((IDENTITY_HEADER, token),),
            timeout=timeout_s,
        )
    finally:
        await channel.close(None)
    prompt: dispatcher_pb2.StepPrompt = response.prompt
    return prompt


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _indented(text: str, depth: int = 1) -> list[str]:
    pad = _INDENT * depth
    return [pad + line for line in (text.splitlines() or [""])]


def _text_of(content: Any) -> str:
    """A content value as text: a string as is, anything else as compact JSON."""
    return content if isinstance(content, str) else _compact(content)


def _blocks(content: Any) -> list[str]:
    """The lines of a message's content: a string, or a list of blocks/parts of either format."""
    if content is None:
        return []
    if not isinstance(content, list):
        return _indented(_text_of(content))
    lines: list[str] = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            lines += _indented(block["text"])
        elif kind == "tool_use":
            lines.append(
                f"{_INDENT}tool call {block.get('id', '')}: {block.get('name', '')}({_compact(block.get('input'))})"
            )
        elif kind == "tool_result":
            lines.append(f"{_INDENT}tool result for {block.get('tool_use_id', '')}:")
            inner = block.get("content")
            lines += _blocks(inner) if isinstance(inner, list) else _indented(_text_of(inner), 2)
        else:
            lines += _indented(_compact(block))
    return lines


def _message(index: int, message: Any) -> list[str]:
    if not isinstance(message, dict):
        return [f"[{index}] {_compact(message)}"]
    role = str(message.get("role", "?"))
    extra = {k: v for k, v in message.items() if k not in ("role", "content", "tool_calls", "tool_call_id")}
    head = f"[{index}] {role}"
    if message.get("tool_call_id"):
        head += f" (result of {message['tool_call_id']})"
    if extra:
        head += f" {_compact(extra)}"
    lines = [head, *_blocks(message.get("content"))]
    for call in message.get("tool_calls") or []:
        function = call.get("function", {}) if isinstance(call, dict) else {}
        arguments = function.get("arguments", "")
        lines.append(f"{_INDENT}tool call {call.get('id', '')}: {function.get('name', '')}({_text_of(arguments)})")
    return lines


def _tool(tool: Any) -> list[str]:
    if not isinstance(tool, dict):
        return [f"{_INDENT}{_compact(tool)}"]
    inner = tool.get("function")
    function: dict[str, Any] = inner if isinstance(inner, dict) else tool  # OpenAI | Anthropic
    schema = function.get("parameters", function.get("input_schema"))
    lines = [f"{_INDENT}{function.get('name', '?')}: {function.get('description', '')}"]
    if schema is not None:
        lines.append(f"{_INDENT * 2}schema: {_compact(schema)}")
    return lines


def render_step_prompt(prompt: dispatcher_pb2.StepPrompt) -> str:
    """The request for reading: header, parameters, tools, messages."""
    when = ""
    if prompt.HasField("create_time"):
        stamp = dt.datetime.fromtimestamp(prompt.create_time.seconds, dt.UTC)
        when = f", recorded {stamp.strftime('%Y-%m-%dT%H:%M:%SZ')}"
    size = len(prompt.request_json.encode("utf-8"))
    masked = "; secrets masked" if prompt.redacted else ""
    lines = [
        f"task {prompt.task_id} step {prompt.step} (session {prompt.session_id}): "
        f"{prompt.format + ' ' if prompt.format else ''}request to {prompt.model}{when}; {size} bytes{masked}"
    ]
    try:
        body = json.loads(prompt.request_json)
    except ValueError:
        return "\n".join([*lines, "", prompt.request_json])
    if not isinstance(body, dict):
        return "\n".join([*lines, "", _compact(body)])
    params = {k: v for k, v in body.items() if k not in ("messages", "tools", "system")}
    lines.append("")
    lines.append("parameters:")
    lines += [f"{_INDENT}{key}: {_text_of(value)}" for key, value in params.items()] or [f"{_INDENT}(none)"]
    tools = body.get("tools") or []
    lines.append("")
    lines.append(f"tools offered ({len(tools)}):")
    for tool in tools:
        lines += _tool(tool)
    messages = body.get("messages") or []
    system = body.get("system")
    lines.append("")
    lines.append(f"messages ({len(messages)}{' + system' if system is not None else ''}):")
    if system is not None:
        lines += ["[system]", *_blocks(system)]
    for index, message in enumerate(messages):
        lines += _message(index, message)
    return "\n".join(lines)


def step_prompt_command(
    settings: Settings, task_id: str, step: int, *, as_json: bool = False, out: TextIO | None = None
) -> int:
    """Prints the step's request; 0 on success, 1 with a one-line reason on failure."""
    stream = out or sys.stdout
    try:
        prompt = asyncio.run(fetch_step_prompt(settings, task_id, step))
    except grpc.RpcError as exc:
        err = from_rpc_error(exc)
        print(f"agentmesh context: {err}", file=sys.stderr)
        return 1
    print(prompt.request_json if as_json else render_step_prompt(prompt), file=stream)
    return 0
