"""detect-secrets' vendor plugins (Yelp/detect-secrets), where they find what gitleaks' rules do not.

A plugin reports a secret's text, not its place: every occurrence is a finding (the masker widens each to
its whole token, so a plugin that reports a prefix still masks the token). Hits shorter than 8 characters
are ignored: a plugin that reports only a prefix (GitLab's `glpat-`) would otherwise mask every `glpat-`.
"""

from __future__ import annotations

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

from agentmesh.redact.placeholders import is_placeholder
from agentmesh.redact.spans import MASK, Finding

PLUGINS: tuple[RegexBasedDetector, ...] = (
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
_MIN_LENGTH = 8
_TOKEN_END = frozenset(" \t\r\n\"'`,;")


def _token_at(text: str, start: int) -> str:
    """The run of text from `start` up to a space, quote or separator: a `xoxp-####...` stand-in whole."""
    end = start
    while end < len(text) and text[end] not in _TOKEN_END:
        end += 1
    return text[start:end]


def findings(text: str, plugins: tuple[RegexBasedDetector, ...] = PLUGINS) -> list[Finding]:
    out: list[Finding] = []
    for plugin in plugins:
        for secret in set(plugin.analyze_string(text)):
            if len(secret) < _MIN_LENGTH or MASK in secret:
                continue
            start = text.find(secret)
            while start >= 0:
                if is_placeholder(_token_at(text, start)):
                    start = text.find(secret, start + len(secret))
                    continue
                out.append(Finding(start, start + len(secret), f"detect-secrets:{plugin.secret_type}"))
                start = text.find(secret, start + len(secret))
    return out
