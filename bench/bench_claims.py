"""The claims check (agentmesh/claims.py, issue 41) on a committed corpus of final answers.

Each case of a corpus is a final answer, the write tools its task had, its ledger (the tool calls and
their results) and whether it claims a completed side effect that no succeeded write backs. Prints, per
corpus, its size, the detection rate on the claims and the false-positive rate on the rest (negations,
future tense, plans, questions, quoted user text, observations, claims a succeeded write backs), per
language, and every miss. The corpora (bench/data/): `claims_corpus.json`, written with the detector
and tuned on; `claims_heldout.json`, written after it (two general rules were added once it was read:
"by <someone else>" and reported speech); `claims_fresh.json`, another domain, written last and never
tuned on. Exit 1 when a corpus misses the targets (detection >= 95 %, false positives <= 2 %).

    python -m bench.bench_claims [--corpus PATH ...] [--quiet]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from agentmesh.claims import LedgerEntry, unsupported

DATA = Path(__file__).parent / "data"
CORPORA = [DATA / "claims_corpus.json", DATA / "claims_heldout.json", DATA / "claims_fresh.json"]


def flagged(case: dict[str, Any]) -> bool:
    ledger = [LedgerEntry(e[0], e[1], e[2], bool(e[3]) if len(e) > 3 else True) for e in case["ledger"]]
    return unsupported(case["text"], ledger, case["write_tools"]).verdict == "unsupported"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, action="append", help="a corpus (repeatable; default: all three)")
    parser.add_argument("--quiet", action="store_true", help="no list of misses")
    args = parser.parse_args(argv)
    ok = True
    for corpus in args.corpus or CORPORA:
        ok = report(corpus, quiet=args.quiet) and ok
    return 0 if ok else 1


def report(corpus: Path, *, quiet: bool) -> bool:
    cases = json.loads(corpus.read_text())["cases"]
    started = time.perf_counter()
    results = [(case, flagged(case)) for case in cases]
    elapsed = time.perf_counter() - started
    rows = []
    for lang in ("en", "zh", "all"):
        mine = [(c, f) for c, f in results if lang == "all" or c["lang"] == lang]
        claims = [f for c, f in mine if c["unsupported_claim"]]
        others = [f for c, f in mine if not c["unsupported_claim"]]
        rows.append((lang, len(mine), len(claims), sum(claims), len(others), sum(others)))
    per_answer_ms = elapsed * 1e3 / len(cases)
    print(f"corpus: {len(cases)} final answers ({corpus.name}); check: {per_answer_ms:.3f} ms per answer")
    heads = ("cases", "claims", "detected", "rate", "non-claims", "false pos", "rate")
    print(f"{'lang':<5} " + " ".join(f"{h:>{max(len(h), 6)}}" for h in heads))
    for lang, total, n_claims, hit, n_other, fp in rows:
        rate = hit / n_claims if n_claims else 1.0
        fp_rate = fp / n_other if n_other else 0.0
        print(f"{lang:<5} {total:>6} {n_claims:>6} {hit:>8} {rate:>6.1%} {n_other:>10} {fp:>9} {fp_rate:>6.1%}")
    if not quiet:
        for case, flag in results:
            if flag != case["unsupported_claim"]:
                kind = "missed" if case["unsupported_claim"] else "false positive"
                print(f"  {kind}: {case['text']!r}")
    _, _, n_claims, hit, n_other, fp = rows[-1]
    ok = hit / n_claims >= 0.95 and fp / n_other <= 0.02
    print("targets (detection >= 95 %, false positives <= 2 %):", "met" if ok else "NOT met", end="\n\n")
    return ok


if __name__ == "__main__":
    sys.exit(main())
