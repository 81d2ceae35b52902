"""The one secret redactor for every text that leaves a service toward a model, an event, a span, a
log or Redis (docs/design.md §5, §9): tool outputs and errors (tool_svc), upstream error texts
(provider_svc).

Text: detect-secrets' vendor plugins, plus our context rules for connection strings with passwords,
private keys, bearer tokens, JWTs, AWS secret keys near a key id or label, and `password=...` style
assignments (not `PWD=/tmp`, not "passwd: No such file"). Structured values are walked value by
value (so JSON stays valid), and values under keys named like a secret are replaced whole. Measured
by `bench/bench_redaction.py` on the committed corpus tests/unit/tool/redaction_corpus.json. Core:
no grpc.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.cloudant import CloudantDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.ibm_cloud_iam import IbmCloudIamDetector
from detect_secrets.plugins.ibm_cos_hmac import IbmCosHmacDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.softlayer import SoftlayerDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector

from agentmesh.errors import AgentmeshError, Violation

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
    (re.compile(r"\bAIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])"), MASK),
    (re.compile(r"\b(?:sk|rk|pk)_live_[0-9A-Za-z]{16,}\b"), MASK),
    # JWTs.
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\b"), MASK),
    # Authorization headers.
    # (`=` only as base64 padding: `token_type=bearer expires_in=3600` holds no token.)
    (re.compile(r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/-]{16,}=*(?![A-Za-z0-9._~+/=-])"), rf"\1 {MASK}"),
    # key=value / key: value assignments of secret-named keys (quoted or bare values).
    (
        re.compile(
            r"(?i)\b([A-Za-z0-9_.-]*(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key"
            r"|client[_-]?secret|credential)[A-Za-z0-9_.-]*)([\"']?\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|[^\s,;&\"'}]+)"
        ),
        lambda m: f"{m.group(1)}{m.group(2)}{_quote_like(m.group(3))}" if _secret_assignment(m) else m.group(0),
    ),
)

# A raw AWS secret access key: 40 base64 characters standing alone (not part of a longer run).
_AWS_SECRET = re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
_AWS_KEY_ID = re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[0-9A-Z]{16}\b")
# ... or right after a label such as `aws_secret_access_key`, `SecretAccessKey`, `AWS secret key`.
_AWS_SECRET_LABEL = re.compile(r"(?i)(?:aws.{0,24}?secret|secret.?access.?key)[^\n]{0,24}?$")
_AWS_WINDOW = 160


def _aws_secret_like(token: str) -> bool:
    """Mixed case like a real key: a git SHA or a hex id (one case, hex only) is not one."""
    return (
        any(c.isupper() for c in token)
        and any(c.islower() for c in token)
        and any(c.isdigit() or c in "/+" for c in token)
    )


def _redact_aws_secrets(text: str) -> str:
    spans: list[tuple[int, int]] = []
    ids = [m.span() for m in _AWS_KEY_ID.finditer(text)]
    for m in _AWS_SECRET.finditer(text):
        if not _aws_secret_like(m.group(0)):
            continue
        start, end = m.span()
        near_id = any(s - _AWS_WINDOW <= end and start <= e + _AWS_WINDOW for s, e in ids)
        if near_id or _AWS_SECRET_LABEL.search(text, max(0, start - 64), start):
            spans.append((start, end))
    for start, end in reversed(spans):
        text = text[:start] + MASK + text[end:]
    return text


# Environment variables whose name looks secret but whose value is a path (`PWD=/tmp`, `OLDPWD`).
_PATH_KEYS = frozenset({"pwd", "oldpwd"})
_PROSE_AFTER = re.compile(r"[ \t]+[a-z]")


def _secret_assignment(m: re.Match[str]) -> bool:
    key, sep, value = m.group(1), m.group(2), m.group(3)
    if not _secret_key(key):
        return False
    if key.lower().lstrip("$") in _PATH_KEYS:
        return False
    # "passwd: No such file or directory": a message about the passwd command, not a value.
    prose = value[:1] not in ("'", '"') and ":" in sep and value.isalpha()
    return not (prose and _PROSE_AFTER.match(m.string, m.end()))


# detect-secrets plugins for the vendor formats it knows (Yelp/detect-secrets); a match is extended
# to the end of its token, so a key longer than the plugin's fixed length is masked whole.
_PLUGINS: tuple[RegexBasedDetector, ...] = (
    AWSKeyDetector(),
    AzureStorageKeyDetector(),
    CloudantDetector(),
    DiscordBotTokenDetector(),
    GitHubTokenDetector(),
    GitLabTokenDetector(),
    IbmCloudIamDetector(),
    IbmCosHmacDetector(),
    MailchimpDetector(),
    OpenAIDetector(),
    PypiTokenDetector(),
    SendGridDetector(),
    SlackDetector(),
    SoftlayerDetector(),
    SquareOAuthDetector(),
    StripeDetector(),
    TelegramBotTokenDetector(),
    TwilioKeyDetector(),
)
_TOKEN_TAIL = r"[A-Za-z0-9_\-/+=]*"


def _redact_with_plugins(text: str) -> str:
    found: set[str] = set()
    for plugin in _PLUGINS:
        for secret in plugin.analyze_string(text):
            if len(secret) >= 8 and MASK not in secret:
                found.add(secret)
    for secret in sorted(found, key=len, reverse=True):
        text = re.sub(re.escape(secret) + _TOKEN_TAIL, MASK, text)
    return text


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
    original = text
    if _MAYBE_SECRET.search(text):
        text = _redact_aws_secrets(text)
        for pattern, replacement in _PATTERNS:
            text = pattern.sub(replacement, text)
    text = _redact_with_plugins(text)
    return text, text != original


def redact_str(text: str) -> str:
    """`text` with secrets masked (for messages, hints and digests)."""
    return redact_text(text)[0]


def redact_error(error: AgentmeshError) -> AgentmeshError:
    """The error with its message, violations and metadata values masked; the same object when clean."""
    message = redact_str(error.message)
    violations = tuple(
        Violation(
            path=redact_str(v.path),
            rule=v.rule,
            expected=redact_str(v.expected),
            actual=redact_str(v.actual),
            hint=redact_str(v.hint),
        )
        for v in error.violations
    )
    metadata = {k: redact_str(v) for k, v in error.metadata.items()}
    if message == error.message and violations == error.violations and metadata == error.metadata:
        return error
    return error.replace(message=message, violations=violations, metadata=metadata)


def _secret_key(key: str) -> bool:
    return bool(_SECRET_KEY.search(key)) and not _NOT_SECRET_KEY.search(key)


def redact_value(value: Any, text: Callable[[str], tuple[str, bool]] = redact_text) -> tuple[Any, bool]:
    """A JSON value with secrets masked (strings by pattern, secret-named keys whole). `text` masks one
    string (a caller may pass a cached `redact_text`)."""
    if isinstance(value, str):
        return text(value)
    if isinstance(value, list):
        changed = False
        out_list = []
        for item in value:
            new, hit = redact_value(item, text)
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
            new, hit = redact_value(item, text)
            out[key] = new
            changed = changed or hit
        return out, changed
    return value, False
