"""A log that says a few lines per kind per interval, and how many more it kept quiet.

The edge logs every error it answers (docs/design.md §11); a hostile or broken caller can
send thousands of bad calls a second, so those lines are rate-limited per kind (method and code):
at most `burst` lines per `window_s` for each kind. The first line of a kind in a new window is
preceded by one "suppressed K similar" line for the window before it, so a steady flood costs
`burst + 1` lines per kind per window, and the count is never lost while the flood goes on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

__all__ = ["RateLimitedLog"]

# Kinds come from method names and codes, both bounded; this is the backstop.
_MAX_KINDS = 4096
_OVERFLOW_KIND = ("(other kinds)",)


@dataclass
class _Window:
    start: float
    logged: int = 0
    suppressed: int = 0


class RateLimitedLog:
    """`log(kind, level, msg, *args)`: at most `burst` lines per `window_s` seconds per kind."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        burst: int = 5,
        window_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.burst = burst
        self.window_s = window_s
        self.clock = clock
        self._windows: dict[Hashable, _Window] = {}

    def log(self, kind: Hashable, level: int, msg: str, *args: object) -> bool:
        """Logs the line unless its kind used its burst in this window; True when it was logged."""
        if not self.logger.isEnabledFor(level):
            return False
        now = self.clock()
        window = self._window(kind, now)
        if now - window.start >= self.window_s:
            if window.suppressed:
                self.logger.log(
                    level,
                    "suppressed %d similar lines in %.0fs: %s",
                    window.suppressed,
                    now - window.start,
                    msg % args if args else msg,
                )
            window.start, window.logged, window.suppressed = now, 0, 0
        if window.logged >= self.burst:
            window.suppressed += 1
            return False
        window.logged += 1
        self.logger.log(level, msg, *args)
        return True

    def _window(self, kind: Hashable, now: float) -> _Window:
        window = self._windows.get(kind)
        if window is not None:
            return window
        if len(self._windows) >= _MAX_KINDS:
            # Forget the quiet kinds first; if every kind is busy, share one window.
            for old in [k for k, w in self._windows.items() if now - w.start >= self.window_s and not w.suppressed]:
                del self._windows[old]
            if len(self._windows) >= _MAX_KINDS:
                kind = _OVERFLOW_KIND
        return self._windows.setdefault(kind, _Window(start=now))
