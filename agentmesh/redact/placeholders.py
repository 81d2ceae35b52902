"""Values that stand where a secret would but are visibly not one: documentation placeholders, variable
and template references, masks, filler. The generic detectors (the assignment grammar, the lone-token
rule) and the vendor plugins skip them; gitleaks' own rules have their allowlists for the same purpose.
"""

from __future__ import annotations

import itertools

import re2

from agentmesh.redact.spans import MASK

_OPTIONS = re2.Options()
_OPTIONS.max_mem = 16 << 20

# The whole value is a reference or a stand-in.
_WHOLE = re2.compile(
    r"(?i)^(?:"
    r"\$\{?[\w.:-]*\}?|\$\([^)]*\)|\{\{.*\}\}|\$\{\{.*\}\}|%[\w.]+%|<[^<>]*>?|\[[^\[\]]*\]|@[\w.]+@|#\{.*\}|\{[\w.]*\}"
    r"|\*+|x+|\.+|-+|_+|#+|\?+|0+"
    r"|null|nil|none|true|false|undefined|empty|no|yes|on|off|n/a|na"
    r"|changeme|changeit|password|passwd|pass|pwd|secret|token|key|user|username|example|sample|test|testing|dummy"
    r"|placeholder|redacted|foo|bar|baz|foobar|qux|abc|abc123|123|1234|12345|123456|admin|root|guest|default"
    r"|(?:your|my|insert|enter|replace)[_.-]?[a-z]+(?:[_.-][a-z]+)*[_.-]?[0-9]{0,4}|\w+[_-]here|todo|tbd|fixme|hidden|masked"
    r"|sensitive|required|optional|string|str|int|bool|object|any|value|secret[\w.-]*value"
    r")$",
    _OPTIONS,
)
# Somewhere in the value: filler (xxxx, ####, ****), a stand-in word; a run of the alphabet or digits.
_PART = re2.compile(
    r"(?i)xxxx|\#\#\#\#|\*\*\*\*|\.\.\.|put[_-]?your|your[_-]|[_-]here\b|placeholder|changeme|replace[_-]?me|example",
    _OPTIONS,
)
_SEQUENCE_PART = re2.compile(r"(?i)abcdefgh|bcdefghi|ijklmnop|qrstuvwx|12345678|23456789|34567890", _OPTIONS)


def _filler_run(value: str) -> bool:
    """One character 8 times in a row making a quarter of the value (`glc_1111...`, `-#####`). Not any
    run: base64 of binary data has runs of `A` (zero bytes) in real tokens."""
    run = longest = 1
    for a, b in itertools.pairwise(value):
        run = run + 1 if a == b else 1
        longest = max(longest, run)
    return longest >= 8 and longest * 4 >= len(value)


# Consecutive characters (`ab`, `12`, `EF`): a random token of 36+ symbols has one pair in 30 of them;
# a stand-in typed on the keyboard (`abcdef0123456789`, `AbCeFG123`, `12345678-ABCD-ABCD-...`) is mostly
# such pairs.
_MIN_SEQUENCE = 8
_SEQUENCE_SHARE = 0.6


def sequential_filler(value: str) -> bool:
    """Whether most neighbouring letters and digits of a value follow each other (`abc123`, `AbCeFG123`)."""
    chars = [c.lower() for c in value if c.isascii() and c.isalnum()]
    if len(chars) < _MIN_SEQUENCE:
        return False
    steps = sum(ord(b) - ord(a) == 1 for a, b in itertools.pairwise(chars))
    return steps >= _SEQUENCE_SHARE * (len(chars) - 1)


def is_placeholder(value: str, *, sequences: bool = True) -> bool:
    """Whether a value is visibly a stand-in, not a secret (see the module's docstring). `sequences`:
    a value holding a run of the alphabet or of the digits (`12345678-ABCD-...`) counts as one too."""
    quoted = value.strip().strip("\"'`")
    v = quoted.strip("<>[](){}")  # `<user:password>`, `[PASSWORD]` as well as `<password>`
    if not v or MASK in v or len(set(v)) <= 1:
        return True
    if _WHOLE.search(quoted) is not None or _WHOLE.search(v) is not None:
        return True
    if _PART.search(v) is not None or _filler_run(v):
        return True
    return sequences and (_SEQUENCE_PART.search(v) is not None or sequential_filler(v))
