"""`python -m tests.chaos --seed S --rounds R --tasks M --kills K`: run the chaos harness, print the
table, exit 1 on any invariant violation (2 when the harness itself could not run)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from tests.chaos.harness import Timings, run_chaos


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--tasks", type=int, default=30, help="tasks per round")
    parser.add_argument("--kills", type=int, default=10, help="kill -9 per round")
    parser.add_argument("--pauses", type=int, default=None, help="SIGSTOP per round (default kills // 3)")
    parser.add_argument("--dispatchers", type=int, choices=(1, 2), default=1)
    parser.add_argument("--tool-replicas", type=int, choices=(1, 2), default=1)
    parser.add_argument("--context-replicas", type=int, choices=(1, 2), default=1)
    parser.add_argument("--provider-replicas", type=int, choices=(1, 2), default=1)
    parser.add_argument(
        "--replicas", type=int, choices=(1, 2), default=None, help="of every service (overrides the above)"
    )
    parser.add_argument("--redis", choices=("standalone", "cluster"), default="standalone")
    parser.add_argument(
        "--rolling",
        action="store_true",
        help="per round, kill -9 and restart one replica of each service (no random kills)",
    )
    parser.add_argument("--slow", type=float, default=2.0, help="upstreams answer after a random 0..SLOW s")
    parser.add_argument("--claim-idle", type=float, default=Timings.claim_idle_s)
    parser.add_argument("--lease", type=float, default=Timings.idempotency_lease_s)
    parser.add_argument("--heartbeat", type=float, default=Timings.idempotency_heartbeat_s)
    parser.add_argument(
        "--no-resume",
        action="store_true",
        help="the driver never resumes a FAILED task (the dispatcher waits out restarts itself)",
    )
    parser.add_argument("--max-resumes", type=int, default=5, help="resumes of one FAILED task at most")
    parser.add_argument("--final-timeout", type=float, default=180.0)
    parser.add_argument(
        "--no-pack-events", dest="pack_events", action="store_false", help="dispatcher.pack_events off (issue 45)"
    )
    parser.add_argument("--workdir", type=Path, default=None, help="default: a new temp dir (kept)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args(argv)
    if args.replicas is not None:
        args.dispatchers = args.tool_replicas = args.context_replicas = args.provider_replicas = args.replicas
    timings = Timings(
        claim_idle_s=args.claim_idle,
        claim_interval_s=min(0.5, args.claim_idle / 4),
        idempotency_lease_s=args.lease,
        idempotency_heartbeat_s=args.heartbeat,
        pack_events=args.pack_events,
    )

    def progress(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    try:
        report = asyncio.run(
            run_chaos(
                args.seed,
                args.rounds,
                args.tasks,
                args.kills,
                args.pauses,
                dispatchers=args.dispatchers,
                tools=args.tool_replicas,
                contexts=args.context_replicas,
                providers=args.provider_replicas,
                cluster=args.redis == "cluster",
                rolling=args.rolling,
                timings=timings,
                slow_max_s=args.slow,
                final_timeout_s=args.final_timeout,
                max_resumes=0 if args.no_resume else args.max_resumes,
                workdir=args.workdir,
                progress=progress,
            )
        )
    except Exception as exc:  # the harness could not run: not a verdict on the mesh
        print(f"chaos harness failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    print(report.table())
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
