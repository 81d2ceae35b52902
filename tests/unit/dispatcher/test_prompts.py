"""Each step's provider request, kept with its task (dispatcher_svc/prompts.py): written by the commit
that checkpoints the step's reply, with the task's own lifetime, read back by step (real Redis)."""

from __future__ import annotations

import asyncio
import json
import zlib
from typing import Any

import pytest

from agentmesh.errors import AgentmeshError, ErrorCode, UnavailableError
from dispatcher_svc.model import EventKind, SentPrompt, TaskEvent, TaskStatus
from dispatcher_svc.prompts import decode_prompt, encode_prompt
from dispatcher_svc.tasks import fields_of
from tests.unit.dispatcher.conftest import OPERATOR, MakeRig, Rig
from tests.unit.dispatcher.fakes import FakeContext, FakeTools, Prompt, call, reply


async def finished(rig: Rig, task_id: str) -> TaskStatus:
    events = await rig.events(task_id)
    return events[-1].status


async def test_every_step_keeps_the_request_its_reply_answered(make_rig: MakeRig) -> None:
    def policy(p: Prompt) -> Any:
        return reply(call("calc", {"x": 1}, "c1")) if not p.tool_messages() else reply(text="done")

    rig = await make_rig(policy, FakeTools({"calc": lambda c: "2"}), context=FakeContext())
    task_id = await rig.start("add things")
    assert await finished(rig, task_id) == TaskStatus.SUCCEEDED
    task = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    for step in (1, 2):
        prompt = await rig.dispatcher.get_step_prompt(task_id, step, caller=OPERATOR)
        body = json.loads(prompt.request_json)
        assert (prompt.task_id, prompt.step, prompt.session_id, prompt.model) == (task_id, step, task_id, "fake/m")
        assert prompt.format == "openai.chat.completions" and prompt.create_time_ms > 0
        # What the model was shown at that step: the fake provider's record of the same call.
        assert body["messages"] == json.loads(json.dumps(rig.provider.prompts[step - 1].messages, default=str))
    assert (
        len(json.loads((await rig.dispatcher.get_step_prompt(task_id, 2, caller=OPERATOR)).request_json)["messages"])
        > 2
    )
    # Stored compressed beside the task, with its TTL.
    redis = rig.store.redis
    key = rig.store.keys.task_prompts(task_id)
    assert sorted(await redis.hkeys(key)) == [b"1", b"2"]
    assert 0 < await redis.ttl(key) <= await redis.ttl(rig.store.keys.task(task_id))
    assert task.step == 2


async def test_a_failed_task_keeps_its_prompts_and_a_resume_adds_the_retried_step(make_rig: MakeRig) -> None:
    down = {"on": True}

    def policy(p: Prompt) -> Any:
        if not p.tool_messages():
            return reply(call("calc", {"x": 1}, "c1"))
        if down["on"]:
            raise UnavailableError("provider down")
        return reply(text="done")

    rig = await make_rig(policy, FakeTools({"calc": lambda c: "2"}), context=FakeContext())
    task_id = await rig.start("add things")
    assert await finished(rig, task_id) == TaskStatus.FAILED
    redis, key = rig.store.redis, rig.store.keys.task_prompts(task_id)
    assert await redis.hkeys(key) == [b"1"]  # step 2's request never got its reply
    with pytest.raises(AgentmeshError) as missing:
        await rig.dispatcher.get_step_prompt(task_id, 2, caller=OPERATOR)
    assert missing.value.code == ErrorCode.NOT_FOUND and "steps recorded: 1" in missing.value.message
    assert 0 < await redis.ttl(key) <= await redis.ttl(rig.store.keys.task(task_id))

    down["on"] = False
    await rig.start("add things", task_id=task_id)
    task = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    while not task.status.terminal:
        await asyncio.sleep(0.02)
        task = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert task.status == TaskStatus.SUCCEEDED
    assert sorted(await redis.hkeys(key)) == [b"1", b"2"]


async def test_the_commit_gives_the_prompts_the_tasks_lifetime(make_rig: MakeRig) -> None:
    rig = await make_rig(lambda p: reply(text="x"), start=False)
    tasks = rig.dispatcher.tasks
    created = TaskEvent(task_id="t1", sequence=0, kind=EventKind.STATUS, time_ms=1, status=TaskStatus.PENDING)
    await tasks.commit("t1", fence=None, fields=fields_of(status=TaskStatus.PENDING, task_id="t1"), events=[created])
    record = encode_prompt("fake/m", SentPrompt("openai.chat.completions", '{"model":"m"}'), 5)
    await tasks.commit("t1", fence=0, prompt=(1, record))
    redis = rig.store.redis
    keys = [rig.store.keys.task("t1"), rig.store.keys.task_events("t1"), rig.store.keys.task_prompts("t1")]
    assert [await redis.ttl(k) for k in keys] == [-1, -1, -1]  # running: kept
    await tasks.commit("t1", fence=0, ttl_s=500)  # ended: all three expire together
    assert all(495 <= ttl <= 500 for ttl in [await redis.ttl(k) for k in keys])
    await tasks.commit("t1", fence=0, ttl_s=-1)  # resumed: all three kept again
    assert [await redis.ttl(k) for k in keys] == [-1, -1, -1]
    assert await redis.hget(keys[2], "1") == record


def test_records_round_trip_and_a_damaged_one_is_internal() -> None:
    sent = SentPrompt("anthropic.messages", '{"model":"claude","messages":[{"role":"user","content":"héllo"}]}', True)
    raw = encode_prompt("anthropic/claude", sent, 1234)
    prompt = decode_prompt(raw, task_id="t", step=3, session_id="s")
    assert (prompt.request_json, prompt.format, prompt.redacted, prompt.model) == (
        sent.request_json,
        "anthropic.messages",
        True,
        "anthropic/claude",
    )
    assert prompt.create_time_ms == 1234 and (prompt.task_id, prompt.step, prompt.session_id) == ("t", 3, "s")
    assert json.loads(zlib.decompress(raw))["v"] == 1
    for damaged in (b"not zlib", zlib.compress(b"[1, 2]"), zlib.compress(b'{"request": 5}'), raw[:-3]):
        with pytest.raises(AgentmeshError) as caught:
            decode_prompt(damaged, task_id="t", step=3, session_id="s")
        assert caught.value.code == ErrorCode.INTERNAL and "step 3 of task t" in caught.value.message


async def test_with_record_prompts_off_nothing_is_asked_nor_kept(make_rig: MakeRig) -> None:
    rig = await make_rig(lambda p: reply(text="x"), dispatcher={"record_prompts": False}, context=FakeContext())
    asked: list[bool] = []
    generate = rig.provider.generate

    async def spy(**kwargs: Any) -> Any:
        asked.append(kwargs.get("include_request", False))
        return await generate(**kwargs)

    rig.provider.generate = spy  # type: ignore[method-assign]
    task_id = await rig.start()
    assert await finished(rig, task_id) == TaskStatus.SUCCEEDED
    assert asked == [False]
    assert await rig.store.redis.exists(rig.store.keys.task_prompts(task_id)) == 0
