"""RequestRecorder (provider_svc/recording.py): the sent request, secrets masked, its strings' results
cached within bounds."""

from __future__ import annotations

import asyncio
import json

import pytest

from agentmesh.redact import MASK, redact_value
from provider_svc.models._http import loads_raw
from provider_svc.models.base import SentRequest
from provider_svc.recording import INLINE_BYTES, RequestRecorder


def _sent(body: object) -> SentRequest:
    raw = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    return SentRequest("openai.chat.completions", lambda: raw)


def test_masks_like_the_redactor_and_keeps_a_clean_body_byte_for_byte() -> None:
    body = {
        "model": "m1",
        "messages": [
            {"role": "user", "content": "connect with password=hunter2-secret please"},
            {"role": "user", "content": "token ghp_Q7vX2mR9kLp4Tz8Wn3Ys6Hd1Jf5Bc0GaEu2K"},
        ],
        "metadata": {"api_key": "plain-looking-value"},
        "temperature": 0.5,
    }
    recorded = RequestRecorder().record_now(_sent(body))
    expected, changed = redact_value(body)
    assert recorded.redacted and changed
    assert json.loads(recorded.body_json) == expected
    assert "hunter2" not in recorded.body_json and "plain-looking-value" not in recorded.body_json
    assert recorded.body_json.count(MASK) == 3

    raw = b'{"model":"m1","messages":[{"role":"user","content":"caf\xc3\xa9 1.50"}],"temperature":0.10}'
    clean = RequestRecorder().record_now(SentRequest("openai.chat.completions", lambda: raw))
    assert clean.body_json == raw.decode() and not clean.redacted  # 0.10 stays 0.10
    masked = RequestRecorder().record_now(SentRequest("x", lambda: raw.replace(b"1.50", b"password=abcdefgh123 1.50")))
    assert '"temperature":0.10' in masked.body_json and loads_raw(masked.body_json)["model"] == "m1"


def test_repeated_strings_are_masked_once_within_the_bounds() -> None:
    recorder = RequestRecorder(max_entries=50, max_chars=10_000)
    history = [{"role": "user", "content": f"message number {i} " + "x" * 40} for i in range(20)]
    recorder.record_now(_sent({"model": "m1", "messages": history}))
    misses = recorder.misses
    # The next step resends the same messages plus one: only the new text is masked anew.
    recorder.record_now(_sent({"model": "m1", "messages": [*history, {"role": "user", "content": "a new one here"}]}))
    assert recorder.misses == misses + 1 and recorder.hits >= 20
    # Bounded by entries and by characters held.
    for i in range(200):
        recorder.record_now(_sent({"model": "m1", "messages": [{"role": "user", "content": f"{i} " + "y" * 300}]}))
    assert recorder.entries <= 50
    assert sum(len(k) + len(v[0]) for k, v in recorder._cache.items()) <= 10_000
    # A string too large to hold is masked but never cached.
    before = recorder.entries
    recorder.record_now(_sent({"model": "m1", "messages": [{"role": "user", "content": "z" * 5_000}]}))
    assert recorder.entries <= before + 1


async def test_concurrent_records_off_the_event_loop_agree() -> None:
    recorder = RequestRecorder(max_entries=8)
    bodies = [
        {
            "model": "m1",
            # Every other body is over INLINE_BYTES: masked in a worker thread, beside the ones on the loop.
            "messages": [
                {
                    "role": "user",
                    "content": f"shared text {i % 3} password=s3cr3t-{i % 3}xx" + " padding" * (i % 2) * INLINE_BYTES,
                }
            ],
        }
        for i in range(30)
    ]
    results = await asyncio.gather(*(recorder.record(_sent(b)) for b in bodies))
    for body, result in zip(bodies, results, strict=True):
        assert json.loads(result.body_json) == redact_value(body)[0] and result.redacted


async def test_a_small_body_is_masked_on_the_loop_and_a_large_one_in_a_worker_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A thread hand-off per model call cost a third of provider_svc's CPU (issue 45): only a large body pays it."""
    threaded: list[int] = []
    real = asyncio.to_thread

    async def counting(func, /, *args, **kwargs):
        threaded.append(len(args[1]))
        return await real(func, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", counting)
    recorder = RequestRecorder()
    small = {"model": "m1", "messages": [{"role": "user", "content": "password=hunter2-secret"}]}
    large = {"model": "m1", "messages": [{"role": "user", "content": "password=hunter2-secret " + "y" * INLINE_BYTES}]}
    for body in (small, large):
        recorded = await recorder.record(_sent(body))
        assert json.loads(recorded.body_json) == redact_value(body)[0] and recorded.redacted
    assert len(threaded) == 1 and threaded[0] > INLINE_BYTES
