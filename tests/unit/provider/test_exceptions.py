"""Upstream HTTP answers -> our error codes (docs/design.md §3), Retry-After parsing."""

from __future__ import annotations

import email.utils
import json
import time

import pytest

from agentmesh.errors import ErrorClass, ErrorCode
from agentmesh.rpc.status import GRPC_STATUS
from provider_svc.exceptions import ERROR_BODY_LIMIT, error_from_status, malformed, parse_retry_after


def _openai(message: str, code: str | None = None, kind: str = "invalid_request_error") -> str:
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}})


def _anthropic(message: str, kind: str) -> str:
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}})


@pytest.mark.parametrize(
    ("status", "body", "code", "grpc_status"),
    [
        (429, _openai("Rate limit reached", kind="requests"), ErrorCode.RATE_LIMITED, "RESOURCE_EXHAUSTED"),
        (500, _openai("server error", kind="server_error"), ErrorCode.UPSTREAM_UNAVAILABLE, "UNAVAILABLE"),
        (502, "<html>bad gateway</html>", ErrorCode.UPSTREAM_UNAVAILABLE, "UNAVAILABLE"),
        (529, _anthropic("Overloaded", "overloaded_error"), ErrorCode.UPSTREAM_UNAVAILABLE, "UNAVAILABLE"),
        (400, _openai("maximum context length is 128000 tokens", "context_length_exceeded"),
         ErrorCode.CONTEXT_LENGTH_EXCEEDED, "INVALID_ARGUMENT"),
        (400, _anthropic("prompt is too long: 210000 tokens > 200000 maximum", "invalid_request_error"),
         ErrorCode.CONTEXT_LENGTH_EXCEEDED, "INVALID_ARGUMENT"),
        (400, _openai("rejected by our content management policy", "content_filter"), ErrorCode.CONTENT_FILTERED,
         "INVALID_ARGUMENT"),
        (400, _openai("Unrecognized request argument: foo"), ErrorCode.UPSTREAM_REJECTED, "INVALID_ARGUMENT"),
        (422, "unprocessable", ErrorCode.UPSTREAM_REJECTED, "INVALID_ARGUMENT"),
        (401, _anthropic("invalid x-api-key", "authentication_error"), ErrorCode.PROVIDER_AUTH_FAILED,
         "FAILED_PRECONDITION"),
        (403, _openai("not allowed", kind="permission_error"), ErrorCode.PROVIDER_AUTH_FAILED, "FAILED_PRECONDITION"),
        (404, _openai("The model `gpt-9` does not exist", "model_not_found"), ErrorCode.UPSTREAM_NOT_FOUND,
         "NOT_FOUND"),
    ],
)  # fmt: skip
def test_status_table(status: int, body: str, code: ErrorCode, grpc_status: str) -> None:
    err = error_from_status("up", status, body.encode(), {})
    assert err.code == code
    assert err.error_class == ErrorClass.ENGINEERING
    assert GRPC_STATUS[err.code].name == grpc_status
    assert err.http_status == status and err.metadata["http_status"] == str(status)
    assert err.retryable == (status == 429 or status >= 500)
    assert f"HTTP {status}" in err.message or "credentials" in err.message


def test_upstream_text_is_clipped() -> None:
    err = error_from_status("up", 400, ("x" * 5000).encode(), {})
    assert len(err.message) < ERROR_BODY_LIMIT + 100


def test_retry_after_forms() -> None:
    assert parse_retry_after({"Retry-After": "7"}) == 7
    assert parse_retry_after({"retry-after": "0.25"}) == 0.25
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    now = time.time()
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert parse_retry_after({"retry-after": date}, now=now) == pytest.approx(30, abs=1.5)
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None
    assert parse_retry_after({"retry-after": "-5"}) == 0


def test_429_and_503_carry_retry_after() -> None:
    assert error_from_status("up", 429, b"{}", {"retry-after": "3"}).retry_after == 3
    assert error_from_status("up", 503, b"{}", {"retry-after": "2"}).retry_after == 2


def test_malformed_is_not_retryable() -> None:
    err = malformed("up", "no choices")
    assert err.code == ErrorCode.UPSTREAM_UNAVAILABLE and not err.retryable
    assert err.metadata["reason"] == "malformed_response"
