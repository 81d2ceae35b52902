"""HTTP plumbing of the adapters: verbatim JSON numbers and credential scrubbing."""

from __future__ import annotations

import json

from provider_svc.models._http import HttpBackend, dumps_raw, loads_raw


def test_numbers_survive_a_round_trip_verbatim() -> None:
    text = (
        '{"id":123456789012345678901234567890,"price":19.990,"tiny":1e-7,'
        '"s":"caf\\u00e9","n":null,"ok":true,"l":[1,2.50]}'
    )
    value = loads_raw(text)
    assert value["id"] == 123456789012345678901234567890
    assert (
        dumps_raw(value)
        == '{"id":123456789012345678901234567890,"price":19.990,"tiny":1e-7,"s":"café","n":null,"ok":true,"l":[1,2.50]}'
    )
    assert json.loads(dumps_raw(value)) == json.loads(text)


async def test_scrub_removes_our_credentials_and_key_like_tokens() -> None:
    key = "sk-proj-REAL-secret-0123456789"
    backend = HttpBackend("up", "http://127.0.0.1:1/v1", auth_headers={"authorization": f"Bearer {key}"},
                          static_headers={"openai-organization": "org-very-private-1234"})  # fmt: skip
    try:
        text = f"Incorrect API key provided: {key}; org org-very-private-1234; other sk-abcdef123456; plain words"
        scrubbed = backend.scrub(text)
        assert key not in scrubbed and "org-very-private-1234" not in scrubbed and "sk-abcdef123456" not in scrubbed
        assert scrubbed.endswith("plain words") and "Incorrect API key provided" in scrubbed
    finally:
        await backend.aclose()
    short = HttpBackend("up", "http://127.0.0.1:1/v1", auth_headers={"authorization": "Bearer k"})
    try:
        assert short.scrub("keep every k in the text") == "keep every k in the text"
    finally:
        await short.aclose()
