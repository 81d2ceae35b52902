"""Conversations that continue (issue 24): StartTask with a session_id, through the four real services.

Acceptance: a second StartTask with `session_id` sees the first task's answer in BuildContext; a
concurrent one is FAILED_PRECONDITION; another agent's token is refused; an unknown or expired session
is NOT_FOUND.
"""

from __future__ import annotations

import asyncio
import io
import json

import grpc
import pytest

from agentmesh.cli.run_view import run_command
from agentmesh.rpc.status import from_rpc_error
from agentmesh.v1 import context_pb2, dispatcher_pb2
from tests.contract.conversations.conftest import MakeStack, Stack, code_of
from tests.contract.provider.fakes import Reply

D = dispatcher_pb2


def contents(body: dict[str, object]) -> list[tuple[str, str]]:
    """(role, content) of a captured chat completions body, tool calls as `name(arguments)`."""
    out = []
    for m in body["messages"]:  # type: ignore[attr-defined]
        text = m.get("content") or ""
        for call in m.get("tool_calls") or []:
            text += f"{call['function']['name']}({call['function']['arguments']})"
        out.append((m["role"], text))
    return out


async def first_turn(stack: Stack, **fields: object) -> D.Task:
    stack.fake.push(
        Reply(text="", tool_calls=[("calculator", '{"expression": "6*7"}')]),
        Reply(text="6 times 7 is 42."),
    )
    task = await stack.run("What is 6 times 7?", **fields)  # type: ignore[arg-type]
    assert task.status == D.TASK_STATUS_SUCCEEDED, task
    assert task.session_id == task.task_id  # the default: a new session named after the task
    return task


async def test_a_second_task_on_the_session_sees_the_first_answer(make_stack: MakeStack) -> None:
    stack = await make_stack()
    first = await first_turn(stack)
    stack.fake.push(Reply(text="You asked what 6 times 7 is: 42."))
    second = await stack.run("And what did I ask you before?", session_id=first.session_id)
    assert second.status == D.TASK_STATUS_SUCCEEDED, second
    assert second.session_id == first.session_id and second.task_id != first.task_id

    # What the model was sent for the second turn holds the first turn whole, then the new goal.
    sent = contents(stack.fake.requests()[-1].json())
    assert sent[0][0] == "system"
    turns = sent[1:]
    assert turns[0] == ("user", "What is 6 times 7?")
    assert turns[1][0] == "assistant" and 'calculator({"expression": "6*7"})' in turns[1][1]
    assert turns[2][0] == "tool" and "42" in turns[2][1]
    assert turns[3] == ("assistant", "6 times 7 is 42.")
    assert turns[4] == ("user", "And what did I ask you before?")

    # BuildContext of the session (as an operator) shows both turns and both answers.
    view = (
        await stack.context_stub.BuildContext(
            context_pb2.BuildContextRequest(session_id=first.session_id), metadata=stack.md()
        )
    ).view
    texts = [m.content for m in view.messages]
    assert "6 times 7 is 42." in texts and "You asked what 6 times 7 is: 42." in texts
    assert texts.index("6 times 7 is 42.") < texts.index("And what did I ask you before?")
    session = (
        await stack.context_stub.GetSession(
            context_pb2.GetSessionRequest(session_id=first.session_id), metadata=stack.md()
        )
    ).session
    assert session.newest_task_id == second.task_id

    # A third turn: the session keeps growing, one task at a time.
    stack.fake.push(Reply(text="Third."))
    third = await stack.run("One more question.", session_id=first.session_id)
    assert third.status == D.TASK_STATUS_SUCCEEDED
    third_sent = contents(stack.fake.requests()[-1].json())
    assert ("assistant", "You asked what 6 times 7 is: 42.") in third_sent


async def test_a_concurrent_start_on_the_session_is_failed_precondition(make_stack: MakeStack) -> None:
    stack = await make_stack()
    first = await first_turn(stack)
    for round_ in range(2):
        # The winner's model answers slowly, so every contender sees it running.
        stack.fake.push(Reply(text=f"slow answer {round_}", delay_s=1.0))
        starts = [
            stack.start(f"turn {round_}.{i}", session_id=first.session_id, task_id=f"turn-{round_}-{i}")
            for i in range(6)
        ]
        results = await asyncio.gather(*starts, return_exceptions=True)
        won = [r for r in results if isinstance(r, D.Task)]
        lost = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
        assert len(won) == 1 and len(lost) == 5, results
        for err in lost:
            detail = from_rpc_error(err)
            assert detail.code.name == "FAILED_PRECONDITION", detail
            assert detail.metadata["task_id"] == won[0].task_id
            assert f"session {first.session_id} runs one task at a time" in detail.message
        # Nothing of the losers exists.
        for i in range(6):
            if f"turn-{round_}-{i}" != won[0].task_id:
                with pytest.raises(grpc.aio.AioRpcError) as missing:
                    await stack.stub.GetTask(D.GetTaskRequest(task_id=f"turn-{round_}-{i}"), metadata=stack.md())
                assert code_of(missing.value) == "NOT_FOUND"
        # While the winner runs, a later start is refused too, naming its status.
        with pytest.raises(grpc.aio.AioRpcError) as busy:
            await stack.start("too early", session_id=first.session_id)
        assert code_of(busy.value) == "FAILED_PRECONDITION"
        assert from_rpc_error(busy.value).metadata["status"] in ("PENDING", "RUNNING")
        done = await stack.wait(won[0].task_id)
        assert done.status == D.TASK_STATUS_SUCCEEDED and done.answer == f"slow answer {round_}"
    # Each winner saw the previous winner's answer.
    last = contents(stack.fake.requests()[-1].json())
    assert ("assistant", "slow answer 0") in last


async def test_who_may_continue_a_session(make_stack: MakeStack) -> None:
    stack = await make_stack()
    bob = stack.user("bob", "chat", "other")
    first = await first_turn(stack, md=bob)  # bob's session: he started the task that opened it
    session_id = first.session_id

    refused = {
        "mallory": (stack.user("mallory"), "chat"),
        # A token of another agent (one allowed to start chat tasks), e.g. an agent's own task token.
        "agent other": (
            stack.md(("agent",), subject="other", agent_id="other", permissions=["dev:agent.chat:run"]),
            "chat",
        ),
        # The owner, but starting another agent on chat's session.
        "agent mismatch": (bob, "other"),
    }
    for name, (md, agent) in refused.items():
        with pytest.raises(grpc.aio.AioRpcError) as denied:
            await stack.start(
                f"sneak in as {name}", md=md, agent_id=agent, session_id=session_id, task_id=f"x-{len(name)}"
            )
        detail = from_rpc_error(denied.value)
        assert detail.code.name == "PERMISSION_DENIED", (name, detail)
        assert detail.missing_permission == f"session:{session_id}", (name, detail)
        with pytest.raises(grpc.aio.AioRpcError) as none:
            await stack.stub.GetTask(D.GetTaskRequest(task_id=f"x-{len(name)}"), metadata=stack.md())
        assert code_of(none.value) == "NOT_FOUND", name
    assert "belongs to agent chat, not other" in str(from_rpc_error(denied.value))

    # The owner continues it (no role needed), and so may an operator.
    stack.fake.push(Reply(text="for bob"), Reply(text="for the operator"))
    by_bob = await stack.run("bob again", md=bob, session_id=session_id)
    assert by_bob.status == D.TASK_STATUS_SUCCEEDED and by_bob.created_by == "bob"
    by_operator = await stack.run("operator here", session_id=session_id)
    assert by_operator.status == D.TASK_STATUS_SUCCEEDED and by_operator.created_by == "alice"

    # Refusals are audited as refused starts; the continued starts name their session.
    entries = [fields for _, fields in await stack.redis.xrange("am:audit")]
    refusals = [e for e in entries if e[b"action"] == b"task.start" and e[b"outcome"] == b"PERMISSION_DENIED"]
    assert {e[b"subject"] for e in refusals} >= {b"mallory", b"other", b"bob"}
    assert any(e[b"detail"] == f"agent chat, session {session_id}".encode() for e in entries)


async def test_unknown_and_expired_sessions_are_not_found(make_stack: MakeStack) -> None:
    stack = await make_stack()
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await stack.start("hello", session_id="no-such-session")
    assert code_of(unknown.value) == "NOT_FOUND"
    with pytest.raises(grpc.aio.AioRpcError) as malformed:
        await stack.start("hello", session_id="bad session id")
    detail = from_rpc_error(malformed.value)
    assert detail.code.name == "INVALID_REQUEST" and detail.violations[0].path == "session_id"

    first = await first_turn(stack)
    r = stack.redis
    keys = [k async for k in r.scan_iter(match=f"am:sess:{{{first.session_id}}}:*")]
    assert keys
    for key in keys:  # the session's TTL runs out
        await r.pexpire(key, 1)
    await asyncio.sleep(0.05)
    assert not [k async for k in r.scan_iter(match=f"am:sess:{{{first.session_id}}}:*")]
    with pytest.raises(grpc.aio.AioRpcError) as expired:
        await stack.start("are you there?", session_id=first.session_id)
    assert code_of(expired.value) == "NOT_FOUND"


async def test_a_failed_turn_is_not_resumed_once_the_session_moved_on(make_stack: MakeStack) -> None:
    stack = await make_stack()
    # The upstream fails: so does the task (FAILED, resumable).
    stack.fake.push(Reply.error(503))
    failed = await stack.run("first try", task_id="turn-1")
    assert failed.status == D.TASK_STATUS_FAILED, failed
    assert len(stack.fake.requests()) == 1

    # The newest task FAILED: that counts as ended, and the conversation goes on.
    stack.fake.push(Reply(text="second turn answered"))
    second = await stack.run("second try", session_id="turn-1", task_id="turn-2")
    assert second.status == D.TASK_STATUS_SUCCEEDED

    # Resuming the older turn now would run it beside (after) a newer one: refused, it stays FAILED.
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stack.start("first try", task_id="turn-1")
    detail = from_rpc_error(refused.value)
    assert detail.code.name == "FAILED_PRECONDITION" and "continued with task turn-2" in detail.message
    again = (await stack.stub.GetTask(D.GetTaskRequest(task_id="turn-1"), metadata=stack.md())).task
    assert again.status == D.TASK_STATUS_FAILED and again.error == failed.error  # its own error, as before
    events = [
        e.event
        async for e in stack.stub.WatchTask(D.WatchTaskRequest(task_id="turn-1"), metadata=stack.md())
        if e.event.sequence
    ]
    assert "not resumed" in events[-1].message and events[-1].status == D.TASK_STATUS_FAILED
    assert len(stack.fake.requests()) == 2  # turn 1's failed attempt, turn 2's: nothing re-ran

    # The newest task, FAILED, is resumed as before.
    stack.fake.push(Reply.error(503))
    third = await stack.run("third try", session_id="turn-1", task_id="turn-3")
    assert third.status == D.TASK_STATUS_FAILED
    stack.fake.push(Reply(text="third turn answered after all"))
    resumed = await stack.run("third try", task_id="turn-3")
    assert resumed.status == D.TASK_STATUS_SUCCEEDED and resumed.answer == "third turn answered after all"


async def test_agentmesh_run_prints_and_takes_the_session(make_stack: MakeStack) -> None:
    stack = await make_stack()
    stack.fake.push(Reply(text="Paris."))
    out, err = io.StringIO(), io.StringIO()
    code = await asyncio.to_thread(run_command, stack.settings, "chat", "Capital of France?", out=out, err=err)
    assert code == 0, (out.getvalue(), err.getvalue())
    [line] = [line for line in out.getvalue().splitlines() if line.startswith("session: ")]
    session_id = line.split()[1]
    assert f"--session {session_id}" in line

    stack.fake.push(Reply(text="About 2.1 million people."))
    out2 = io.StringIO()
    code = await asyncio.to_thread(
        run_command, stack.settings, "chat", "How many people live there?", session_id=session_id, out=out2, err=err
    )
    assert code == 0, (out2.getvalue(), err.getvalue())
    assert f"session: {session_id} " in out2.getvalue()
    sent = json.loads(stack.fake.requests()[-1].body)
    assert [m["content"] for m in sent["messages"][1:]] == [
        "Capital of France?",
        "Paris.",
        "How many people live there?",
    ]

    # A refused continuation is a typed one-line error (exit 2), before anything runs.
    err2 = io.StringIO()
    code = await asyncio.to_thread(
        run_command, stack.settings, "chat", "hi", session_id="no-such-session", out=io.StringIO(), err=err2
    )
    assert code == 2 and "NOT_FOUND" in err2.getvalue()


async def test_a_turn_started_before_the_first_opened_its_session(make_stack: MakeStack) -> None:
    """Right after StartTask the session may not exist yet: busy for the first task's creator and
    operators; for anyone else the same NOT_FOUND (or PERMISSION_DENIED) as any session they may not see."""
    stack = await make_stack()
    bob = stack.user("bob")
    stack.fake.push(Reply(text="first", delay_s=1.0), Reply(text="second"))
    first = await stack.start("first turn", md=bob, task_id="early-1")
    for md in (bob, stack.md()):
        with pytest.raises(grpc.aio.AioRpcError) as busy:
            await stack.start("second turn", md=md, session_id="early-1")
        detail = from_rpc_error(busy.value)
        assert detail.code.name == "FAILED_PRECONDITION" and detail.metadata["task_id"] == "early-1"
    with pytest.raises(grpc.aio.AioRpcError) as hidden:
        await stack.start("second turn", md=stack.user("mallory"), session_id="early-1")
    assert code_of(hidden.value) in ("NOT_FOUND", "PERMISSION_DENIED")
    assert (await stack.wait(first.task_id, bob)).status == D.TASK_STATUS_SUCCEEDED
    second = await stack.run("second turn", md=bob, session_id="early-1")
    assert second.status == D.TASK_STATUS_SUCCEEDED and second.answer == "second"


async def test_the_scripted_model_answers_each_turn(make_stack: MakeStack) -> None:
    """The offline model works on the current turn (the latest user message), as README's example shows."""
    stack = await make_stack()
    first = await stack.run("What is 1234 * 5678?", agent_id="other")
    second = await stack.run("And 4321 * 8765?", agent_id="other", session_id=first.session_id)
    assert first.status == second.status == D.TASK_STATUS_SUCCEEDED
    assert '"result":7006652' in first.answer and second.answer.startswith("Answer: And 4321 * 8765?")
    assert '"result":37873565' in second.answer and "7006652" not in second.answer
    prompt = (
        await stack.stub.GetStepPrompt(D.GetStepPromptRequest(task_id=second.task_id, step=1), metadata=stack.md())
    ).prompt
    sent = json.loads(prompt.request_json)
    assert prompt.model == "scripted/default" and sent["model"] == "default"
    assert [m["content"] for m in sent["messages"] if m["role"] == "user"] == [
        "What is 1234 * 5678?",
        "And 4321 * 8765?",
    ]
