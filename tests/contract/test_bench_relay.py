"""bench/bench_relay.py's smoke test (issue 44): three seeded runs of the 5-agent relay in both modes on the
in-process stack; what the bench's figures rest on holds (no speed asserted)."""

from __future__ import annotations

import asyncio

import pytest

from bench.bench_relay import HEADER, ROLES, bench, main, summary
from provider_svc.scenarios.relay import PLANTED

HOP_CAP = 800
"""context_svc's default cap on a hop summary (tokens)."""


def test_three_runs_of_both_modes() -> None:
    results = asyncio.run(bench(runs=3, concurrency=3, seed=44))
    hops, transcript = results["hops"], results["transcript"]
    assert len(hops) == len(transcript) == 3
    for run in hops:
        assert run.ok and run.last_agent in ("relay_verifier", "relay_closer")
        assert run.reached == len(PLANTED)  # every planted value reached the last agent
        assert len(run.hop_tokens) == len(ROLES) and all(0 < t <= HOP_CAP for t in run.hop_tokens)
        assert run.confirmed > 0 and run.demoted == 0  # the policy's citations all check out
    for run in transcript:
        assert run.ok and run.last_agent in ("base_verifier", "base_closer")
        assert len(run.hop_tokens) == len(ROLES)
    assert results["route_hops"][0].reached == 3  # one capability route per relay
    rows = summary(results)
    assert [r[0] for r in rows] == ["hops", "transcript"] and all(len(r) == len(HEADER) for r in rows)


def test_quick_mode_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "hops " in out and "transcript " in out and "capability routing" in out
