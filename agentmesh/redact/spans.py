"""Where the secrets are, and masking them whole.

Every detector reports `Finding`s: character spans of a text. Masking first widens each span to the
whole token it sits in (a rule of fixed length, or a plugin that reports a prefix, must not leave a
tail), then merges overlapping spans, replaces each with the mask, and finally masks every other
occurrence of a secret it found (a key quoted twice in one error message is masked twice). So whatever
was detected is gone from the result, by construction; `mask` checks it anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

MASK = "[REDACTED]"

# Characters that may continue a token past a detector's span, besides letters and digits: only those
# the secret itself contains (a `-` in a key, `/` and `+` in base64), never quotes, spaces or `=`
# (`=` only as trailing base64 padding).
_EXTENDABLE = frozenset("-_+/.~")
# Detected values shorter than this are not searched for elsewhere in the text: "abc" as a password would
# otherwise mask every "abc" of the output.
_MIN_REPEAT = 6


@dataclass(frozen=True)
class Finding:
    """A secret at text[start:end], found by `rule` (for the bench's per-detector figures)."""

    start: int
    end: int
    rule: str


def _token_char(c: str, extra: frozenset[str]) -> bool:
    return (c.isascii() and c.isalnum()) or c in extra


def widen(text: str, start: int, end: int) -> tuple[int, int]:
    """The span grown over the rest of its token (letters, digits and the secret's own punctuation)."""
    extra = _EXTENDABLE.intersection(text[start:end])
    while start > 0 and _token_char(text[start - 1], extra):
        start -= 1
    while end < len(text) and _token_char(text[end], extra):
        end += 1
    padding = 0
    while end < len(text) and text[end] == "=" and padding < 3:
        end += 1
        padding += 1
    return start, end


def merged(text: str, findings: list[Finding]) -> list[tuple[int, int]]:
    """The findings' widened spans, sorted and merged where they overlap or touch."""
    spans = sorted(widen(text, f.start, f.end) for f in findings if f.end > f.start)
    out: list[tuple[int, int]] = []
    for start, end in spans:
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def mask(text: str, findings: list[Finding]) -> tuple[str, bool]:
    """`text` with every finding masked whole, and whether anything changed."""
    if not findings:
        return text, False
    spans = merged(text, findings)
    values = {text[s:e] for s, e in spans if e - s >= _MIN_REPEAT and text[s:e] not in MASK}
    parts: list[str] = []
    last = 0
    for start, end in spans:
        parts.append(text[last:start])
        parts.append(MASK)
        last = end
    parts.append(text[last:])
    out = "".join(parts)
    # The same secret elsewhere in the text (longest first, so a value inside another goes with it).
    for value in sorted(values, key=len, reverse=True):
        if value in out:
            out = out.replace(value, MASK)
    if any(value in out for value in values):  # cannot happen: replace() removed every occurrence
        raise AssertionError("a detected secret survived masking")
    return out, out != text
