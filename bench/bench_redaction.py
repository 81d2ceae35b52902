"""Redaction quality on the committed corpus: per-format recall and false positives.

`.venv/bin/python -m bench.bench_redaction` (the corpus: tests/unit/tool/redaction_corpus.json, made by
tests/unit/tool/make_redaction_corpus.py). A secret counts as caught when none of its listed
substrings survive `tool_svc.redact.redact_text`; a near-miss is a false positive when the text changes.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentmesh.redact import redact_text

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "unit" / "tool" / "redaction_corpus.json"


@dataclass
class Score:
    caught: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    total: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    false_positives: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    near_total: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    missed: list[dict[str, Any]] = field(default_factory=list)
    flagged: list[dict[str, Any]] = field(default_factory=list)

    @property
    def recall(self) -> float:
        return sum(self.caught.values()) / max(1, sum(self.total.values()))

    @property
    def false_positive_rate(self) -> float:
        return sum(self.false_positives.values()) / max(1, sum(self.near_total.values()))


def load_corpus(path: Path = CORPUS) -> dict[str, Any]:
    corpus: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return corpus


def score(corpus: dict[str, Any]) -> Score:
    result = Score()
    for entry in corpus["secrets"]:
        out, _ = redact_text(entry["text"])
        result.total[entry["format"]] += 1
        if any(secret in out for secret in entry["secrets"]):
            result.missed.append({**entry, "redacted": out})
        else:
            result.caught[entry["format"]] += 1
    for entry in corpus["near_misses"]:
        out, changed = redact_text(entry["text"])
        result.near_total[entry["format"]] += 1
        if changed:
            result.false_positives[entry["format"]] += 1
            result.flagged.append({**entry, "redacted": out})
    return result


def main() -> None:
    corpus = load_corpus()
    started = time.perf_counter()
    result = score(corpus)
    elapsed = time.perf_counter() - started
    texts = len(corpus["secrets"]) + len(corpus["near_misses"])
    print(f"{'secret format':<24} {'caught':>7} {'total':>6} {'recall':>7}")
    for fmt in sorted(result.total):
        caught, total = result.caught[fmt], result.total[fmt]
        print(f"{fmt:<24} {caught:>7} {total:>6} {caught / total:>7.1%}")
    print(f"{'near-miss format':<24} {'flagged':>7} {'total':>6} {'FP rate':>7}")
    for fmt in sorted(result.near_total):
        flagged, total = result.false_positives[fmt], result.near_total[fmt]
        print(f"{fmt:<24} {flagged:>7} {total:>6} {flagged / total:>7.1%}")
    print(
        f"recall {result.recall:.2%} over {sum(result.total.values())} secrets in {len(result.total)} formats; "
        f"false positives {result.false_positive_rate:.2%} over {sum(result.near_total.values())} near-misses; "
        f"{elapsed / texts * 1e6:.0f} us per text"
    )
    for entry in result.missed[:10]:
        print(f"MISSED {entry['format']}: {entry['redacted'][:160]!r}")
    for entry in result.flagged[:10]:
        print(f"FALSE POSITIVE {entry['format']}: {entry['text'][:80]!r} -> {entry['redacted'][:80]!r}")


if __name__ == "__main__":
    main()
