"""`python -m tests.fuzz [--per-rpc N] [--seed S]`: fuzz every RPC, print the table, exit 1 on a failure."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from tests.fuzz.harness import run_fuzz


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    parser.add_argument("--per-rpc", type=int, default=200, help="messages per RPC (each also sent without a token)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default=None, help="only the RPCs whose Service.Method contains this")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args(argv)
    # The services log each rejected call; the table is the output.
    logging.disable(logging.ERROR)

    def progress(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    report = asyncio.run(
        run_fuzz(per_rpc=args.per_rpc, seed=args.seed, only=args.only, concurrency=args.concurrency, progress=progress)
    )
    print(report.table())
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
