"""agentmesh/payload_grants.py on the test Redis: a session reads a payload of another session only when
that one ref was granted to it (issue 44); the grant names where the payload is stored, never a session."""

from __future__ import annotations

import pytest
import redis.exceptions as rexc

from agentmesh.config import RedisSettings
from agentmesh.errors import NotFoundError, UnavailableError
from agentmesh.payload_grants import GRANTS_PART, grant, granted_fields
from agentmesh.payloads import PayloadStore
from agentmesh.store import Store


async def test_a_granted_ref_reads_from_the_session_storing_it_and_nothing_else_does(store: Store) -> None:
    payloads = PayloadStore(store, ttl_s=60)
    cited = await payloads.put("parent", b"09:01 ERROR pool exhausted on db-7\n", "text/plain")
    other = await payloads.put("parent", b"another output of the parent", "text/plain")
    own = await payloads.put("child", b"the child's own output", "text/plain")
    await grant(store, "child", {cited.ref_id: "parent", own.ref_id: "child"}, payloads.ttl_s)

    meta, content, partial = await payloads.read("child", cited.ref_id, line_range=(1, 1))
    assert content == b"09:01 ERROR pool exhausted on db-7\n" and not partial
    assert meta.session_id == "parent"  # where it is stored
    assert (await payloads.get("child", own.ref_id))[0].session_id == "child"
    # Its own refs are never written as grants (nothing to look up), and the grant expires with payloads.
    key = store.keys.session("child", GRANTS_PART)
    assert await store.redis.hgetall(key) == {cited.ref_id.encode(): b"parent"}
    assert 0 < await store.redis.ttl(key) <= 60
    for session, ref in (("child", other.ref_id), ("sibling", cited.ref_id)):
        with pytest.raises(NotFoundError) as info:
            await payloads.get(session, ref)
        # The message names the reader's session, not where the payload would have been.
        assert info.value.metadata == {"ref_id": ref, "session_id": session}


async def test_a_grant_to_a_payload_that_is_gone_is_not_found_in_the_readers_session(store: Store) -> None:
    payloads = PayloadStore(store, ttl_s=60)
    cited = await payloads.put("parent", b"soon deleted", "text/plain")
    await grant(store, "child", {cited.ref_id: "parent"}, payloads.ttl_s)
    await store.redis.delete(store.keys.payload("parent", cited.sha256))
    with pytest.raises(NotFoundError) as info:
        await payloads.get("child", cited.ref_id)
    assert info.value.metadata["session_id"] == "child"


async def test_an_empty_grant_writes_nothing(store: Store) -> None:
    await grant(store, "child", {}, 60)
    await grant(store, "child", {"pl_" + "a" * 64: "child"}, 60)
    assert not await store.redis.exists(store.keys.session("child", GRANTS_PART))


async def test_a_grant_is_a_durable_write_when_the_deployment_asks_for_replicas(redis_url: str) -> None:
    """With `cluster_wait_replicas` the grant waits for replicas (WAIT): on this replica-less Redis it
    cannot be confirmed, so the hop that needs it fails typed instead of trusting a write a failover loses."""
    settings = RedisSettings(url=redis_url, cluster_wait_replicas=1, cluster_wait_timeout_s=0.05)
    async with await Store.connect(settings, "dev") as durable:
        with pytest.raises(UnavailableError):
            await grant(durable, "child", {"pl_" + "b" * 64: "parent"}, 60)


async def test_redis_down_is_unavailable_naming_what_was_being_done() -> None:
    url = "redis://127.0.0.1:1/0"  # nothing listens there
    settings = RedisSettings(url=url, socket_timeout_s=0.5)
    down = Store(Store.client_for(url, settings), url=url, settings=settings, environment="dev")
    try:
        with pytest.raises(UnavailableError, match="redis unavailable during grant payloads: "):
            await grant(down, "child", {"pl_" + "c" * 64: "parent"}, 60)
        with pytest.raises(UnavailableError, match="redis unavailable during read grant: "):
            await granted_fields(down, "child", "c" * 64, "pl_" + "c" * 64)
    finally:
        await down.close()


async def test_an_outage_between_the_grant_and_the_payload_names_the_payload_read(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    payloads = PayloadStore(store, ttl_s=60)
    cited = await payloads.put("parent", b"cited", "text/plain")
    await grant(store, "child", {cited.ref_id: "parent"}, 60)

    async def refused(*args: object, **kwargs: object) -> None:
        raise rexc.ConnectionError("connection reset")

    monkeypatch.setattr(store.redis, "hgetall", refused)
    with pytest.raises(UnavailableError, match="redis unavailable during get payload: "):
        await granted_fields(store, "child", cited.sha256, cited.ref_id)
