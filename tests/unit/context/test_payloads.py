"""Payload digests (agentmesh/payload_digest.py, pure) and the session-scoped payload store (on the test Redis)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from agentmesh.dev.localredis import LocalRedis
from agentmesh.errors import InvalidRequestError, NotFoundError, PayloadTooLargeError, UnavailableError
from agentmesh.payload_digest import digest, structured_digest, text_digest
from agentmesh.payload_value import OFFLOAD_THRESHOLD_BYTES, parse_ref_id
from agentmesh.payloads import PayloadStore
from agentmesh.store import Store
from tests.unit.context.ops_session import big_json_rows, big_log

# -- structured digests -------------------------------------------------------------------------


def test_structured_digest_filters_empty_records_first_then_keeps_the_first_n() -> None:
    # (b): the first 10 records are empty, the useful ones start at the 11th.
    records: list[object] = [None, {}, {"id": None, "name": ""}, [], "", {"a": {}}, None, {}, {}, {"x": None}]
    records += [{"id": f"ORD-2025-{i:04d}", "amount": i * 10} for i in range(10, 296)]
    text = structured_digest(records, max_records=10)
    assert text.startswith("JSON records at $: total 296, shown 10, 10 empty filtered, fields: id, amount")
    for i in range(10, 20):
        assert f'[{i}] {{"id":"ORD-2025-{i:04d}","amount":{i * 10}}}' in text
    assert "ORD-2025-0020" not in text
    assert 'cut: 276 more non-empty records ([20]..[295]); read them with json_path "$[20:30]"' in text


def test_structured_digest_finds_the_record_list_inside_an_object() -> None:
    value = json.loads(big_json_rows(286, empty_first=41))
    text = structured_digest(value, max_chars=1500)
    assert "JSON records at $.items: total 286, shown" in text
    assert "41 empty filtered, fields: order_id, amount, status, discount" in text
    assert "other fields: total=286" in text
    assert "[41] " in text and "[40] " not in text
    assert len(text) <= 1500


def test_structured_digest_shrinks_to_max_chars_and_reports_what_it_shows() -> None:
    records = [{"blob": "x" * 200, "i": i} for i in range(50)]
    text = structured_digest(records, max_records=10, max_chars=800)
    assert len(text) <= 800
    shown = int(text.split("shown ")[1].split(",")[0])
    assert 1 <= shown < 10
    assert text.count("\n[") == shown


def test_structured_digest_of_a_plain_object() -> None:
    assert structured_digest({"status": "ok", "count": 3}).startswith("JSON object, fields: status, count")


# -- text digests -------------------------------------------------------------------------------


def test_text_digest_of_a_long_info_log_shows_both_error_lines() -> None:
    # (c): 3,000 INFO lines, two ERROR lines.
    log = big_log(3000, errors=(417, 2650))
    text = text_digest(log, goal="why do payments time out", max_chars=1500)
    lines = log.splitlines()
    # They differ only in numbers: shown as one message with a count, and both lines in full.
    assert f"L418 (x2, last L2651): {lines[417]}" in text
    assert f"L2651: {lines[2650]}" in text
    assert text.startswith("text: 3000 lines")
    assert "2 error" in text and "cut 29" in text  # what was cut
    assert len(text) <= 1500


def test_text_digest_shows_repeated_errors_once_with_a_count() -> None:
    lines = [f"INFO ok {i}" for i in range(2000)]
    for i in range(100, 2000, 10):
        lines[i] = f"ERROR connection refused to db-01 attempt {i}"
    lines[1500] = "WARN disk 91% full on /var"
    text = text_digest("\n".join(lines), max_chars=1200)
    assert "L101 (x189, last L1991): ERROR connection refused" in text  # line 1501 became a WARN
    assert "WARN disk 91% full" in text
    assert len(text) <= 1200


def test_text_digest_prefers_goal_keywords_chinese_too() -> None:
    lines = [f"INFO heartbeat {i}" for i in range(500)]
    lines[250] = "INFO 订单ORD-2025-0001 退款完成 amount=3000"
    text = text_digest("\n".join(lines), goal="核对订单退款", max_chars=600)
    assert "L251: INFO 订单ORD-2025-0001 退款完成" in text


def test_short_text_is_shown_whole() -> None:
    assert text_digest("a\nb", max_chars=100) == "text: 2 lines, 3 bytes, shown whole\na\nb"


def test_digest_dispatch_and_non_utf8() -> None:
    assert digest(b'[{"a": 1}]', "application/json").startswith("JSON records")
    assert digest(b'{"items": []}', "text/plain").startswith("JSON records")  # sniffed
    assert digest(b"{not json", "application/json").startswith("note: declared application/json but not parseable")
    bad = b"INFO ok\n" * 400 + b"ERROR \xff\xfe broken\n"
    text = digest(bad, "text/plain")
    assert text.startswith("note: content is not valid UTF-8")
    assert "ERROR \ufffd\ufffd broken" in text
    binary = bytes(range(256)) * 40
    assert digest(binary, "application/octet-stream").startswith("binary content: 10240 bytes")


# -- the store ----------------------------------------------------------------------------------


async def test_put_get_is_content_addressed_per_session(store: Store) -> None:
    payloads = PayloadStore(store, ttl_s=60)
    content = b"x" * (OFFLOAD_THRESHOLD_BYTES + 1)
    first = await payloads.put("s1", content, "text/plain; charset=utf-8")
    again = await payloads.put("s1", content, "text/plain; charset=utf-8")
    assert first.ref_id == again.ref_id == "pl_" + first.sha256
    assert first.size_bytes == len(content) and first.expire_at > time.time() + 50
    meta, got = await payloads.get("s1", first.ref_id)
    assert got == content and meta.media_type == "text/plain; charset=utf-8"
    assert await store.redis.ttl(store.keys.payload("s1", first.sha256)) > 50
    assert await payloads.list_shas("s1") == [first.sha256]
    with pytest.raises(NotFoundError) as info:
        await payloads.get("s2", first.ref_id)  # another session's ref
    assert info.value.metadata["ref_id"] == first.ref_id


async def test_put_over_the_maximum_writes_nothing(store: Store) -> None:
    payloads = PayloadStore(store, max_bytes=1000)
    with pytest.raises(PayloadTooLargeError):
        await payloads.put("s1", b"x" * 1001, "text/plain")
    assert await store.redis.keys("*") == []
    with pytest.raises(InvalidRequestError):
        await payloads.put("s1", b"x", "")
    with pytest.raises(InvalidRequestError):
        await payloads.put("bad{session}", b"x", "text/plain")


async def test_expired_payload_is_not_found(store: Store) -> None:
    payloads = PayloadStore(store, ttl_s=1)
    ref = await payloads.put("s1", b"soon gone", "text/plain")
    deadline = time.monotonic() + 5
    while await store.redis.exists(store.keys.payload("s1", ref.sha256)):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    with pytest.raises(NotFoundError):
        await payloads.get("s1", ref.ref_id)


async def test_read_selectors(store: Store) -> None:
    payloads = PayloadStore(store)
    rows = json.dumps({"items": [{"i": i, "big": 2**60 + i} for i in range(100)]}).encode()
    ref = (await payloads.put("s1", rows, "application/json")).ref_id
    _, content, partial = await payloads.read("s1", ref, json_path="$.items[98:]")
    assert json.loads(content) == [{"i": 98, "big": 2**60 + 98}, {"i": 99, "big": 2**60 + 99}] and partial
    _, content, partial = await payloads.read("s1", ref, json_path="$")
    assert json.loads(content) == [json.loads(rows)] and not partial
    _, content, _ = await payloads.read("s1", ref, json_path="$.items[?@.i > 97].i")
    assert json.loads(content) == [98, 99]
    text = "\n".join(f"line {i}" for i in range(1, 11)).encode()
    ref_text = (await payloads.put("s1", text, "text/plain")).ref_id
    assert (await payloads.read("s1", ref_text, line_range=(2, 3)))[1] == b"line 2\nline 3\n"
    assert (await payloads.read("s1", ref_text, line_range=(9, 50)))[1:] == (b"line 9\nline 10", True)
    assert (await payloads.read("s1", ref_text, line_range=(1, 10)))[2] is False
    assert (await payloads.read("s1", ref_text, byte_range=(0, 6)))[1] == b"line 1"
    for selector, field in (
        ({"json_path": "$.items[?"}, "json_path"),
        ({"json_path": " "}, "json_path"),
        ({"line_range": (0, 1)}, "line_range.start"),
        ({"line_range": (3, 2)}, "line_range.end"),
        ({"line_range": (11, 12)}, "line_range.start"),
        ({"byte_range": (-1, 2)}, "byte_range.start"),
        ({"byte_range": (2, 2)}, "byte_range.end"),
        ({"byte_range": (999, 1000)}, "byte_range.start"),
        ({"json_path": "$", "line_range": (1, 2)}, "selector"),
    ):
        with pytest.raises(InvalidRequestError) as info:
            await payloads.read("s1", ref_text, **selector)
        assert info.value.field == field, selector


def test_parse_ref_id() -> None:
    assert parse_ref_id("pl_" + "0" * 64) == "0" * 64
    for bad in ("", "pl_", "pl_" + "0" * 63, "pl_" + "G" * 64, "xx_" + "0" * 64, "pl_" + "0" * 64 + "/.."):
        with pytest.raises(InvalidRequestError):
            parse_ref_id(bad)


async def test_redis_down_is_unavailable(fresh_redis: LocalRedis) -> None:
    from agentmesh.config import RedisSettings

    store = await Store.connect(RedisSettings(url=fresh_redis.url, socket_timeout_s=0.5), "dev")
    try:
        payloads = PayloadStore(store)
        fresh_redis.kill()
        with pytest.raises(UnavailableError):
            await payloads.put("s1", b"x", "text/plain")
        with pytest.raises(UnavailableError):
            await payloads.get("s1", "pl_" + "0" * 64)
    finally:
        await store.close()
