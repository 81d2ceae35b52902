"""CPU-heavy work off the event loop: a bounded process pool whose timeouts kill the worker (docs/design.md §5).

A thread cannot be stopped and holds the GIL, so CPU-bound work on the loop (or in `asyncio.to_thread`)
stalls every RPC of the replica, health included, and no `asyncio.timeout` can interrupt it. Here each
job runs in a worker process of a `pebble.ProcessPool` (`tools.cpu_workers` of them); a job that
outlives its timeout, or whose caller gives up, has its worker terminated (SIGTERM, then SIGKILL after
`tools.cpu_kill_grace_s`) and a fresh one takes its place. The caller gets UPSTREAM_TIMEOUT within the
timeout plus the grace, whatever the worker is doing.

Jobs are module-level functions (they travel to the worker by reference) over picklable arguments.
Work on small inputs stays inline (`inline`): a process hop costs about a millisecond of pickling and
pipe traffic, more than parsing or selecting a few KiB.

The pool is created on the first job, so importing this module or building a Gateway starts nothing;
`aclose` (the gateway's) stops the workers. Workers come from a fork server, never a fork of this
process: forking a process running grpc's threads can leave the child holding their locks.

Domain code: no grpc.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import pickle
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

import pebble
from pebble import CONSTS

from agentmesh.errors import AgentmeshError, ErrorCode
from agentmesh.redacted import redact_free_text

log = logging.getLogger("tool_svc.cpu")

T = TypeVar("T")

# The modules defining tool_svc's jobs (imported by the fork server, never by this module).
PRELOAD = ("tool_svc.builtin", "tool_svc.cpu_validation", "agentmesh.payloads")

DEFAULT_INLINE_MAX_BYTES = 64 * 1024
"""Inputs up to this size are handled inline: the process hop would cost more than the work."""


class JobFailed(Exception):
    """A job raised something other than an AgentmeshError (a bug): its type and text, picklable."""


def _portable(exc: AgentmeshError) -> AgentmeshError:
    """`exc`, or a plain AgentmeshError with its fields when its class cannot be rebuilt from a pickle
    (an unpicklable result breaks the whole pebble pool)."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return exc.replace()
    return exc


def _job(fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> T:
    """Runs in the worker: `fn(*args, **kwargs)`, with every error made safe to send back."""
    try:
        return fn(*args, **kwargs)
    except AgentmeshError as exc:
        raise _portable(exc) from None
    except Exception as exc:
        raise JobFailed(f"{type(exc).__name__}: {exc}"[:2000] + "\n" + traceback.format_exc()[-4000:]) from None


class CpuPool:
    """The replica's worker processes for CPU-bound jobs; see the module docstring."""

    def __init__(
        self, workers: int = 2, *, kill_grace_s: float = 1.0, inline_max_bytes: int = DEFAULT_INLINE_MAX_BYTES
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if kill_grace_s <= 0:
            raise ValueError(f"kill_grace_s must be > 0, got {kill_grace_s}")
        self.workers = workers
        self.kill_grace_s = kill_grace_s
        self.inline_max_bytes = inline_max_bytes
        self._pool: pebble.ProcessPool | None = None
        self._closed = False

    def inline(self, size: int) -> bool:
        """Whether work on an input of `size` bytes (or characters) is cheaper done here."""
        return size <= self.inline_max_bytes

    def _ready(self) -> pebble.ProcessPool:
        if self._closed:
            raise AgentmeshError(ErrorCode.UNAVAILABLE, "tool_svc is shutting down: its worker pool is closed")
        pool = self._pool
        if pool is not None and not pool.active:
            # A manager thread of the pool died (pebble then fails every job): start over.
            log.error("the CPU worker pool broke; starting a new one")
            pool.stop()  # type: ignore[no-untyped-call]
            pool = None
        if pool is None:
            # pebble waits this long between SIGTERM and SIGKILL of a worker it stops. A worker stuck in
            # one long C call (a huge pow) only dies of SIGKILL: the grace bounds how long its slot and
            # the pool's manager thread stay busy. Process-wide; one pool per replica.
            CONSTS.term_timeout = self.kill_grace_s
            context = multiprocessing.get_context("forkserver")
            # Workers are forked from the server with the job modules loaded: a replacement for a killed
            # worker is ready in milliseconds, not after half a second of imports. (No effect once the
            # process's fork server runs.)
            context.set_forkserver_preload(["__main__", *PRELOAD])
            pool = pebble.ProcessPool(max_workers=self.workers, context=context)
            self._pool = pool
        return pool

    async def run(
        self,
        fn: Callable[..., T],
        *args: Any,
        timeout_s: float,
        what: str,
        fallback_tool: str = "",
        **kwargs: Any,
    ) -> T:
        """`fn(*args, **kwargs)` in a worker. An AgentmeshError it raises is raised here.

        UPSTREAM_TIMEOUT when it has not finished `timeout_s` after it started, or `timeout_s` plus the
        kill grace after it was queued (its worker is killed); INTERNAL when it failed unexpectedly or
        its worker died. Cancelling the caller kills the worker too.
        """
        future = self._ready().schedule(_job, args=(fn, args, kwargs), timeout=timeout_s)
        try:
            async with asyncio.timeout(timeout_s + self.kill_grace_s):
                return await asyncio.wrap_future(future)
        except TimeoutError:
            # pebble's own timeout (the job ran too long) or ours (it also waited for a worker).
            raise AgentmeshError(
                ErrorCode.UPSTREAM_TIMEOUT,
                f"{what} did not finish within {timeout_s:.3g}s and was stopped",
                fallback_tool=fallback_tool,
            ) from None
        except AgentmeshError:
            raise
        except pebble.ProcessExpired as exc:
            log.error("a CPU worker died running %s: %s (exit code %s)", what, exc, exc.exitcode)
            raise AgentmeshError(
                ErrorCode.INTERNAL, f"{what} failed: its worker process died", fallback_tool=fallback_tool
            ) from None
        except JobFailed as exc:
            # Its text and traceback may quote the job's input (a tool's output): masked.
            log.error("%s failed in a CPU worker: %s", what, redact_free_text(str(exc)))
            raise AgentmeshError(
                ErrorCode.INTERNAL, f"{what} failed unexpectedly", fallback_tool=fallback_tool
            ) from None
        finally:
            # Still running (we timed out or were cancelled): pebble kills its worker.
            future.cancel()  # type: ignore[no-untyped-call]

    async def aclose(self) -> None:
        """Stops the workers (a job still running is killed); later jobs get UNAVAILABLE."""
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.stop()  # type: ignore[no-untyped-call]
            await asyncio.to_thread(pool.join)
