"""The exact prompt of every step (issue 24): `agentmesh context --task T --step N` and GetStepPrompt.

Acceptance: the command's output equals the request the fake OpenAI server captured (`--json`: the
captured body byte for byte, after the same redaction); error paths: unknown task, step out of range,
a caller without access to the task's session.
"""

from __future__ import annotations

import asyncio
import io
import json
import zlib
from typing import Any

import grpc
import pytest

from agentmesh.cli import main
from agentmesh.cli.prompt_view import render_step_prompt, step_prompt_command
from agentmesh.redact import MASK
from agentmesh.rpc.status import from_rpc_error
from agentmesh.v1 import dispatcher_pb2
from provider_svc.models.base import FORMAT_OPENAI_CHAT, SentRequest
from provider_svc.recording import RequestRecorder
from tests.contract.conversations.conftest import MakeStack, Stack, code_of
from tests.contract.provider.fakes import Reply

D = dispatcher_pb2
SECRET = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6"
"""An OpenAI-style key a user pastes into a goal: sent upstream as is, never stored."""


def masked(body: bytes) -> str:
    """The captured body after the redaction provider_svc applies to what it returns."""
    return RequestRecorder().record_now(SentRequest(FORMAT_OPENAI_CHAT, lambda: body)).body_json


async def cli(stack: Stack, task_id: str, step: int, *, as_json: bool) -> tuple[int, str]:
    out = io.StringIO()
    code = await asyncio.to_thread(step_prompt_command, stack.settings, task_id, step, as_json=as_json, out=out)
    return code, out.getvalue()


async def two_steps(stack: Stack) -> dispatcher_pb2.Task:
    stack.fake.push(
        Reply(text="", tool_calls=[("calculator", '{"expression": "1.50 * 4"}')]),
        Reply(text="That is 6.00 in total."),
    )
    task = await stack.run(f"My key is {SECRET}. What do 4 items at 1.50 cost?")
    assert task.status == D.TASK_STATUS_SUCCEEDED, task
    assert len(stack.fake.requests()) == 2
    return task


async def test_the_command_prints_the_request_the_fake_captured(make_stack: MakeStack) -> None:
    stack = await make_stack()
    task = await two_steps(stack)
    for step, captured in enumerate(stack.fake.requests(), start=1):
        code, out = await cli(stack, task.task_id, step, as_json=True)
        assert code == 0
        # --json: the body as sent, byte for byte, but for the masked key.
        assert out == masked(captured.body) + "\n"
        assert SECRET in captured.body.decode() and SECRET not in out and MASK in out
        sent: dict[str, Any] = json.loads(out)
        assert sent == json.loads(captured.body.decode().replace(SECRET, MASK))

        code, text = await cli(stack, task.task_id, step, as_json=False)
        assert code == 0
        assert text.startswith(f"task {task.task_id} step {step} (session {task.session_id}): ")
        assert "openai.chat.completions request to openai/m1" in text and "secrets masked" in text
        # Every parameter, every tool offered (name, description, schema) and every message, in order.
        for key, value in sent.items():
            if key not in ("messages", "tools"):
                assert (
                    f"    {key}: {value if isinstance(value, str) else json.dumps(value, separators=(',', ':'))}"
                    in text
                )
        for tool in sent["tools"]:
            function = tool["function"]
            assert f"    {function['name']}: {function['description']}" in text
            assert json.dumps(function["parameters"], ensure_ascii=False, separators=(",", ":")) in text
        position = 0
        for index, message in enumerate(sent["messages"]):
            position = text.index(f"[{index}] {message['role']}", position)
            for line in (message.get("content") or "").splitlines():
                position = text.index(line, position)
            for call in message.get("tool_calls") or []:
                position = text.index(f"{call['function']['name']}({call['function']['arguments']})", position)
    assert f"messages ({len(sent['messages'])}):" in text
    assert sent["model"] == "m1" and sent["temperature"] == 0.2 and sent["max_tokens"] == 256

    # The key is not in the stored prompts, which live as long as the task.
    r = stack.redis
    stored = await r.hgetall(f"am:task:{{{task.task_id}}}:prompts")
    assert sorted(stored) == [b"1", b"2"]
    assert 0 < await r.ttl(f"am:task:{{{task.task_id}}}:prompts") <= await r.ttl(f"am:task:{{{task.task_id}}}")
    for record in stored.values():  # compressed: read as the dispatcher does
        text = zlib.decompress(record).decode()
        assert SECRET not in text and MASK in text


async def test_the_prompt_of_a_continued_session_holds_the_earlier_turns(make_stack: MakeStack) -> None:
    stack = await make_stack()
    first = await two_steps(stack)
    stack.fake.push(Reply(text="You bought 4 items."))
    second = await stack.run("How many items did I buy?", session_id=first.session_id)
    code, out = await cli(stack, second.task_id, 1, as_json=True)
    assert code == 0 and out == masked(stack.fake.requests()[-1].body) + "\n"
    contents = [m.get("content") for m in json.loads(out)["messages"]]
    assert "That is 6.00 in total." in contents and contents[-1] == "How many items did I buy?"


async def test_error_paths(make_stack: MakeStack, capsys: pytest.CaptureFixture[str]) -> None:
    stack = await make_stack()
    task = await two_steps(stack)

    def call(task_id: str, step: int, md: Any = None) -> Any:
        return stack.stub.GetStepPrompt(D.GetStepPromptRequest(task_id=task_id, step=step), metadata=md or stack.md())

    # Unknown task: NOT_FOUND for an operator; the same refusal as for a task one may not read otherwise.
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await call("t-nope", 1)
    assert code_of(unknown.value) == "NOT_FOUND"
    stranger = stack.md(("agent",), subject="chat", agent_id="chat", task_id="t-elsewhere")
    with pytest.raises(grpc.aio.AioRpcError) as unknown_for_agent:
        await call("t-nope", 1, stranger)
    with pytest.raises(grpc.aio.AioRpcError) as not_attached:
        await call(task.task_id, 1, stranger)
    for refused in (unknown_for_agent.value, not_attached.value):
        detail = from_rpc_error(refused)
        assert detail.code.name == "PERMISSION_DENIED"
        assert detail.missing_permission == "task:session-reader-or-operator"
    assert from_rpc_error(unknown_for_agent.value).message == from_rpc_error(not_attached.value).message.replace(
        task.task_id, "t-nope"
    )
    # A token of a task attached to the session reads it (the session's readers).
    reader = stack.md(("agent",), subject="chat", agent_id="chat", task_id=task.task_id)
    prompt = (await call(task.task_id, 2, reader)).prompt
    assert prompt.step == 2 and prompt.request_json == masked(stack.fake.requests()[1].body)

    # Steps out of range: INVALID_ARGUMENT naming the range; step 0 is a missing REQUIRED field.
    for step in (3, 99, -1):
        with pytest.raises(grpc.aio.AioRpcError) as out_of_range:
            await call(task.task_id, step)
        detail = from_rpc_error(out_of_range.value)
        assert detail.code.name == "INVALID_REQUEST" and detail.violations[0].path == "step"
        assert f"task {task.task_id} has started 2 steps (1..2), got {step}" in detail.message
    with pytest.raises(grpc.aio.AioRpcError) as zero:
        await call(task.task_id, 0)
    assert code_of(zero.value) == "INVALID_REQUEST"

    # The command: one line on stderr, exit 1; its arguments checked before anything is called.
    capsys.readouterr()
    for task_id, step, expected in (
        (task.task_id, 7, f"INVALID_REQUEST: step: out of range: task {task.task_id} has started 2 steps"),
        ("t-nope", 1, "NOT_FOUND: task_id: no task 't-nope'"),
    ):
        code, out = await cli(stack, task_id, step, as_json=False)
        # (the in-process services log JSON lines on stderr too)
        [line] = [x for x in capsys.readouterr().err.splitlines() if x.startswith("agentmesh context:")]
        assert code == 1 and out == "" and line.startswith(f"agentmesh context: {expected}"), line
    assert main(["context", "--task", task.task_id]) == 2
    assert main(["context", "some-session", "--task", task.task_id, "--step", "1"]) == 2
    with pytest.raises(SystemExit):
        main(["context", "--task", task.task_id, "--step", "0"])


async def test_a_step_without_a_record_is_not_found(make_stack: MakeStack) -> None:
    stack = await make_stack(dispatcher={"record_prompts": False})
    stack.fake.push(Reply(text="fine"))
    task = await stack.run("nothing kept")
    assert task.status == D.TASK_STATUS_SUCCEEDED
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await stack.stub.GetStepPrompt(D.GetStepPromptRequest(task_id=task.task_id, step=1), metadata=stack.md())
    detail = from_rpc_error(missing.value)
    assert detail.code.name == "NOT_FOUND" and "steps recorded: none" in detail.message


def test_render_reads_an_anthropic_body() -> None:
    body = {
        "model": "claude-x",
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "calc", "input": {"x": 1}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "2"}]},
        ],
        "tools": [{"name": "calc", "description": "adds", "input_schema": {"type": "object"}}],
        "max_tokens": 100,
    }
    prompt = D.StepPrompt(task_id="t", step=1, session_id="t", model="anthropic/claude-x",
                          format="anthropic.messages", request_json=json.dumps(body))  # fmt: skip
    text = render_step_prompt(prompt)
    for line in (
        "    max_tokens: 100",
        "    calc: adds",
        '        schema: {"type":"object"}',
        "messages (3 + system):",
        "[system]",
        "    Be brief.",
        "[0] user",
        "    hi",
        '    tool call t1: calc({"x":1})',
        "    tool result for t1:",
        "        2",
    ):
        assert line in text.splitlines(), (line, text)
