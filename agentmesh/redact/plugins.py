"""detect-secrets' vendor plugins (Yelp/detect-secrets), where they find what gitleaks' rules do not.

A plugin reports a secret's text, not its place: every occurrence that is a whole token is a finding. An
occurrence inside a longer run of letters and digits is not: detect-secrets' AWS pattern has no word
boundary, so `TODAYINASIAASACKOFRICEFELLOVER` holds an "ASIA" key id (and the masker would widen the hit
to the whole word). Hits shorter than 8 characters are ignored: a plugin that reports only a prefix
(GitLab's `glpat-`) would otherwise mask every `glpat-`.
"""

from __future__ import annotations

from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.cloudant import CloudantDetector
from detect_secrets.plugins.ibm_cloud_iam import IbmCloudIamDetector
from detect_secrets.plugins.ibm_cos_hmac import IbmCosHmacDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.softlayer import SoftlayerDetector

from agentmesh.redact.placeholders import is_placeholder
from agentmesh.redact.spans import MASK, Finding

# Kept where they add recall (bench/bench_redaction.py, `--plugins` shows each one's share): AWS key ids
# outside gitleaks' base32 alphabet and AWS's own EXAMPLE keys (which gitleaks allowlists), SendGrid keys
# of other lengths; and the formats gitleaks has no rule for (Azure storage account keys, Cloudant, IBM
# Cloud IAM and COS HMAC, SoftLayer). The other vendor plugins found nothing gitleaks' rules and our
# context rules did not, on either corpus, and one (Telegram) only masked near misses: dropped.
PLUGINS: tuple[RegexBasedDetector, ...] = (
    AWSKeyDetector(),
    AzureStorageKeyDetector(),
    CloudantDetector(),
    IbmCloudIamDetector(),
    IbmCosHmacDetector(),
    SendGridDetector(),
    SoftlayerDetector(),
)
_MIN_LENGTH = 8
_TOKEN_END = frozenset(" \t\r\n\"'`,;")


def _token_at(text: str, start: int) -> str:
    """The run of text from `start` up to a space, quote or separator: a `xoxp-####...` stand-in whole."""
    end = start
    while end < len(text) and text[end] not in _TOKEN_END:
        end += 1
    return text[start:end]


def _whole_token(text: str, start: int, end: int) -> bool:
    """Whether text[start:end] is not glued to more letters or digits on either side."""
    before = text[start - 1] if start > 0 else " "
    after = text[end] if end < len(text) else " "
    return not (before.isascii() and before.isalnum()) and not (after.isascii() and after.isalnum())


def findings(text: str, plugins: tuple[RegexBasedDetector, ...] = PLUGINS) -> list[Finding]:
    out: list[Finding] = []
    for plugin in plugins:
        for secret in set(plugin.analyze_string(text)):
            if len(secret) < _MIN_LENGTH or MASK in secret:
                continue
            start = text.find(secret)
            while start >= 0:
                if not _whole_token(text, start, start + len(secret)) or is_placeholder(_token_at(text, start)):
                    start = text.find(secret, start + 1)
                    continue
                out.append(Finding(start, start + len(secret), f"detect-secrets:{plugin.secret_type}"))
                start = text.find(secret, start + len(secret))
    return out
