"""`make fuzz-context`: many generated sessions, every budget, the acceptance checks of issue 23.

    .venv/bin/python -m tests.contextgen [--sessions 200] [--seed 1] [--turns 40-160] [--budgets 3000,6000,12000]

Starts its own redis-server (as the tests do), plays each seeded session (English, Chinese, mixed in
turn) into a ContextEngine, builds it at each budget and prints a table per budget; exits 1 on any
wrong fact, missing known fact, planted fact missing while it fits, or user constraint dropped, and
prints the seeds to replay (`--seed N --sessions 1`).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys

from agentmesh.config import ContextSettings, RedisSettings
from agentmesh.dev.localredis import LocalRedis
from agentmesh.store import Store
from context_svc.engine import ContextEngine
from tests.contextgen.check import OPERATOR, Report, build, check_view, play
from tests.contextgen.sessions import LANGS, generate


async def run(sessions: int, seed: int, turns: tuple[int, int], budgets: list[int]) -> int:
    reports: dict[int, list[Report]] = {b: [] for b in budgets}
    failed: list[tuple[int, str, list[str]]] = []
    with LocalRedis() as redis:
        async with await Store.connect(RedisSettings(url=redis.url), "dev") as store:
            engine = ContextEngine(ContextSettings(), store)
            rng = random.Random(seed)
            for n in range(sessions):
                session_seed = seed + n
                lang = LANGS[n % len(LANGS)]
                gen = generate(session_seed, lang=lang, turns=rng.randint(*turns), plants=rng.randint(4, 14))
                raw = await play(engine, f"fuzz-{session_seed}", gen)
                for budget in budgets:
                    view, ms = await build(engine, f"fuzz-{session_seed}", budget)
                    report = check_view(view, gen, budget, raw, ms)
                    reports[budget].append(report)
                    if report.problems:
                        failed.append((session_seed, f"{lang} @ {budget}", report.problems))
                await engine.delete_session(OPERATOR, f"fuzz-{session_seed}")
    print(f"{sessions} sessions, seeds {seed}..{seed + sessions - 1}")
    print(f"{'budget':>7} {'reduction':>10} {'planted kept':>13} {'wrong':>6} {'missing':>8} {'build ms p50':>13}")
    for budget, rows in reports.items():
        reduction = 1 - sum(r.built_tokens for r in rows) / max(1, sum(r.raw_tokens for r in rows))
        kept = sum(r.kept for r in rows)
        planted = sum(r.planted for r in rows)
        wrong = sum(len(r.wrong) for r in rows)
        missing = sum(len(r.missing_known) + len(r.missing_fit) + len(r.dropped_user) for r in rows)
        p50 = statistics.median(r.build_ms for r in rows)
        print(f"{budget:>7} {reduction:>10.1%} {kept:>6}/{planted:<6} {wrong:>6} {missing:>8} {p50:>13.1f}")
    for session_seed, where, problems in failed[:20]:
        print(f"seed {session_seed} ({where}):", *problems[:5], sep="\n  ")
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--turns", default="40-160", help="range of rounds per session, e.g. 40-160")
    parser.add_argument("--budgets", default="3000,6000,12000")
    args = parser.parse_args()
    low, _, high = args.turns.partition("-")
    budgets = [int(b) for b in args.budgets.split(",")]
    return asyncio.run(run(args.sessions, args.seed, (int(low), int(high or low)), budgets))


if __name__ == "__main__":
    sys.exit(main())
