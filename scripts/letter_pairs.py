#!/usr/bin/env python3
"""Count the letter pairs of an English word list into agentmesh/redact/data/letter_pairs.txt, the table
agentmesh/redact/randomness.py uses to tell random letters from words and names.

The vendored table was counted from Webster's Second International word list (`web2`, public domain;
the copy shipped in the `english-words` 2.0.2 package from PyPI as web2_alpha_lower.pickle, written out
one word a line). Any list of English words, one a line, gives nearly the same table:

    scripts/letter_pairs.py /path/to/words.txt [--source "what the list is"]
"""

from __future__ import annotations

import argparse
import string
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "agentmesh" / "redact" / "data" / "letter_pairs.txt"
LETTERS = string.ascii_lowercase


def count(words: list[str]) -> Counter[str]:
    """Pairs of neighbouring letters inside each word (lower-cased; words with other characters skipped)."""
    pairs: Counter[str] = Counter()
    for word in words:
        w = word.strip().lower()
        if not w.isascii() or not w.isalpha():
            continue
        pairs.update(w[i : i + 2] for i in range(len(w) - 1))
    return pairs


def render(pairs: Counter[str], source: str) -> str:
    lines = [
        f"# Letter pair counts of an English word list ({source}), made by scripts/letter_pairs.py.",
        "# Row: first letter a..z; column: second letter a..z.",
    ]
    lines += [" ".join(str(pairs[a + b]) for b in LETTERS) for a in LETTERS]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("words", type=Path, help="a word list, one word a line")
    parser.add_argument("--source", default="Webster's Second International, web2, public domain")
    args = parser.parse_args(argv)
    words = args.words.read_text(encoding="utf-8").splitlines()
    TABLE.write_text(render(count(words), args.source), encoding="utf-8")
    print(f"{TABLE}: {len(words)} words")
    return 0


if __name__ == "__main__":
    sys.exit(main())
