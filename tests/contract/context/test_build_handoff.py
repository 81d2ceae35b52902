"""BuildHandoff through a real context_svc (issue 44): a hop from a parent session to a child one.

Confirmed facts are re-read from their citations (payloads offloaded by AppendToolResult, messages of
the log), a fabricated citation is demoted and counted, the user's constraints come verbatim, the full
record is a payload; the child session may read exactly the cited payloads and the record (GetPayload
with its own session id), never another payload of the parent nor the parent session. Bad inputs are
typed."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc

from agentmesh.v1 import common_pb2, context_pb2
from tests.contract.context.conftest import AGENT, Ctx, expect_error

K = context_pb2
USER = common_pb2.ROLE_USER
PODS = {"pods": [{"name": f"api-{i}", "status": "Running", "restarts": 0} for i in range(60)]}
PODS["pods"][7] = {"name": "api-7", "status": "OOMKilled", "restarts": 2259}
LOG = "".join(f"09:{i % 60:02d} INFO request served in {i} ms\n" for i in range(200)) + "09:59 ERROR pool exhausted\n"


async def parent_session(ctx: Ctx) -> tuple[str, str, str]:
    """Session s1 with a user constraint, two offloaded tool outputs and a third one; their ref ids."""
    await ctx.create("s1")
    await ctx.say("s1", USER, "Checkout is failing. We must not restart the database before 18:00.")
    refs = []
    for call_id, output, structured in (("c1", json.dumps(PODS), True), ("c2", LOG, False), ("c3", "x" * 3000, False)):
        await ctx.call("s1", call_id, "query", {"q": call_id})
        appended = await ctx.tool("s1", call_id, "query", output, structured=structured)
        assert appended.ref.ref_id
        refs.append(str(appended.ref.ref_id))
    return refs[0], refs[1], refs[2]


def brief(pods: str, log: str) -> K.HandoffBrief:
    return K.HandoffBrief(
        summary="Listed the pods and read the service log.",
        facts=[
            K.HandoffFact(
                statement="api-7 restarts",
                value="2,259",
                citation=K.HandoffCitation(ref_id=pods, json_path="$.pods[7].restarts"),
            ),
            K.HandoffFact(
                statement="last log line",
                value="pool exhausted",
                citation=K.HandoffCitation(ref_id=log, line_range=K.LineRange(start=201, end=201)),
            ),
            K.HandoffFact(statement="the user's deadline", value="18:00", citation=K.HandoffCitation(message_index=0)),
            # Fabricated: a ref nobody stored, and a value the cited pod does not have.
            K.HandoffFact(statement="db pod", value="db-0", citation=K.HandoffCitation(ref_id="pl_" + "e" * 64)),
            K.HandoffFact(
                statement="api-3 status",
                value="OOMKilled",
                citation=K.HandoffCitation(ref_id=pods, json_path="$.pods[3].status"),
            ),
            K.HandoffFact(statement="cause", value="connection leak", basis="the pool ran out after the deploy"),
        ],
        open_questions=["Did the 09:40 deploy change the pool size?"],
        risks=["Restarting api-7 drops in-flight payments."],
        artifacts=[pods],
    )


async def test_build_handoff_checks_facts_adds_constraints_offloads_the_record_and_grants_the_child(ctx: Ctx) -> None:
    pods, log, other = await parent_session(ctx)
    request = K.BuildHandoffRequest(session_id="s1", child_session_id="s1-child", brief=brief(pods, log))
    response = await ctx.stub.BuildHandoff(request, metadata=ctx.agent_md)

    kinds = [(f.kind, f.demotion_reason) for f in response.facts]
    assert kinds == [
        (K.HANDOFF_FACT_KIND_CONFIRMED, K.HANDOFF_DEMOTION_REASON_UNSPECIFIED),
        (K.HANDOFF_FACT_KIND_CONFIRMED, K.HANDOFF_DEMOTION_REASON_UNSPECIFIED),
        (K.HANDOFF_FACT_KIND_CONFIRMED, K.HANDOFF_DEMOTION_REASON_UNSPECIFIED),
        (K.HANDOFF_FACT_KIND_INFERRED, K.HANDOFF_DEMOTION_REASON_CITATION_NOT_FOUND),
        (K.HANDOFF_FACT_KIND_INFERRED, K.HANDOFF_DEMOTION_REASON_VALUE_NOT_IN_SOURCE),
        (K.HANDOFF_FACT_KIND_INFERRED, K.HANDOFF_DEMOTION_REASON_UNSPECIFIED),
    ]
    assert (response.confirmed_count, response.inferred_count, response.demoted_count) == (3, 3, 2)
    assert response.facts[0].fact == request.brief.facts[0]
    assert all(f.shown for f in response.facts)
    assert 0 < response.token_count <= 800
    assert list(response.user_constraints) == ["We must not restart the database before 18:00."]
    assert '"We must not restart the database before 18:00."' in response.text
    assert f"- api-7 restarts: 2,259 [{pods} $.pods[7].restarts]" in response.text
    assert f'Full record: read_payload(ref_id="{response.record_ref_id}")' in response.text
    assert set(response.granted_ref_ids) == {pods, log, response.record_ref_id}

    # The record is a JSON payload of the parent session with the brief and the check results.
    got = await ctx.stub.GetPayload(
        K.GetPayloadRequest(session_id="s1", ref_id=response.record_ref_id), metadata=ctx.agent_md
    )
    record = json.loads(got.content)
    assert record["brief"]["facts"][3]["citation"] == {"ref_id": "pl_" + "e" * 64}
    assert [c["reason"] for c in record["checked"]] == ["", "", "", "citation_not_found", "value_not_in_source", ""]

    # The child's task creates its session and reads through its own session id: the cited payloads
    # and the record, as GetPayload selects them...
    # (a child's creator is the root's: the same owner, so a retried BuildHandoff may grant it again)
    child_md = ctx.svc.metadata(
        ("agent",), agent_id="log-agent", subject="log-agent", task_id="t-child", creator="alice"
    )
    await ctx.stub.CreateSession(K.CreateSessionRequest(session_id="s1-child", goal="analyse"), metadata=child_md)
    part = await ctx.stub.GetPayload(
        K.GetPayloadRequest(session_id="s1-child", ref_id=pods, json_path="$.pods[7].restarts"), metadata=child_md
    )
    assert json.loads(part.content) == [2259] and part.ref.session_id == "s1"
    for ref in (log, response.record_ref_id):
        await ctx.stub.GetPayload(K.GetPayloadRequest(session_id="s1-child", ref_id=ref), metadata=child_md)
    # ...but not another payload of the parent, nor the parent session itself.
    err = await expect_error(
        ctx.stub.GetPayload(K.GetPayloadRequest(session_id="s1-child", ref_id=other), metadata=child_md),
        grpc.StatusCode.NOT_FOUND,
    )
    assert err.metadata["ref_id"] == other
    for call in (
        ctx.stub.GetPayload(K.GetPayloadRequest(session_id="s1", ref_id=pods), metadata=child_md),
        ctx.stub.GetSession(K.GetSessionRequest(session_id="s1"), metadata=child_md),
        ctx.stub.BuildContext(K.BuildContextRequest(session_id="s1"), metadata=child_md),
    ):
        await expect_error(call, grpc.StatusCode.PERMISSION_DENIED)
    # A third session of the same agent gets nothing from the grant.
    await ctx.stub.CreateSession(K.CreateSessionRequest(session_id="s3", goal="other"), metadata=child_md)
    await expect_error(
        ctx.stub.GetPayload(K.GetPayloadRequest(session_id="s3", ref_id=pods), metadata=child_md),
        grpc.StatusCode.NOT_FOUND,
    )

    # The child hands over in turn, citing the parent's payload it was granted: the fact is confirmed and
    # the grandchild's grant points where the payload is stored (a relay carries citations to its end).
    relay = K.HandoffBrief(
        facts=[
            K.HandoffFact(
                statement="api-7 restarts",
                value="2259",
                citation=K.HandoffCitation(ref_id=pods, json_path="$.pods[?@.name == 'api-7'].restarts"),
            )
        ]
    )
    hop2 = await ctx.stub.BuildHandoff(
        K.BuildHandoffRequest(session_id="s1-child", child_session_id="s1-grandchild", brief=relay),
        metadata=child_md,
    )
    assert hop2.confirmed_count == 1 and pods in hop2.granted_ref_ids
    grandchild_md = ctx.svc.metadata(
        ("agent",), agent_id="fix-agent", subject="fix-agent", task_id="t-grandchild", creator="alice"
    )
    await ctx.stub.CreateSession(K.CreateSessionRequest(session_id="s1-grandchild", goal="fix"), metadata=grandchild_md)
    for ref in (pods, hop2.record_ref_id):
        got = await ctx.stub.GetPayload(
            K.GetPayloadRequest(session_id="s1-grandchild", ref_id=ref), metadata=grandchild_md
        )
        assert got.ref.session_id in ("s1", "s1-child")
    await expect_error(
        ctx.stub.GetPayload(K.GetPayloadRequest(session_id="s1-grandchild", ref_id=log), metadata=grandchild_md),
        grpc.StatusCode.NOT_FOUND,
    )

    # The same request again: the same record, nothing more granted; deleting the child drops its grants.
    again = await ctx.stub.BuildHandoff(request, metadata=ctx.agent_md)
    assert again.record_ref_id == response.record_ref_id and again.text == response.text
    await ctx.stub.DeleteSession(K.DeleteSessionRequest(session_id="s1-child"), metadata=child_md)
    redis = ctx.svc.host.store.redis  # type: ignore[union-attr]
    assert not await redis.exists(ctx.svc.host.store.keys.session("s1-child", "grants"))  # type: ignore[union-attr]


async def test_build_handoff_caps_the_hop(ctx: Ctx) -> None:
    pods, log, _ = await parent_session(ctx)
    big = brief(pods, log)
    big.risks.extend(f"risk {i}: replica {i} may drop in-flight payments on restart" for i in range(30))
    big.summary = " ".join(f"Step {i}: checked replica {i}." for i in range(150))
    response = await ctx.stub.BuildHandoff(
        K.BuildHandoffRequest(session_id="s1", brief=big, max_tokens=250), metadata=ctx.agent_md
    )
    assert response.token_count <= 250
    assert response.omitted_count > 0 and "risk " not in response.text
    assert not response.granted_ref_ids  # no child session: nothing granted
    # Confirmed facts and the user's constraint are the last to go: still here.
    assert "api-7 restarts: 2,259" in response.text
    assert list(response.user_constraints) == ["We must not restart the database before 18:00."]


async def test_a_malformed_citation_is_demoted_typed_not_refused(ctx: Ctx) -> None:
    pods, _, _ = await parent_session(ctx)
    fact = K.HandoffFact(statement="status", value="OOMKilled", citation=K.HandoffCitation(ref_id=pods, json_path="$["))
    response = await ctx.stub.BuildHandoff(
        K.BuildHandoffRequest(session_id="s1", brief=K.HandoffBrief(facts=[fact])), metadata=ctx.agent_md
    )
    assert response.facts[0].kind == K.HANDOFF_FACT_KIND_INFERRED
    assert response.facts[0].demotion_reason == K.HANDOFF_DEMOTION_REASON_MALFORMED
    assert "JSONPath" in response.facts[0].detail
    assert response.demoted_count == 1


async def test_bad_inputs_are_typed(ctx: Ctx) -> None:
    pods, log, _ = await parent_session(ctx)
    ok = brief(pods, log)
    cases = [
        (K.BuildHandoffRequest(session_id="nope", brief=ok), grpc.StatusCode.NOT_FOUND, ""),
        (K.BuildHandoffRequest(session_id="s1"), grpc.StatusCode.INVALID_ARGUMENT, "brief"),
        (K.BuildHandoffRequest(session_id="s1", brief=K.HandoffBrief()), grpc.StatusCode.INVALID_ARGUMENT, "brief"),
        (
            K.BuildHandoffRequest(session_id="s1", brief=ok, max_tokens=0),
            grpc.StatusCode.INVALID_ARGUMENT,
            "max_tokens",
        ),
        (
            K.BuildHandoffRequest(session_id="s1", brief=ok, max_tokens=100_000),
            grpc.StatusCode.INVALID_ARGUMENT,
            "max_tokens",
        ),
        (
            K.BuildHandoffRequest(session_id="s1", brief=K.HandoffBrief(summary="x" * 9000)),
            grpc.StatusCode.INVALID_ARGUMENT,
            "brief.summary",
        ),
        (
            K.BuildHandoffRequest(
                session_id="s1", brief=K.HandoffBrief(facts=[K.HandoffFact(statement="s", value="v")] * 65)
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "brief.facts",
        ),
        (
            K.BuildHandoffRequest(session_id="s1", brief=K.HandoffBrief(facts=[K.HandoffFact(statement="s")])),
            grpc.StatusCode.INVALID_ARGUMENT,
            "brief.facts[0]",
        ),
        (
            K.BuildHandoffRequest(session_id="s1", brief=K.HandoffBrief(summary="ok", artifacts=["pl_x"])),
            grpc.StatusCode.INVALID_ARGUMENT,
            "brief.artifacts[0]",
        ),
        (
            K.BuildHandoffRequest(session_id="s1", child_session_id="s1", brief=ok),
            grpc.StatusCode.INVALID_ARGUMENT,
            "child_session_id",
        ),
        (
            K.BuildHandoffRequest(session_id="s1", child_session_id="bad id/", brief=ok),
            grpc.StatusCode.INVALID_ARGUMENT,
            "child_session_id",
        ),
    ]
    for request, status, field in cases:
        err = await expect_error(ctx.stub.BuildHandoff(request, metadata=ctx.agent_md), status)
        if field:
            assert [v.path for v in err.violations][:1] == [field], err
    # Nothing was written by the refused calls: the parent has its three payloads only.
    shas = await ctx.svc.host.store.redis.smembers(  # type: ignore[union-attr]
        ctx.svc.host.store.keys.session("s1", "payloads")  # type: ignore[union-attr]
    )
    assert len(shas) == 3


async def test_who_may_build_a_hop_and_to_which_child(ctx: Ctx) -> None:
    pods, log, _ = await parent_session(ctx)
    request = K.BuildHandoffRequest(session_id="s1", child_session_id="c2", brief=brief(pods, log))
    # Another task's token may not use the parent session.
    other = ctx.svc.metadata(("agent",), agent_id=AGENT, subject=AGENT, task_id="t-other", creator="alice")
    err = await expect_error(ctx.stub.BuildHandoff(request, metadata=other), grpc.StatusCode.PERMISSION_DENIED)
    assert err.missing_permission == "session:s1"
    # A child session that exists, of another owner, that the caller may not use: refused, nothing granted.
    mallory = ctx.svc.metadata(("agent",), agent_id=AGENT, subject=AGENT, task_id="t-m", creator="mallory")
    await ctx.stub.CreateSession(K.CreateSessionRequest(session_id="c2", goal="steal"), metadata=mallory)
    err = await expect_error(ctx.stub.BuildHandoff(request, metadata=ctx.agent_md), grpc.StatusCode.PERMISSION_DENIED)
    assert err.missing_permission == "session:c2"
    await expect_error(
        ctx.stub.GetPayload(K.GetPayloadRequest(session_id="c2", ref_id=pods), metadata=mallory),
        grpc.StatusCode.NOT_FOUND,
    )
    # A child session of the same owner (a task the same user started) may receive the grant.
    sibling = ctx.svc.metadata(("agent",), agent_id="log-agent", subject="log-agent", task_id="t-s", creator="alice")
    await ctx.stub.CreateSession(K.CreateSessionRequest(session_id="c3", goal="analyse"), metadata=sibling)
    request.child_session_id = "c3"
    response = await ctx.stub.BuildHandoff(request, metadata=ctx.agent_md)
    assert pods in response.granted_ref_ids
    await ctx.stub.GetPayload(K.GetPayloadRequest(session_id="c3", ref_id=pods), metadata=sibling)


async def test_the_rpc_span_counts_confirmed_inferred_and_demoted_facts(
    start_context: Callable[..., Awaitable[Ctx]], tmp_path: Path
) -> None:
    ctx = await start_context({"telemetry": {"span_file": str(tmp_path / "spans.jsonl")}})
    pods, log, _ = await parent_session(ctx)
    response = await ctx.stub.BuildHandoff(
        K.BuildHandoffRequest(session_id="s1", brief=brief(pods, log)), metadata=ctx.agent_md
    )
    ctx.svc.host.telemetry.force_flush()
    text = await asyncio.to_thread((tmp_path / "spans.jsonl").read_text)
    spans = [json.loads(line) for line in text.splitlines()]
    [span] = [s for s in spans if s["name"].endswith("ContextService/BuildHandoff")]
    attributes = span["attributes"]
    assert (attributes["agentmesh.handoff.confirmed"], attributes["agentmesh.handoff.demoted"]) == (3, 2)
    assert attributes["agentmesh.handoff.inferred"] == 3
    assert attributes["agentmesh.handoff.tokens"] == response.token_count
