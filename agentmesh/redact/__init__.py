"""The one secret redactor for every text that leaves a service toward a model, an event, a span, a
log or Redis (docs/design.md §5, §9): tool outputs and errors (tool_svc), upstream error texts
(provider_svc), the requests a step sent (provider_svc/recording.py), MCP servers' texts.

Detectors (each reports character spans, `spans.Finding`):
- gitleaks' rule set (`gitleaks_rules`: its vendored gitleaks.toml compiled with RE2, with its keyword
  prefilter, entropy thresholds and allowlists): the industry's vendor formats and generic keys;
- detect-secrets' vendor plugins (`plugins`) for the formats they add;
- one assignment grammar (`assignments`): values of secret-named keys in every syntax of config, code,
  logs and command lines;
- our context rules (`context`): URL credentials, auth schemes, private key blocks, JWTs, AWS secret
  keys near their id, a text that is one lone high-entropy token.
Then `spans.mask` masks each finding's whole token and every other occurrence of it, so `changed` is
True only when every detected secret is gone. Structured values are walked value by value (so JSON stays
valid), and values under keys named like a secret are replaced whole. Measured by
`bench/bench_redaction.py` on gitleaks' public samples (tests/secretcorpus). Core: no grpc.
"""

from __future__ import annotations

import bisect
import functools
import itertools
from collections.abc import Callable
from typing import Any

from agentmesh.errors import AgentmeshError, Violation
from agentmesh.redact import assignments, context, plugins
from agentmesh.redact.gitleaks_rules import GENERIC, default_rules
from agentmesh.redact.placeholders import sequential_filler
from agentmesh.redact.spans import MASK, Finding, mask

__all__ = [
    "MASK",
    "Finding",
    "find_secrets",
    "redact_error",
    "redact_field",
    "redact_str",
    "redact_text",
    "redact_value",
]


_GENERIC = f"gitleaks:{GENERIC}"


def find_secrets(text: str, *, whole_text: bool = True) -> list[Finding]:
    """Every detector's findings in `text` (unmerged; `spans.mask` widens and merges them). `whole_text`:
    the text stands alone (a tool's output, a message), so a lone random token in it is a secret; not for
    the string values of a structured value, where ids stand alone all the time."""
    text = _encodable(text)
    found, vetoes = default_rules().scan(text)
    # gitleaks' generic rule guesses by a key's name, as the assignment grammar does: a value typed as a run
    # of the keyboard (`xoxp-1234567890`, `abcdef0123456789abcd`) is a stand-in, not a secret. (A vendor
    # rule matched the vendor's shape: its own tests take `12345678-ABCD-...` for a key, and so do we.)
    stand_ins = [f for f in found if f.rule == _GENERIC and sequential_filler(text[f.start : f.end])]
    if stand_ins:
        found = [f for f in found if f not in stand_ins]
        vetoes += stand_ins
    found += plugins.findings(text)
    generic = assignments.findings(text) + context.findings(text, whole_text=whole_text)
    # What gitleaks' own rules rejected (a known example key, a placeholder, filler) the generic
    # detectors do not mask either.
    vetoed = _Vetoes(vetoes)
    found += [f for f in generic if not vetoed.covers(f)]
    return found


def _encodable(text: str) -> str:
    """`text` with each lone surrogate (`\\ud800`: JSON may escape one, UTF-8 cannot hold it, RE2 takes
    UTF-8) as one `?`: the same length, so every finding's span is the same in the original text."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


# The guesses: a grammar, a lone token, a loose vendor prefix, an auth scheme's word. (URL credentials,
# private key blocks, JWTs and AWS key pairs are structure, not guesses: never vetoed.)
_VETOABLE_CONTEXT = frozenset({"context:lone-token", "context:vendor-prefix", "context:auth-scheme"})


class _Vetoes:
    """The rejected spans, sorted, with the running maximum of their ends: an overlap test in log time
    (a hostile text can hold thousands of both)."""

    def __init__(self, vetoes: list[Finding]) -> None:
        spans = sorted((v.start, v.end) for v in vetoes)
        self._starts = [start for start, _ in spans]
        self._max_ends = list(itertools.accumulate((end for _, end in spans), max))

    def covers(self, finding: Finding) -> bool:
        if not (finding.rule.startswith("assignment:") or finding.rule in _VETOABLE_CONTEXT):
            return False
        count = bisect.bisect_right(self._starts, finding.end)  # vetoes starting before the finding ends
        return count > 0 and self._max_ends[count - 1] >= finding.start


def redact_text(text: str, *, whole_text: bool = True) -> tuple[str, bool]:
    """`text` with secrets masked, and whether anything was masked (see `find_secrets` for `whole_text`)."""
    return mask(text, find_secrets(text, whole_text=whole_text))


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
    # Metadata values are ids and counts by design (approval_id, idempotency_key, arguments_sha256): a
    # lone token there is an id the client needs, not a credential; formats and assignments still apply.
    metadata = {k: redact_text(v, whole_text=False)[0] for k, v in error.metadata.items()}
    if message == error.message and violations == error.violations and metadata == error.metadata:
        return error
    return error.replace(message=message, violations=violations, metadata=metadata)


_CACHED_KEY_CHARS = 64
"""Keys up to this long have their verdict remembered (`_known_key`); longer ones are judged anew."""


def _secret_key(key: str) -> bool:
    if len(key) > _CACHED_KEY_CHARS:
        return assignments.secret_key(key)
    return _known_key(key)


@functools.lru_cache(maxsize=4096)
def _known_key(key: str) -> bool:
    """`assignments.secret_key`, remembered: a pure function of the key, and the bodies `redact_value`
    walks repeat the same few keys (`role`, `content`, `parameters` ...) on every call; judging one
    costs ~4 us (word split and set tests), a request's keys a few hundred (issue 45)."""
    return assignments.secret_key(key)


def redact_field(text: str) -> tuple[str, bool]:
    """One string value of a structured value: every detector but the lone-token rule (ids stand alone
    in JSON fields all the time; a secret-named field is masked whole by `redact_value` instead)."""
    return redact_text(text, whole_text=False)


def redact_value(value: Any, text: Callable[[str], tuple[str, bool]] = redact_field) -> tuple[Any, bool]:
    """A JSON value with secrets masked (strings by pattern, secret-named keys whole). `text` masks one
    string (a caller may pass a cached `redact_field`)."""
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
