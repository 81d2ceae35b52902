"""Page tokens of ListTasks / ListApprovals (dispatcher_svc/pagetoken.py) and page sizes, as an adversary."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentmesh.errors import AgentmeshError, ErrorCode
from dispatcher_svc.listing import ApprovalFilter, TaskFilter, page_size_of
from dispatcher_svc.model import TaskStatus
from dispatcher_svc.pagetoken import MAX_TOKEN_CHARS, REASONS, PageCursor, PageTokens, filter_hash

KEY = "unit-test-key-" + "x" * 32
FILTERS = TaskFilter(agent_id="ops").digest()


def reason(token: str, filters: str = FILTERS, tokens: PageTokens | None = None, now: float | None = None) -> str:
    with pytest.raises(AgentmeshError) as caught:
        (tokens or PageTokens(KEY, "tasks")).parse(token, filters, now=now)
    err = caught.value
    assert err.code == ErrorCode.INVALID_REQUEST
    assert err.violations[0].path == "page_token"
    assert err.metadata["reason"] in REASONS
    return err.metadata["reason"]


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def test_a_token_round_trips_its_cursor() -> None:
    tokens = PageTokens(KEY, "tasks")
    token = tokens.issue(PageCursor(1_700_000_000_123, "t-ü/x y"), FILTERS)
    assert tokens.parse(token, FILTERS) == PageCursor(1_700_000_000_123, "t-ü/x y")
    # Another replica with the same auth.key reads it.
    assert PageTokens(KEY, "tasks").parse(token, FILTERS).ms == 1_700_000_000_123


def test_tampering_with_the_cursor_breaks_the_signature() -> None:
    token = PageTokens(KEY, "tasks").issue(PageCursor(5, "a"), FILTERS)
    body, _, mac = token.partition(".")
    data = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    data["m"] = 999  # skip ahead, or forge an expiry far in the future
    data["e"] += 10**9
    forged = base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()
    assert reason(f"{forged}.{mac}") == "page_token.signature"
    assert reason(token[:-3] + ("AAA" if not token.endswith("AAA") else "BBB")) == "page_token.signature"


def test_a_token_signed_with_another_key_is_refused() -> None:
    token = PageTokens("another-key-" + "y" * 32, "tasks").issue(PageCursor(5, "a"), FILTERS)
    assert reason(token) == "page_token.signature"
    # Without auth.key a fixed development key signs: still not the configured one's.
    assert reason(PageTokens(None, "tasks").issue(PageCursor(5, "a"), FILTERS)) == "page_token.signature"


def test_a_token_used_with_other_filters_or_for_another_list_is_refused() -> None:
    token = PageTokens(KEY, "tasks").issue(PageCursor(5, "a"), FILTERS)
    assert reason(token, TaskFilter(agent_id="billing").digest()) == "page_token.filter"
    assert reason(token, TaskFilter(agent_id="ops", status=TaskStatus.FAILED).digest()) == "page_token.filter"
    assert reason(token, FILTERS, PageTokens(KEY, "approvals")) == "page_token.malformed"


def test_an_expired_token_is_refused() -> None:
    tokens = PageTokens(KEY, "tasks", ttl_s=60)
    token = tokens.issue(PageCursor(5, "a"), FILTERS, now=1000.0)
    assert tokens.parse(token, FILTERS, now=1059.0) == PageCursor(5, "a")
    assert reason(token, tokens=tokens, now=1061.0) == "page_token.expired"


@pytest.mark.parametrize(
    "token",
    ["", ".", "abc", "abc.", ".abc", "a.b.c", "!!!.???", "x" * (MAX_TOKEN_CHARS + 1), "\x00.\x00", "é.é"],
)
def test_garbage_is_malformed_or_unsigned(token: str) -> None:
    assert reason(token) in ("page_token.malformed", "page_token.signature")


def test_a_signed_body_that_is_not_a_token_is_malformed() -> None:
    tokens = PageTokens(KEY, "tasks")
    for body in (b"[]", b"{}", b'{"k":"tasks","m":"5","i":"a","f":"x","e":1}', b"\xff\xfe", b"null"):
        token = f"{b64(body)}.{b64(tokens._sign(body))}"
        assert reason(token, tokens=tokens) == "page_token.malformed"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200) | st.binary(max_size=200).map(lambda b: base64.urlsafe_b64encode(b).decode()))
def test_fuzzed_tokens_never_crash(token: str) -> None:
    tokens = PageTokens(KEY, "tasks")
    try:
        tokens.parse(token, FILTERS)
    except AgentmeshError as err:
        assert err.code == ErrorCode.INVALID_REQUEST
        assert err.metadata["reason"] in REASONS
    else:  # pragma: no cover - a random string is never a signed token
        raise AssertionError(f"accepted {token!r}")


@given(st.integers(min_value=0, max_value=2**31 - 1))
def test_page_sizes_default_and_clamp(size: int) -> None:
    got = page_size_of(size)
    assert got == (50 if size == 0 else min(size, 100))


def test_a_negative_page_size_is_invalid() -> None:
    with pytest.raises(AgentmeshError) as caught:
        page_size_of(-1)
    assert caught.value.code == ErrorCode.INVALID_REQUEST


def test_filter_digests_differ_by_every_filter() -> None:
    digests = {
        TaskFilter().digest(),
        TaskFilter(agent_id="a").digest(),
        TaskFilter(created_by="a").digest(),
        TaskFilter(root_task_id="a").digest(),
        TaskFilter(status=TaskStatus.RUNNING).digest(),
        TaskFilter(created_after_ms=0).digest(),
        TaskFilter(created_before_ms=0).digest(),
    }
    assert len(digests) == 7
    assert ApprovalFilter(kind="settlement").digest() != ApprovalFilter().digest()
    assert filter_hash({"a": 1, "b": 2}) == filter_hash({"b": 2, "a": 1})
