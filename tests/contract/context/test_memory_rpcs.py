"""Remember / ListMemories / Forget through a real gRPC server (issue 51): bad input gets a typed
error, recall reaches BuildContext of the same user's sessions only, extraction is opt-in."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import grpc
from google.protobuf import duration_pb2

from agentmesh.v1 import common_pb2, context_pb2
from tests.contract.context.conftest import AGENT, Ctx, expect_error

K = context_pb2
USER = common_pb2.ROLE_USER
INVALID = grpc.StatusCode.INVALID_ARGUMENT
ALICE = K.MemorySubject(scope=K.MEMORY_SCOPE_USER, id="alice")
PREF = K.MEMORY_KIND_PREFERENCE


def _remember(text: str, **kwargs: object) -> K.RememberRequest:
    fields: dict[str, object] = {"subject": ALICE, "text": text, "kind": PREF, **kwargs}
    return K.RememberRequest(**fields)  # type: ignore[arg-type]


async def test_bad_memory_requests_are_typed_errors(start_context: Callable[..., Awaitable[Ctx]]) -> None:
    ctx = await start_context({"context": {"memory_max_chars": 40}})
    md = ctx.agent_md
    cases = [
        (K.RememberRequest(text="x", kind=PREF), "subject"),
        (_remember("x", subject=K.MemorySubject(id="alice")), "subject.scope"),
        (_remember("x", subject=K.MemorySubject(scope=K.MEMORY_SCOPE_USER)), "subject.id"),
        (_remember(""), "text"),
        (_remember("  \n "), "text"),
        (_remember("I prefer " + "very " * 10 + "long texts"), "text"),
        (_remember("x", kind=K.MEMORY_KIND_UNSPECIFIED), "kind"),
        (_remember("x", ttl=duration_pb2.Duration(seconds=-5)), "ttl"),
        (_remember("x", source=K.MemorySource(session_id="s", message_index=-1)), "source.message_index"),
    ]
    for request, field in cases:
        err = await expect_error(ctx.stub.Remember(request, metadata=md), INVALID)
        assert err.violations[0].path == field, (field, err)
    err = await expect_error(ctx.stub.ListMemories(K.ListMemoriesRequest(), metadata=md), INVALID)
    assert err.violations[0].path == "subject"
    err = await expect_error(ctx.stub.Forget(K.ForgetRequest(), metadata=md), INVALID)
    assert err.violations[0].path == "target"
    err = await expect_error(ctx.stub.Forget(K.ForgetRequest(memory_id="mem_nope"), metadata=md), INVALID)
    assert err.violations[0].path == "memory_id"
    unknown = "mem_user_" + "a" * 32 + "_" + "b" * 16
    await expect_error(ctx.stub.Forget(K.ForgetRequest(memory_id=unknown), metadata=md), grpc.StatusCode.NOT_FOUND)

    # Another user's, another agent's and a tenant's memory are refused to a task acting for alice.
    denied = grpc.StatusCode.PERMISSION_DENIED
    for subject in (
        K.MemorySubject(scope=K.MEMORY_SCOPE_USER, id="bob"),
        K.MemorySubject(scope=K.MEMORY_SCOPE_AGENT, id="other-agent"),
        K.MemorySubject(scope=K.MEMORY_SCOPE_TENANT, id="acme"),
    ):
        await expect_error(ctx.stub.Remember(_remember("x", subject=subject), metadata=md), denied)
        await expect_error(ctx.stub.ListMemories(K.ListMemoriesRequest(subject=subject), metadata=md), denied)
        await expect_error(ctx.stub.Forget(K.ForgetRequest(subject=subject), metadata=md), denied)
    bob_md = ctx.svc.metadata(("agent",), agent_id=AGENT, subject=AGENT, task_id="t-bob", creator="bob")
    mine = await ctx.stub.Remember(_remember("I prefer invoices in EUR"), metadata=md)
    await expect_error(ctx.stub.Forget(K.ForgetRequest(memory_id=mine.record.memory_id), metadata=bob_md), denied)
    # Nothing of the refused calls was stored; operators reach every scope.
    listed = await ctx.stub.ListMemories(K.ListMemoriesRequest(subject=ALICE, include_inactive=True), metadata=md)
    assert [r.text for r in listed.records] == ["I prefer invoices in EUR"]
    tenant = K.MemorySubject(scope=K.MEMORY_SCOPE_TENANT, id="acme")
    stored = await ctx.stub.Remember(_remember("Fiscal year ends in March", subject=tenant), metadata=ctx.operator_md)
    assert stored.record.subject.scope == K.MEMORY_SCOPE_TENANT


async def test_recall_correction_and_forget_through_build_context(ctx: Ctx) -> None:
    md = ctx.agent_md
    source = K.MemorySource(session_id="old-session", message_index=2)
    first = await ctx.stub.Remember(_remember("I prefer invoices in EUR", source=source), metadata=md)
    assert not first.already_remembered and first.record.memory_id.startswith("mem_user_")
    again = await ctx.stub.Remember(_remember("I prefer invoices in EUR."), metadata=md)
    assert again.already_remembered and again.record.memory_id == first.record.memory_id

    await ctx.create("s-alice", goal="answer billing questions")
    await ctx.say("s-alice", USER, "Can you resend my last invoice?")
    system = (await ctx.build("s-alice")).messages[0].content
    assert "I prefer invoices in EUR" in system and "session old-session message #2" in system

    bob_md = ctx.svc.metadata(("agent",), agent_id=AGENT, subject=AGENT, task_id="t-bob", creator="bob")
    create = K.CreateSessionRequest(session_id="s-bob", goal="answer billing questions")
    await ctx.stub.CreateSession(create, metadata=bob_md)
    ask = common_pb2.Message(role=USER, content="Can you resend my last invoice?")
    await ctx.stub.AppendMessage(K.AppendMessageRequest(session_id="s-bob", message=ask), metadata=bob_md)
    bob_view = (await ctx.stub.BuildContext(K.BuildContextRequest(session_id="s-bob"), metadata=bob_md)).view
    assert "EUR" not in bob_view.messages[0].content and "memory" not in bob_view.messages[0].content

    usd = await ctx.stub.Remember(_remember("Actually I prefer invoices in USD"), metadata=md)
    assert list(usd.superseded_ids) == [first.record.memory_id]
    system = (await ctx.build("s-alice")).messages[0].content
    assert "USD" in system and "EUR" not in system
    every = await ctx.stub.ListMemories(K.ListMemoriesRequest(subject=ALICE, include_inactive=True), metadata=md)
    assert {(r.text, r.superseded_by) for r in every.records} == {
        ("Actually I prefer invoices in USD", ""),
        ("I prefer invoices in EUR", usd.record.memory_id),
    }
    current = await ctx.stub.ListMemories(K.ListMemoriesRequest(subject=ALICE), metadata=md)
    assert [r.memory_id for r in current.records] == [usd.record.memory_id]

    gone = await ctx.stub.Forget(K.ForgetRequest(subject=ALICE), metadata=md)
    assert gone.deleted_count == 2
    assert "USD" not in (await ctx.build("s-alice")).messages[0].content


async def test_extraction_at_append_is_opt_in(start_context: Callable[..., Awaitable[Ctx]]) -> None:
    off = await start_context()
    await off.create("s-off")
    await off.say("s-off", USER, "I prefer invoices in EUR.")
    listed = await off.stub.ListMemories(K.ListMemoriesRequest(subject=ALICE), metadata=off.agent_md)
    assert list(listed.records) == []

    on = await start_context({"context": {"memory_extract": True}})
    await on.create("s-on")
    await on.say("s-on", USER, "Hello there.")
    await on.say("s-on", USER, "以后发票都用欧元。请查一下上个月的账单")
    await on.say("s-on", common_pb2.ROLE_ASSISTANT, "I prefer to check first.")  # not the user's statement
    listed = await on.stub.ListMemories(K.ListMemoriesRequest(subject=ALICE), metadata=on.agent_md)
    assert [(r.text, r.kind, r.source.session_id, r.source.message_index) for r in listed.records] == [
        ("以后发票都用欧元。", PREF, "s-on", 1)
    ]
