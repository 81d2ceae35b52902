"""redact_free_text remembers short texts' masked forms (issue 45): a repeat is masked as the first was,
and the `whole_text` judgement is not shared between the two modes."""

from __future__ import annotations

from agentmesh.redact import MASK
from agentmesh.redacted import redact_free_text

TOKEN = "ghp_" + "Ab3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A"  # a GitHub token's shape


def test_a_repeated_short_text_is_masked_every_time() -> None:
    text = f"tool failed: token={TOKEN}"
    first, second = redact_free_text(text), redact_free_text(text)
    assert TOKEN not in first and MASK in first
    assert second == first


def test_a_long_text_is_masked_too() -> None:
    text = "x " * 200 + f"token={TOKEN}"
    assert TOKEN not in redact_free_text(text)
    assert TOKEN not in redact_free_text(text)


def test_whole_text_and_field_modes_are_remembered_apart() -> None:
    lone = "q8Zr4Lm2Vx9Tb6Nw3Ks7Hd1Fp5Jc0Yg"  # a lone random token: a secret only as a whole text
    assert redact_free_text(lone, whole_text=False) == lone
    assert redact_free_text(lone) != lone
    assert redact_free_text(lone, whole_text=False) == lone
