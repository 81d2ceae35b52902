"""Secret redaction of tool outputs before they reach a model or Redis (docs/architecture.md §5, §9).

Text: patterns for connection strings with passwords, private keys, cloud / SaaS keys, bearer tokens,
JWTs and `password=...` style assignments. Structured output is walked value by value (so the JSON
stays valid), and values under keys named like a secret are replaced whole.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from tool_svc.call import CallState
from tool_svc.model import Outcome, Produced

MASK = "[REDACTED]"

_Sub = tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]

_PATTERNS: tuple[_Sub, ...] = (
    # PEM private keys, whole block.
    (
        re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.S),
        f"-----BEGIN PRIVATE KEY-----{MASK}-----END PRIVATE KEY-----",
    ),
    # scheme://user:password@host -> keep user and host.
    (re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]{1,20}://[^\s:/@'\"]+):([^\s@/'\"]+)@"), rf"\1:{MASK}@"),
    # Cloud and SaaS key formats.
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), MASK),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"), MASK),
    (re.compile(r"\bgithub_pat_[A-Za-z0-9_]{30,}\b"), MASK),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b"), MASK),
    (re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}\b"), MASK),
    (re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b"), MASK),
    (re.compile(r"\b(?:sk|rk|pk)_live_[0-9A-Za-z]{16,}\b"), MASK),
    # JWTs.
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\b"), MASK),
    # Authorization headers.
    (re.compile(r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{16,}"), rf"\1 {MASK}"),
    # key=value / key: value assignments of secret-named keys (quoted or bare values).
    (
        re.compile(
            r"(?i)\b([A-Za-z0-9_.-]*(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key"
            r"|client[_-]?secret|credential)[A-Za-z0-9_.-]*)([\"']?\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|[^\s,;&\"'}]+)"
        ),
        lambda m: f"{m.group(1)}{m.group(2)}{_quote_like(m.group(3))}" if _secret_key(m.group(1)) else m.group(0),
    ),
)

_SECRET_KEY = re.compile(
    r"(?i)(password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|client[_-]?secret"
    r"|authorization|credentials?|cookie)"
)
# Keys that contain a secret-looking word but hold counts or metadata, not secrets.
_NOT_SECRET_KEY = re.compile(
    r"(?i)(tokens|tokens?_(count|used|total|limit|budget)|(input|output|total|max|prompt|completion)_tokens"
    r"|token_type|tokenizer|password_(policy|changed_at|expires_at|length))$"
)


def _quote_like(value: str) -> str:
    if value[:1] in ("'", '"'):
        return f"{value[0]}{MASK}{value[0]}"
    return MASK


# One cheap scan first: most outputs contain nothing secret-shaped, and then no pattern needs to run.
_MAYBE_SECRET = re.compile(
    r"(?i)PRIVATE KEY|://[^\s/@]*:[^\s/@]*@|AKIA|ASIA|gh[pousr]_|github_pat_|xox[abposr]-|sk-|AIza|_live_|eyJ"
    r"|bearer|basic|token|password|passwd|pwd|secret|api[_-]?key|access[_-]?key|private[_-]?key|credential"
)


def redact_text(text: str) -> tuple[str, bool]:
    """`text` with secrets masked, and whether anything was masked."""
    if not _MAYBE_SECRET.search(text):
        return text, False
    original = text
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text, text != original


def _secret_key(key: str) -> bool:
    return bool(_SECRET_KEY.search(key)) and not _NOT_SECRET_KEY.search(key)


def redact_value(value: Any) -> tuple[Any, bool]:
    """A JSON value with secrets masked (strings by pattern, secret-named keys whole)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, list):
        changed = False
        out_list = []
        for item in value:
            new, hit = redact_value(item)
            out_list.append(new)
            changed = changed or hit
        return out_list, changed
    if isinstance(value, dict):
        changed = False
        out: dict[str, Any] = {}
        for key, item in value.items():
            if (
                _secret_key(str(key))
                and isinstance(item, str | int | float)
                and not isinstance(item, bool)
                and item != ""
            ):
                out[key] = MASK
                changed = True
                continue
            new, hit = redact_value(item)
            out[key] = new
            changed = changed or hit
        return out, changed
    return value, False


class RedactSecrets:
    """Pipeline step: secrets in the output are masked before anything stores or shows it."""

    async def __call__(self, call: CallState) -> Outcome | None:
        produced = call.produced
        assert produced is not None
        if produced.result_type == "structured":
            value, changed = redact_value(produced.value)
            call.produced = Produced("structured", value=value, notes=produced.notes)
        else:
            text, changed = redact_text(produced.text)
            call.produced = Produced("text", text=text, notes=produced.notes)
        call.redacted = changed
        return None
