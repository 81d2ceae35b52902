"""The fuzz harness, short and seeded, in the normal test run: every RPC of every service gets hostile
and mutated messages; none may be answered UNKNOWN or INTERNAL, crash a service, or (without a token)
be answered anything but UNAUTHENTICATED. `make fuzz` runs the long version."""

from __future__ import annotations

from pathlib import Path

from tests.fuzz.harness import all_rpcs, run_fuzz

PER_RPC = 120
SEED = 19


async def test_hostile_input_never_gets_unknown_or_internal(redis_url: str, tmp_path: Path) -> None:
    report = await run_fuzz(per_rpc=PER_RPC, seed=SEED, redis_url=redis_url, workdir=tmp_path)
    assert [s.rpc for s in report.rpcs] == [f"{m.containing_service.name}.{m.name}" for _, m in all_rpcs()]
    assert all(s.sent == PER_RPC for s in report.rpcs), report.table()
    assert report.failures == 0, report.table()
