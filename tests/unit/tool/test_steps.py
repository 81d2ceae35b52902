"""Pure steps: permissions, breaker, retry/backoff, redaction, calculator, query_logs, allowlist."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest

from agentmesh.errors import AgentmeshError, ErrorClass, ErrorCode
from agentmesh.redact import MASK, redact_text, redact_value
from agentmesh.urlallow import Allowlist
from tool_svc.breaker import BreakerConfig, Breakers
from tool_svc.builtin.calculator import evaluate
from tool_svc.builtin.query_logs import parse_line, search
from tool_svc.model import Caller, Permission, RetryPolicy, ToolDef
from tool_svc.permissions import allowed, check, grant_allows, required_permission
from tool_svc.retry import backoff_delay, run_with_retries

# --- permissions --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("grant", "needed", "ok"),
    [
        ("prod:ops:read", "prod:ops:read", True),
        ("prod:ops:write", "prod:ops:read", True),  # write implies read
        ("prod:ops:read", "prod:ops:write", False),
        ("*:ops:read", "staging:ops:read", True),
        ("prod:*:*", "prod:k8s:write", True),
        ("prod:ops.*:read", "prod:ops.read:read", True),
        ("prod:ops.*:read", "prod:k8s:read", False),
        ("staging:ops:write", "prod:ops:write", False),
        ("prod:ops", "prod:ops:read", False),  # malformed grants grant nothing
        ("", "prod:ops:read", False),
    ],
)
def test_grants(grant: str, needed: str, ok: bool) -> None:
    assert grant_allows(grant, *needed.split(":")) is ok


def test_any_environment_tool_needs_the_service_environment() -> None:
    tool = ToolDef(name="t", description="d", input_schema={}, permission=Permission("*", "ops", "write"))
    assert required_permission(tool, "prod") == "prod:ops:write"
    pinned = ToolDef(name="t", description="d", input_schema={}, permission=Permission("staging", "ops", "read"))
    assert required_permission(pinned, "prod") == "staging:ops:read"
    assert allowed(["staging:*:read"], required_permission(pinned, "prod"))


def test_denial_names_the_missing_grant() -> None:
    tool = ToolDef(name="restart", description="d", input_schema={}, permission=Permission("*", "ops", "write"))
    with pytest.raises(AgentmeshError) as caught:
        check(Caller(subject="a1", agent_id="a1", permissions=("prod:ops:read",)), tool, "prod")
    assert caught.value.code == ErrorCode.PERMISSION_DENIED
    assert caught.value.missing_permission == "prod:ops:write"


# --- breaker ------------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_breaker_closed_open_half_open_gradual_close() -> None:
    clock = Clock()
    breakers = Breakers(BreakerConfig(failure_threshold=3, open_s=10, ramp_s=20, ramp_start_fraction=0.25), clock)
    key = ("inst-1", "tool")
    for _ in range(2):
        assert breakers.admit(*key) is None
        breakers.record(*key, success=False)
    assert breakers.state(*key) == "closed"
    assert breakers.admit(*key) is None
    breakers.record(*key, success=False)
    assert breakers.state(*key) == "open"
    refused = breakers.admit(*key, fallback_tool="query_logs")
    assert refused is not None and refused.code == ErrorCode.CIRCUIT_OPEN
    assert refused.error_class == ErrorClass.ENGINEERING and refused.fallback_tool == "query_logs"
    assert refused.retry_after == pytest.approx(10)
    # Another instance of the same agent is not affected.
    assert breakers.admit("inst-2", "tool") is None

    clock.now += 10
    assert breakers.state(*key) == "half_open"
    assert breakers.admit(*key) is None  # the one probe
    assert breakers.admit(*key) is not None  # others wait for it
    breakers.record(*key, success=True)
    assert breakers.state(*key) == "ramping"

    # Ramping: the admitted share grows with time.
    def admitted(n: int) -> int:
        count = 0
        for _ in range(n):
            if breakers.admit(*key) is None:
                count += 1
                breakers.record(*key, success=True)
        return count

    early = admitted(100)
    clock.now += 10
    middle = admitted(100)
    assert 15 <= early <= 35  # about 25 %
    assert 55 <= middle <= 70  # about 62 %
    assert early < middle < 100
    clock.now += 10
    assert breakers.state(*key) == "closed"
    assert admitted(50) == 50


def test_breaker_failed_probe_and_failure_while_ramping_reopen() -> None:
    clock = Clock()
    breakers = Breakers(BreakerConfig(failure_threshold=1, open_s=5, ramp_s=5), clock)
    breakers.record("i", "t", success=False)
    assert breakers.state("i", "t") == "open"
    clock.now += 5
    assert breakers.admit("i", "t") is None
    breakers.record("i", "t", success=False)
    assert breakers.state("i", "t") == "open"
    clock.now += 5
    assert breakers.admit("i", "t") is None
    breakers.record("i", "t", success=True)
    assert breakers.state("i", "t") == "ramping"
    breakers.record("i", "t", success=False)
    assert breakers.state("i", "t") == "open"


def test_breaker_probe_released_without_verdict() -> None:
    clock = Clock()
    breakers = Breakers(BreakerConfig(failure_threshold=1, open_s=1), clock)
    breakers.record("i", "t", success=False)
    clock.now += 1
    assert breakers.admit("i", "t") is None
    breakers.release_probe("i", "t")
    assert breakers.admit("i", "t") is None


def test_breaker_entries_are_bounded() -> None:
    breakers = Breakers(BreakerConfig(max_entries=10))
    for i in range(100):
        breakers.admit(f"i{i}", "t")
    assert len(breakers._entries) == 10


# --- retry ------------------------------------------------------------------------------------------


def test_backoff_is_exponential_with_bounded_jitter() -> None:
    policy = RetryPolicy(max_attempts=4, initial_backoff_s=1, max_backoff_s=4, max_jitter_s=0.5)
    rng = random.Random(1)
    for retry, base in [(1, 1), (2, 2), (3, 4), (4, 4)]:
        for _ in range(50):
            delay = backoff_delay(policy, retry, rng)
            assert base <= delay <= base + 0.5


def _tool(access: str = "read", idempotent: bool = False, **fields: Any) -> ToolDef:
    return ToolDef(
        name="t",
        description="d",
        input_schema={},
        permission=Permission("*", "g", access),  # type: ignore[arg-type]
        idempotent=idempotent,
        retry=RetryPolicy(max_attempts=3, initial_backoff_s=0.5, max_backoff_s=1, max_jitter_s=0),
        fallback_tool="other",
        **fields,
    )


def _flaky(failures: int, code: ErrorCode = ErrorCode.UPSTREAM_UNAVAILABLE) -> tuple[Any, list[int]]:
    calls: list[int] = []

    async def attempt() -> str:
        calls.append(1)
        if len(calls) <= failures:
            raise AgentmeshError(code, "down")
        return "ok"

    return attempt, calls


async def _no_sleep(delay: float) -> None:
    pass


async def test_transient_faults_are_retried_for_reads() -> None:
    attempt, calls = _flaky(2)
    done = await run_with_retries(attempt, _tool("read"), remaining=lambda: None, sleep=_no_sleep)
    assert done.value == "ok" and done.attempts == 3 and len(calls) == 3


async def test_writes_are_not_retried_unless_idempotent() -> None:
    attempt, calls = _flaky(1)
    done = await run_with_retries(attempt, _tool("write"), remaining=lambda: None, sleep=_no_sleep)
    assert done.error is not None and done.error.code == ErrorCode.UPSTREAM_UNAVAILABLE and len(calls) == 1
    attempt, calls = _flaky(1)
    done = await run_with_retries(attempt, _tool("write", idempotent=True), remaining=lambda: None, sleep=_no_sleep)
    assert done.value == "ok" and len(calls) == 2


async def test_non_transient_errors_are_not_retried() -> None:
    attempt, calls = _flaky(1, ErrorCode.UPSTREAM_NOT_FOUND)
    done = await run_with_retries(attempt, _tool("read"), remaining=lambda: None, sleep=_no_sleep)
    assert done.error is not None and done.error.code == ErrorCode.UPSTREAM_NOT_FOUND and len(calls) == 1


async def test_no_retry_outlives_the_deadline() -> None:
    attempt, calls = _flaky(5)
    done = await run_with_retries(attempt, _tool("read"), remaining=lambda: 0.3, sleep=_no_sleep)
    assert len(calls) == 1 and done.error is not None


async def test_timeout_is_upstream_timeout_with_fallback() -> None:
    async def hang() -> str:
        await asyncio.sleep(10)
        return "never"

    tool = _tool("write", timeout_s=0.05)
    done = await run_with_retries(hang, tool, remaining=lambda: None, sleep=_no_sleep)
    assert done.error is not None and done.error.code == ErrorCode.UPSTREAM_TIMEOUT
    assert done.error.fallback_tool == "other" and done.attempts == 1


# --- redaction ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("db=postgres://app:hunter2@db:5432/pay", "hunter2"),
        ("AKIAZ7QW3ER5TY8UI2OP is the key", "AKIAZ7QW3ER5TY8UI2OP"),
        ("token ghp_Q7vX2mR9kLp4Tz8Wn3Ys6Hd1Jf5Bc0GaEu2K", "ghp_Q7vX2mR9kLp4Tz8Wn3Ys6Hd1Jf5Bc0GaEu2K"),
        ("Authorization: Bearer abcdefghijklmnop.qrstuvwxyz123456", "abcdefghijklmnop.qrstuvwxyz123456"),
        ("password=s3cr3t! next", "s3cr3t!"),
        ('{"api_key": "q7Wz2k9Xf4Lm"}', "q7Wz2k9Xf4Lm"),
        ("OPENAI_API_KEY=sk-proj-Rk3Vq8Xm2Lp7Tz4Wn9Ys1Hd6", "sk-proj-Rk3Vq8Xm2Lp7Tz4Wn9Ys1Hd6"),
        (
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6\n"
            "-----END RSA PRIVATE KEY-----",
            "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6",
        ),
        ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N", "dozjgNryP4J3jVmNHl0w5N"),
    ],
)
def test_secrets_are_redacted_from_text(text: str, secret: str) -> None:
    redacted, changed = redact_text(text)
    assert changed and secret not in redacted and MASK in redacted


def test_plain_text_is_untouched() -> None:
    text = "payment-svc ERROR timeout after 2300ms order=ORD-2025-0002 tokens=512"
    assert redact_text(text) == (text, False)


def test_structured_values_are_redacted_by_key_and_pattern() -> None:
    value, changed = redact_value(
        {"password": "x", "nested": [{"client_secret": "y", "dsn": "mysql://u:pw@h/db"}], "total_tokens": 42}
    )
    assert changed
    assert value["password"] == MASK
    assert value["nested"][0]["client_secret"] == MASK
    assert "pw" not in value["nested"][0]["dsn"]
    assert value["total_tokens"] == 42


# --- calculator ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "result"),
    [("1 + 2 * 3", 7), ("(17 * 3) / 4", 12.75), ("2 ** 10", 1024), ("sqrt(16) + abs(-2)", 6.0), ("7 // 2 % 3", 0)],
)
def test_calculator(expression: str, result: float) -> None:
    assert evaluate(expression) == pytest.approx(result)


@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os')",
        "1 / 0",
        "2 ** 100000",
        "(10 ** 1000) ** 1000",
        "x + 1",
        "open('f')",
        "1 +",
        "[1, 2]",
        "1e308 * 10",
    ],
)
def test_calculator_refuses_with_a_contract_error(expression: str) -> None:
    with pytest.raises(AgentmeshError) as caught:
        evaluate(expression)
    assert caught.value.code == ErrorCode.SCHEMA_INVALID
    assert caught.value.violations[0].path == "$.expression"


# --- query_logs ---------------------------------------------------------------------------------------


def test_log_lines_parse_in_both_formats() -> None:
    line = parse_line('{"ts": "2025-06-01T10:00:00Z", "level": "warn", "msg": "x"}', "svc")
    assert line.level == "WARN" and line.service == "svc" and line.ts is not None
    text = parse_line("2025-06-01 10:00:00 [ERROR] payment-svc: boom", "svc")
    assert text.level == "ERROR" and text.service == "payment-svc"


def test_query_logs_filters(tmp_path: Path) -> None:
    (tmp_path / "pay.log").write_text(
        "2025-06-01T10:00:00Z INFO pay ok\n"
        "2025-06-01T10:05:00Z ERROR pay timeout talking to bank\n"
        "2025-06-01T11:00:00Z ERROR pay disk full\n"
        "garbage line without a timestamp\n",
        encoding="utf-8",
    )
    out = search(tmp_path, {"service": "pay", "level": "ERROR"})
    assert "timeout" in out and "disk full" in out and "INFO" not in out
    out = search(tmp_path, {"service": "pay", "since": "2025-06-01T10:30:00Z"})
    assert "disk full" in out and "timeout" not in out
    out = search(tmp_path, {"service": "pay", "contains": "BANK"})
    assert "timeout" in out and "disk" not in out
    out = search(tmp_path, {"service": "pay", "limit": 1})
    assert out.splitlines()[1].startswith("garbage") and "showing the last 1" in out
    with pytest.raises(AgentmeshError) as caught:
        search(tmp_path, {"service": "nope"})
    assert caught.value.code == ErrorCode.SCHEMA_INVALID and "pay" in caught.value.violations[0].hint
    with pytest.raises(AgentmeshError):
        search(tmp_path, {"service": "pay", "since": "yesterday"})


# --- allowlist ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("http://127.0.0.1:8080/api/x", True),
        ("http://127.0.0.1:9999/api", True),
        ("http://127.0.0.1:8080/apix", False),
        ("http://127.0.0.1:8080/other", False),
        ("https://svc.example.com/v1/metrics", True),
        ("https://a.b.example.com/", True),
        ("https://example.com/", False),
        ("https://example.com.evil.io/", False),
        ("http://svc.example.com/v1/metrics", False),
        ("https://user:pw@svc.example.com/", False),
        ("https://svc.example.com:8443/", False),
        ("http://127.0.0.1:8080/api/../admin", False),
        ("ftp://127.0.0.1/api", False),
        ("not a url", False),
    ],
)
def test_allowlist(url: str, ok: bool) -> None:
    allowlist = Allowlist(["http://127.0.0.1:*/api", "https://*.example.com/"])
    assert allowlist.allows(url) is ok


def test_allowlist_rejects_bad_patterns() -> None:
    with pytest.raises(ValueError):
        Allowlist(["file:///etc"])
