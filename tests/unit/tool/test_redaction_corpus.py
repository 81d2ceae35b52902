"""The redactor against our own committed corpus (issue 21, written here: recall >= 0.98, false positives
<= 1%; the public corpus is tests/unit/redact), and the error texts tool_svc builds from upstream bodies
(issue 21: nothing secret reaches a model)."""

from __future__ import annotations

import json

import pytest

from agentmesh.errors import AgentmeshError, ErrorCode, Violation
from agentmesh.redact import MASK, redact_error, redact_text
from bench.bench_redaction import CORPUS, load_corpus, score
from tests.unit.tool.make_redaction_corpus import build
from tool_svc.http import HttpBody, body_output, snippet, status_error
from tool_svc.model import ResultKind, ToolDef

AWS_ID = "AKIAQ3EGRTW7LWZ5XY4N"
AWS_SECRET = "u7Rk2vQ9zP+4sLmN8bXcD1eFgH3iJ5kL6mN0pQrS"
BEARER = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiI0MiJ9.c2lnbmF0dXJlLXNlY3JldC12YWx1ZQ"
DSN_PASSWORD = "Zq8!vT3mP2xW9k"


def test_the_corpus_is_the_generators_output() -> None:
    assert json.loads(CORPUS.read_text(encoding="utf-8")) == json.loads(json.dumps(build()))


def test_corpus_size_and_formats() -> None:
    corpus = load_corpus()
    assert len(corpus["secrets"]) >= 300
    assert len({e["format"] for e in corpus["secrets"]}) >= 15
    assert len(corpus["near_misses"]) >= 300


def test_recall_and_false_positive_rate() -> None:
    result = score(load_corpus())
    missed = [(e["format"], e["redacted"][:120]) for e in result.missed]
    flagged = [(e["format"], e["text"][:120]) for e in result.false_positives]
    assert result.recall >= 0.98, missed
    assert result.false_positive_rate <= 0.01, flagged


@pytest.mark.parametrize(
    "text",
    [
        "PWD=/tmp",
        "OLDPWD=/home/app PWD=/tmp",
        "passwd: No such file or directory",
        "cat: /etc/passwd: No such file or directory",
        "token_type=bearer expires_in=3600",
        "commit 3f786850e387550fdab836ed7e6dc881de23001b",
        "AKIAIOSFODNN7EXAMPLE",  # AWS's documentation key (gitleaks allowlists it; an AKIA key beside it is masked)
    ],
)
def test_not_secrets(text: str) -> None:
    assert redact_text(text) == (text, False)


@pytest.mark.parametrize(
    "text",
    [
        f"{AWS_ID} {AWS_SECRET}",
        f"aws_secret: {AWS_SECRET}",
        f"credentials {AWS_ID}:{AWS_SECRET} rejected",
        f'"SecretAccessKey": "{AWS_SECRET}"',
    ],
)
def test_raw_aws_secret_access_key(text: str) -> None:
    out, changed = redact_text(text)
    assert changed and AWS_SECRET not in out and MASK in out


def _tool(result_type: ResultKind = "structured") -> ToolDef:
    return ToolDef(
        name="orders",
        description="d",
        input_schema={"type": "object"},
        result_type=result_type,
        endpoint_url="http://127.0.0.1:1/x",
    )


@pytest.mark.parametrize("status", [404, 429, 500, 503, 400])
def test_status_errors_quote_no_secret(status: int) -> None:
    content = f"no such order; key {AWS_ID} {AWS_SECRET}; Authorization: Bearer {BEARER}".encode()
    err = status_error(_tool(), HttpBody(status, {}, content, False))
    assert AWS_ID not in err.message and AWS_SECRET not in err.message and BEARER not in err.message
    assert "no such order" in err.message


def test_output_invalid_quotes_no_secret() -> None:
    content = f"could not connect to postgres://app:{DSN_PASSWORD}@db:5432/main".encode()
    with pytest.raises(AgentmeshError) as caught:
        body_output(_tool(), HttpBody(200, {"content-type": "text/plain"}, content, False))
    assert caught.value.code == ErrorCode.OUTPUT_INVALID
    assert DSN_PASSWORD not in caught.value.message and "postgres://app:" in caught.value.message


def test_snippet_drops_a_secret_cut_at_the_window() -> None:
    content = b"x " * 599 + f"{AWS_SECRET}{AWS_SECRET}".encode()
    assert AWS_SECRET[:10] not in snippet(content)


def test_redact_error_covers_violations_and_metadata() -> None:
    err = AgentmeshError(
        ErrorCode.OUTPUT_INVALID,
        f"bad output {AWS_ID}",
        violations=[Violation(path="$.key", rule="type", actual=AWS_SECRET, hint=f"password={DSN_PASSWORD}")],
        metadata={"upstream": f"Bearer {BEARER}"},
        fallback_tool="orders_cache",
    )
    clean = redact_error(err)
    text = repr((clean.message, clean.violations, clean.metadata))
    assert AWS_ID not in text and DSN_PASSWORD not in text and BEARER not in text
    assert clean.code == err.code and clean.fallback_tool == "orders_cache"
    untouched = AgentmeshError(ErrorCode.UPSTREAM_NOT_FOUND, "no such order")
    assert redact_error(untouched) is untouched
