"""tool_svc's CPU pool (tool_svc/cpu.py): a job past its timeout, or whose caller gives up, has its worker
process killed; errors come back typed. Real worker processes, no gRPC.

The jobs below are module-level so a worker can import them by name."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentmesh.errors import AgentmeshError, ErrorCode, InvalidRequestError, NotFoundError
from tool_svc.cpu import CpuPool


def stubborn_sleep(pid_file: str, seconds: float) -> None:
    """Ignores SIGTERM (as a worker stuck in one long C call does), says which worker runs it, then sleeps."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    Path(pid_file).write_text(str(os.getpid()), encoding="utf-8")
    time.sleep(seconds)


def sleep_after_pid(pid_file: str, seconds: float) -> None:
    Path(pid_file).write_text(str(os.getpid()), encoding="utf-8")
    time.sleep(seconds)


def raise_invalid(field: str) -> None:
    raise InvalidRequestError(field, "bad selector")


def raise_not_found() -> None:
    # A subclass whose pickle cannot be rebuilt as is: it must come back as a plain AgentmeshError.
    raise NotFoundError("no such payload", metadata={"ref_id": "pl_x"})


def raise_bug() -> None:
    raise KeyError("internal detail")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def until_dead(pid: int) -> None:
    while alive(pid):
        await asyncio.sleep(0.02)


def written_pid(path: Path) -> int | None:
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    return int(text) if text else None


async def pid_written(path: Path) -> int:
    while (pid := written_pid(path)) is None:
        await asyncio.sleep(0.01)
    return pid


@pytest.fixture
async def pool() -> AsyncIterator[CpuPool]:
    cpu = CpuPool(1, kill_grace_s=0.2)
    try:
        yield cpu
    finally:
        await cpu.aclose()


async def test_a_job_past_its_timeout_is_upstream_timeout_and_its_worker_is_killed(
    pool: CpuPool, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    with pytest.raises(AgentmeshError) as caught:
        await pool.run(stubborn_sleep, str(pid_file), 60, timeout_s=0.3, what="stubborn", fallback_tool="query_logs")
    err = caught.value
    assert err.code == ErrorCode.UPSTREAM_TIMEOUT and err.fallback_tool == "query_logs"
    assert "stubborn did not finish within 0.3s" in err.message
    stuck = await pid_written(pid_file)
    # It ignored SIGTERM: only the SIGKILL after the grace ended it.
    await until_dead(stuck)
    # A fresh worker takes the slot.
    assert await pool.run(os.getpid, timeout_s=10, what="pid") not in (stuck, os.getpid())


async def test_a_caller_giving_up_kills_the_worker(pool: CpuPool, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    job = asyncio.create_task(pool.run(sleep_after_pid, str(pid_file), 60, timeout_s=60, what="sleeper"))
    running = await pid_written(pid_file)
    job.cancel()
    with pytest.raises(asyncio.CancelledError):
        await job
    await until_dead(running)
    assert await pool.run(os.getpid, timeout_s=10, what="pid") != running


async def test_round_with_huge_digits_is_stopped_in_a_worker(pool: CpuPool) -> None:
    # The unguarded computation of issue 19 (10**(10**7) for a 0): seconds of one C call.
    with pytest.raises(AgentmeshError) as caught:
        await pool.run(round, 1, -(10**7), timeout_s=0.3, what="round")
    assert caught.value.code == ErrorCode.UPSTREAM_TIMEOUT
    assert await pool.run(sum, [1, 2, 3], timeout_s=10, what="sum") == 6


async def test_errors_come_back_typed(pool: CpuPool) -> None:
    with pytest.raises(InvalidRequestError) as invalid:
        await pool.run(raise_invalid, "json_path", timeout_s=10, what="select")
    assert invalid.value.field == "json_path" and invalid.value.code == ErrorCode.INVALID_REQUEST
    with pytest.raises(AgentmeshError) as missing:
        await pool.run(raise_not_found, timeout_s=10, what="get")
    assert missing.value.code == ErrorCode.NOT_FOUND and missing.value.metadata == {"ref_id": "pl_x"}
    with pytest.raises(AgentmeshError) as bug:
        await pool.run(raise_bug, timeout_s=10, what="buggy job", fallback_tool="calculator")
    assert bug.value.code == ErrorCode.INTERNAL and bug.value.fallback_tool == "calculator"
    assert "internal detail" not in bug.value.message
    # The pool survived all three.
    assert await pool.run(max, 1, 2, timeout_s=10, what="max") == 2


async def test_nothing_starts_before_the_first_job_and_a_closed_pool_refuses() -> None:
    cpu = CpuPool(2)
    assert cpu._pool is None
    assert cpu.inline(64 * 1024) and not cpu.inline(64 * 1024 + 1)
    await cpu.aclose()
    with pytest.raises(AgentmeshError) as caught:
        await cpu.run(sum, [1], timeout_s=1, what="sum")
    assert caught.value.code == ErrorCode.UNAVAILABLE
