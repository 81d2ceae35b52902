"""A supervised service process follows its supervisor (`agentmesh up`) into death.

Children ask the kernel for SIGTERM when their supervisor dies, so even a SIGKILLed `agentmesh up`
leaves none behind. Core: no grpc; the host calls it first thing.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

__all__ = ["SUPERVISOR_PID_ENV", "die_with_supervisor"]

_PR_SET_PDEATHSIG = 1
SUPERVISOR_PID_ENV = "AGENTMESH_SUPERVISOR_PID"


def die_with_supervisor() -> None:
    """In a supervised service: get SIGTERM when the supervisor dies; exit if it already has.

    Done in the child itself rather than in a preexec_fn, which is unsafe once grpc has threads.
    """
    expected = os.environ.get(SUPERVISOR_PID_ENV)
    if not expected or not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    # The supervisor may have died before prctl took effect: then we were re-parented already.
    if str(os.getppid()) != expected:
        raise SystemExit(f"supervisor {expected} is gone; exiting")
