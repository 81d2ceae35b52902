"""Fixtures of provider_svc tests: fake upstreams (validated against the SDKs) and settings for them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agentmesh.config import ProvidersSettings
from tests.contract.provider.fakes import FakeProvider

OPENAI_KEY = "sk-test-openai-SECRET-0123456789abcdef"
ANTHROPIC_KEY = "sk-ant-test-SECRET-fedcba9876543210"

# Retries that keep tests fast: backoff in tens of milliseconds.
FAST_RETRY = {"max_retries": 3, "base_s": 0.01, "multiplier": 2.0, "cap_s": 0.05, "jitter_s": 0.0}


def _fake(kind: Any) -> Iterator[FakeProvider]:
    fake = FakeProvider(kind).start()
    try:
        yield fake
    finally:
        fake.stop()
    assert not fake.errors, "the fake saw requests or sent responses the SDK types reject:\n" + "\n".join(fake.errors)


@pytest.fixture
def openai_fake() -> Iterator[FakeProvider]:
    yield from _fake("openai")


@pytest.fixture
def anthropic_fake() -> Iterator[FakeProvider]:
    yield from _fake("anthropic")


def backend(name: str, fake: FakeProvider, **extra: Any) -> dict[str, Any]:
    """A backend section pointing at `fake`."""
    section: dict[str, Any] = {
        "name": name,
        "type": fake.kind,
        "base_url": fake.base_url,
        "api_key": OPENAI_KEY if fake.kind == "openai" else ANTHROPIC_KEY,
        "retry": FAST_RETRY,
        "rate_limit_per_min": None,
        "models": [{"name": "m1", "input_price_per_mtok": 2.0, "output_price_per_mtok": 8.0}],
    }
    section.update(extra)
    return section


@pytest.fixture
def providers_settings() -> Callable[..., ProvidersSettings]:
    def build(*backends: dict[str, Any], **extra: Any) -> ProvidersSettings:
        scripted = {"name": "scripted", "type": "scripted", "rate_limit_per_min": None, "models": [{"name": "default"}]}
        data: dict[str, Any] = {"backends": [*backends, scripted], "default_model": "scripted/default"}
        data.update(extra)
        return ProvidersSettings.model_validate(data)

    return build
