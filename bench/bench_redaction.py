"""Redaction quality and speed, in one run: on the public corpus (gitleaks' own rule tests), beside
detect-secrets alone, gitleaks' rule set alone and the redactor before issue 40; on our own corpus; and
p50 per KiB on 64 KiB of clean and of dirty text.

    .venv/bin/python -m bench.bench_redaction [--seed 40] [--rounds 5] [--no-families]

Public corpus (tests/secretcorpus, generated from the vendored gitleaks rule files; nobody here wrote
it): rules split in halves by a hash of their id; `tune` is the half the redactor's rules were adjusted
on, `heldout` the half reported. Kinds: `generated` texts (GenerateSampleSecrets templates and other
generated samples), `handwritten` samples (the rule authors' literal true positives), `bare` secrets
(each template's secret standing alone), `near_miss` (the rules' false-positive samples: the rate shown
is the share masked). A true positive counts as caught when no 12-character run of its secret survives;
`leaks` counts texts reported changed whose secret survived. The near misses masked are listed, with
the detectors that masked them, and tagged when gitleaks' own tests use the same text as another rule's
true positive. Redactors:
- `new`: agentmesh.redact (gitleaks' rules, detect-secrets plugins, assignment grammar, context rules);
- `before`: agentmesh/redact.py as it was before issue 40 (bench/redact_before.py);
- `detect-secrets`: detect-secrets 1.5.0 alone, all its default plugins and filters, line by line
  (`scan_line`, its ad-hoc mode), every reported value masked;
- `gitleaks`: gitleaks' rule set alone, run by agentmesh.redact.gitleaks_rules.
Our own corpus (tests/unit/tool/redaction_corpus.json, written here for issue 21): figures on our data.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentmesh.redact import MASK, find_secrets, redact_text
from agentmesh.redact.gitleaks_rules import default_rules
from agentmesh.redact.spans import mask
from bench import redact_before
from tests.secretcorpus.corpus import DEFAULT_SEED, Sample, corpus
from tests.secretcorpus.scoring import KINDS, Redactor, Score
from tests.secretcorpus.scoring import score as score_public

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "unit" / "tool" / "redaction_corpus.json"


# --- the redactors compared


def detect_secrets_alone(text: str) -> tuple[str, bool]:
    """detect-secrets by itself: its default plugins and filters over each line, each value masked."""
    from detect_secrets.core.scan import scan_line
    from detect_secrets.settings import default_settings

    found: set[str] = set()
    with default_settings():
        for line in text.splitlines() or [text]:
            for secret in scan_line(line):
                if secret.secret_value:
                    found.add(secret.secret_value)
    out = text
    for value in sorted(found, key=len, reverse=True):
        out = out.replace(value, MASK)
    return out, out != text


def gitleaks_alone(text: str) -> tuple[str, bool]:
    return mask(text, default_rules().findings(text))


REDACTORS: dict[str, Redactor] = {
    "new": redact_text,
    "before": redact_before.redact_text,
    "detect-secrets": detect_secrets_alone,
    "gitleaks": gitleaks_alone,
}


# --- our own corpus (issue 21)


@dataclass
class OwnScore:
    caught: int = 0
    total: int = 0
    flagged: int = 0
    near_total: int = 0
    missed: list[dict[str, Any]] = field(default_factory=list)
    false_positives: list[dict[str, Any]] = field(default_factory=list)

    @property
    def recall(self) -> float:
        return self.caught / max(1, self.total)

    @property
    def false_positive_rate(self) -> float:
        return self.flagged / max(1, self.near_total)


def load_corpus(path: Path = CORPUS) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def score(corpus_data: dict[str, Any], redactor: Redactor = redact_text) -> OwnScore:
    """Our committed corpus: a secret is caught when none of its listed substrings survive."""
    result = OwnScore()
    for entry in corpus_data["secrets"]:
        out, _ = redactor(entry["text"])
        result.total += 1
        if any(secret in out for secret in entry["secrets"]):
            result.missed.append({**entry, "redacted": out})
        else:
            result.caught += 1
    for entry in corpus_data["near_misses"]:
        out, changed = redactor(entry["text"])
        result.near_total += 1
        if changed:
            result.flagged += 1
            result.false_positives.append({**entry, "redacted": out})
    return result


# --- speed

_WORDS = [
    "the",
    "request",
    "to",
    "the",
    "orders",
    "service",
    "finished",
    "after",
    "two",
    "retries",
    "while",
    "the",
    "cache",
    "was",
    "warm",
    "and",
    "the",
    "report",
    "lists",
    "every",
    "item",
    "with",
    "its",
    "price",
    "status",
    "owner",
    "and",
    "the",
    "time",
    "it",
    "took",
]


def clean_text(size: int = 64 * 1024, seed: int = 7) -> str:
    """Tool output without secrets: log lines, JSON records, prose, access logs (with `tokens=`,
    `auth=ok`, `key_id=`, `api_version`: words the prefilters look for)."""
    rng = random.Random(seed)
    lines: list[str] = []
    while sum(len(line) + 1 for line in lines) < size:
        kind = rng.randrange(4)
        if kind == 0:
            lines.append(
                f"2026-05-01T10:{rng.randrange(60):02d}:{rng.randrange(60):02d}Z INFO payment-svc "
                f"order=ORD-{rng.randrange(10**6)} took {rng.randrange(3000)}ms tokens={rng.randrange(4096)} status=ok"
            )
        elif kind == 1:
            record = {
                "id": rng.randrange(10**9),
                "name": " ".join(rng.choice(_WORDS) for _ in range(3)),
                "price": rng.randrange(10000) / 100,
                "tags": ["a", "b"],
                "api_version": "v2",
            }
            lines.append(json.dumps(record))
        elif kind == 2:
            lines.append(" ".join(rng.choice(_WORDS) for _ in range(14)) + ".")
        else:
            lines.append(
                f"GET /api/v1/items/{rng.randrange(10**5)}?page={rng.randrange(9)} 200 {rng.randrange(900)}B "
                f"key_id=k{rng.randrange(99)} auth=ok"
            )
    return "\n".join(lines)[:size]


def dirty_text(samples: list[Sample], size: int = 64 * 1024, seed: int = 7) -> str:
    """The clean text with one public-corpus true positive spliced in every KiB."""
    rng = random.Random(seed)
    lines = clean_text(size, seed).split("\n")
    positives = [s.text for s in samples if s.kind in ("generated", "handwritten") and len(s.text) < 400]
    step = max(1, len(lines) // (size // 1024))
    for i in range(0, len(lines), step):
        lines[i] = rng.choice(positives)
    return "\n".join(lines)


def p50_per_kib(redactors: dict[str, Redactor], texts: dict[str, str], rounds: int) -> dict[tuple[str, str], float]:
    """Median seconds per KiB, each (redactor, text) timed once per round, rounds interleaved."""
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(rounds):
        for tname, text in texts.items():
            for rname, fn in redactors.items():
                started = time.perf_counter()
                fn(text)
                times.setdefault((rname, tname), []).append((time.perf_counter() - started) / (len(text) / 1024))
    return {key: statistics.median(values) for key, values in times.items()}


# --- report


def _row(label: str, cells: list[str]) -> str:
    return f"{label:<26}" + "".join(f"{c:>20}" for c in cells)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="the corpus generator's seed")
    parser.add_argument("--rounds", type=int, default=5, help="timing rounds (median taken)")
    parser.add_argument("--no-families", action="store_true", help="skip the per-family table")
    args = parser.parse_args(argv)

    samples = list(corpus(args.seed))
    scores: dict[tuple[str, str], Score] = {}
    elapsed: dict[str, float] = {}
    for name, fn in REDACTORS.items():
        started = time.perf_counter()
        for half in ("heldout", "tune"):
            scores[(name, half)] = score_public(fn, [s for s in samples if s.half == half])
        elapsed[name] = time.perf_counter() - started
    rules = {s.rule for s in samples}
    print(
        f"public corpus: gitleaks rule tests, {len(rules)} rules, {len(samples)} texts (seed {args.seed}); "
        f"recall per kind, near_miss = share of near misses masked (false positives)"
    )
    for half in ("heldout", "tune"):
        print(f"\n== {half} half ({len({s.rule for s in samples if s.half == half})} rules)")
        print(_row("kind", list(REDACTORS)))
        for kind in KINDS:
            print(_row(kind, [str(scores[(n, half)].by_kind[kind]) for n in REDACTORS]))
        print(_row("leaks (changed, survived)", [str(len(scores[(n, half)].leaks)) for n in REDACTORS]))
    print(_row("\nseconds for both halves", [f"{elapsed[n]:.1f}" for n in REDACTORS]))

    print("\n== generated texts per syntax (GenerateSampleSecrets templates), both halves")
    print(_row("template", list(REDACTORS)))
    templates = sorted({s.template for s in samples if s.template})
    for template in templates:
        cells = []
        for n in REDACTORS:
            hits = sum(scores[(n, h)].by_template[template].hits for h in ("heldout", "tune"))
            total = sum(scores[(n, h)].by_template[template].total for h in ("heldout", "tune"))
            cells.append(f"{hits / total:6.1%} ({hits}/{total})")
        print(_row(template[:26], cells))

    if not args.no_families:
        print("\n== per rule family: recall of its true positives (all kinds) and near misses masked")
        print(f"{'family':<22}{'half':<8}{'new tp':>16}{'det-sec tp':>16}{'new fp':>12}{'det-sec fp':>12}")
        families = sorted({(s.family, s.half) for s in samples})
        for family, half in families:
            new, ds = scores[("new", half)], scores[("detect-secrets", half)]
            print(
                f"{family:<22}{half:<8}{new.by_family[(family, 'tp')]!s:>16}{ds.by_family[(family, 'tp')]!s:>16}"
                f"{_fp(new, family):>12}{_fp(ds, family):>12}"
            )

    # A near miss of one rule that gitleaks' own tests use, verbatim, as a true positive of another
    # (`cloudflare_api_key = "..."` is a near miss of cloudflare-global-api-key): a secret all the same.
    positives: dict[str, set[str]] = {}
    for s in samples:
        if s.kind != "near_miss":
            positives.setdefault(s.text, set()).add(s.rule)
    for half in ("heldout", "tune"):
        new = scores[("new", half)]
        siblings = 0
        print(f"\n== {half}: near misses the new redactor masks ({len(new.false_positives)})")
        for outcome in new.false_positives:
            sample = outcome.sample
            rules_hit = sorted({f.rule for f in find_secrets(sample.text)})
            by_gitleaks = any(r.startswith("gitleaks:") for r in rules_hit)
            why = "gitleaks' rule set flags it too" if by_gitleaks else "ours: " + ", ".join(rules_hit)
            other = sorted(positives.get(sample.text, set()) - {sample.rule})
            if other:
                siblings += 1
                why += f"; a true positive of {', '.join(other)} in gitleaks' tests"
            print(f"  {sample.rule}: {sample.text[:90]!r} [{why}]")
        total = new.by_kind["near_miss"].total
        print(
            f"  ({siblings} of them are true positives of another rule; without those: "
            f"{len(new.false_positives) - siblings}/{total - siblings} masked)"
        )
        print(f"== {half}: true positives the new redactor misses ({len(new.misses)})")
        for outcome in new.misses:
            print(f"  {outcome.sample.kind} {outcome.sample.rule}: {outcome.sample.text[:90]!r}")
        for outcome in new.leaks:
            print(f"  LEAK {outcome.sample.rule}: {outcome.redacted[:120]!r}")

    own = load_corpus()
    print(
        f"\n== our own corpus (issue 21, written here): {len(own['secrets'])} secrets, "
        f"{len(own['near_misses'])} near misses"
    )
    for name in ("new", "before"):
        result = score(own, REDACTORS[name])
        print(f"  {name:<8} recall {result.recall:.1%}, false positives {result.false_positive_rate:.1%}")
        for entry in result.missed[:5]:
            print(f"    MISSED {entry['format']}: {entry['redacted'][:120]!r}")
        for entry in result.false_positives[:5]:
            print(f"    FALSE POSITIVE {entry['format']}: {entry['text'][:80]!r}")

    texts = {"clean 64 KiB": clean_text(), "dirty 64 KiB": dirty_text(samples)}
    timing = p50_per_kib({"before": redact_before.redact_text, "new": redact_text}, texts, args.rounds)
    print(f"\n== speed: p50 per KiB over {args.rounds} interleaved rounds")
    print(f"{'text':<16}{'before':>14}{'new':>14}{'new/before':>12}")
    for tname in texts:
        before, new_t = timing[("before", tname)], timing[("new", tname)]
        print(f"{tname:<16}{before * 1e6:>11.0f} us{new_t * 1e6:>11.0f} us{new_t / before:>12.2f}")
    return 0


def _fp(score_: Score, family: str) -> str:
    tally = score_.by_family.get((family, "fp"))
    return f"{tally.hits}/{tally.total}" if tally and tally.total else "-"


if __name__ == "__main__":
    sys.exit(main())
