"""How much a run of letters reads like English: random letters (a key's, a token's) from words and
names (`getsnapshotdrafts`, `KUBERNETESNAMESPACE`, `matchboxtwentytwo`).

Each pair of neighbouring letters is scored by how much more often it occurs in English words than
among random letters (log2 of its share of the pairs in a word list, data/letter_pairs.txt, over 1/676);
a token's score is the mean over its pairs. Words and names joined together score above 0 (one in a
hundred of 2-4 joined dictionary words below -0.2); 16 random letters score -3.5 on average and reach
-1.0 about one time in thirty-five. The vowel and consonant-run test `context` used before misses one
run of 16 random letters in four (`aouqgluchaiyqvgaoita` has nine vowels in twenty), this one one in
thirty-five (20 letters: one in fifty; 32: one in three hundred).
"""

from __future__ import annotations

import math
import string
from functools import cache
from importlib import resources

_LETTERS = string.ascii_lowercase
# Below this mean, letters read as random. (Acronyms and joined jargon sit around -0.3 to -0.9:
# `xmlhttprequest`, `httpsgithubcom`.)
RANDOM_BELOW = -1.0
# Fewer letter pairs than this say nothing either way.
MIN_PAIRS = 8


@cache
def _table() -> dict[str, float]:
    text = resources.files("agentmesh.redact").joinpath("data/letter_pairs.txt").read_text(encoding="utf-8")
    rows = [line.split() for line in text.splitlines() if line and not line.startswith("#")]
    if len(rows) != len(_LETTERS) or any(len(row) != len(_LETTERS) for row in rows):
        raise ValueError("data/letter_pairs.txt must hold 26 rows of 26 counts")
    counts = {a + b: int(n) for a, row in zip(_LETTERS, rows, strict=True) for b, n in zip(_LETTERS, row, strict=True)}
    total = sum(counts.values()) + len(counts)  # add-one: a pair no word has is rare, not impossible
    return {pair: math.log2((n + 1) / total * len(counts)) for pair, n in counts.items()}


def letter_pairs(token: str) -> list[str]:
    """The neighbouring ASCII letters of a token, lower-cased (`ab1cd` -> `ab`, `cd`)."""
    t = token.lower()
    return [t[i : i + 2] for i in range(len(t) - 1) if t[i] in _LETTERS and t[i + 1] in _LETTERS]


def english_score(token: str) -> float:
    """The mean score of the token's letter pairs (0.0 when it has none)."""
    pairs = letter_pairs(token)
    if not pairs:
        return 0.0
    table = _table()
    return sum(table[p] for p in pairs) / len(pairs)


def reads_random(token: str, min_pairs: int = MIN_PAIRS, below: float = RANDOM_BELOW) -> bool:
    """Whether the token's letters (at least `min_pairs` pairs) read as random rather than as words
    (a score under `below`)."""
    return len(letter_pairs(token)) >= min_pairs and english_score(token) < below
