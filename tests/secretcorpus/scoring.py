"""Scoring a redactor on the public corpus (corpus.py): shared by bench/bench_redaction.py and the tests.

A true positive (generated, hand-written or bare) is caught when no 12-character run of any of its
secrets survives in the redacted text (a secret shorter than 12 characters must be gone whole); it
leaks when the redactor reported a change and a run survived anyway ("redacted" that still leaks). A
near miss is a false positive when the text changes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tests.secretcorpus.corpus import Sample

Redactor = Callable[[str], tuple[str, bool]]
KINDS = ("generated", "handwritten", "bare", "near_miss")
RUN = 12


def survives(secret: str, text: str) -> bool:
    """Whether any 12-character run of `secret` (the whole of a shorter one) is still in `text`."""
    if len(secret) < RUN:
        return secret in text
    return any(secret[i : i + RUN] in text for i in range(len(secret) - RUN + 1))


@dataclass(frozen=True)
class Outcome:
    sample: Sample
    redacted: str
    changed: bool

    @property
    def caught(self) -> bool:
        """A true positive with nothing of its secrets left; for a near miss: left alone."""
        if self.sample.kind == "near_miss":
            return not self.changed
        return not any(survives(s, self.redacted) for s in self.sample.secrets)

    @property
    def leaked(self) -> bool:
        """Changed, yet a secret survived."""
        return self.sample.kind != "near_miss" and self.changed and not self.caught


@dataclass
class Tally:
    hits: int = 0
    total: int = 0

    def add(self, hit: bool) -> None:
        self.hits += hit
        self.total += 1

    @property
    def rate(self) -> float:
        return self.hits / self.total if self.total else 0.0

    def __str__(self) -> str:
        return f"{self.rate:6.1%} ({self.hits}/{self.total})" if self.total else "     -"


@dataclass
class Score:
    """Recall per kind (for near misses: the false-positive rate), leaks, and the outcomes."""

    by_kind: dict[str, Tally] = field(default_factory=lambda: defaultdict(Tally))
    by_family: dict[tuple[str, str], Tally] = field(default_factory=lambda: defaultdict(Tally))
    by_template: dict[str, Tally] = field(default_factory=lambda: defaultdict(Tally))
    leaks: list[Outcome] = field(default_factory=list)
    misses: list[Outcome] = field(default_factory=list)
    false_positives: list[Outcome] = field(default_factory=list)

    def add(self, outcome: Outcome) -> None:
        s = outcome.sample
        if s.kind == "near_miss":
            self.by_kind[s.kind].add(outcome.changed)
            self.by_family[(s.family, "fp")].add(outcome.changed)
            if outcome.changed:
                self.false_positives.append(outcome)
            return
        self.by_kind[s.kind].add(outcome.caught)
        self.by_family[(s.family, "tp")].add(outcome.caught)
        if s.template:
            self.by_template[s.template].add(outcome.caught)
        if outcome.leaked:
            self.leaks.append(outcome)
        if not outcome.caught:
            self.misses.append(outcome)


def score(redactor: Redactor, samples: Iterable[Sample]) -> Score:
    result = Score()
    for sample in samples:
        redacted, changed = redactor(sample.text)
        result.add(Outcome(sample, redacted, changed))
    return result
