"""One retry schedule: exponential backoff with a cap and additive jitter, as a value.

`Backoff.delay(n, draw)` is the delay before retry `n` (1-based): min(initial * multiplier^(n-1), max)
+ jitter * draw, where `draw` in [0, 1) is the caller's random number. Pure (no clock, no randomness
of its own), so a decision that uses it stays a pure function and a test picks the draw. Every retry
loop of the services uses it: the dispatcher's outage waits and workflow retries (docs/design.md §7),
tool_svc's retries of transient faults (`RetryPolicy.schedule`) and provider_svc's upstream retries
(`RetryPolicy.backoff`). The Python client (clients/python, its own distribution that imports nothing of
the server) keeps its own reconnect delay.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Backoff"]


@dataclass(frozen=True)
class Backoff:
    """Delays of successive retries: `initial_s`, x `multiplier` each time, at most `max_s`, plus up
    to `jitter_s` of random spread (so callers that failed together do not retry together)."""

    initial_s: float
    max_s: float
    multiplier: float = 2.0
    jitter_s: float = 0.0

    def __post_init__(self) -> None:
        if self.initial_s < 0 or self.max_s < 0 or self.jitter_s < 0:
            raise ValueError(f"backoff delays must be >= 0: {self}")
        if self.multiplier < 1:
            raise ValueError(f"backoff multiplier must be >= 1, got {self.multiplier}")

    def delay(self, retry: int, draw: float = 0.0) -> float:
        """Seconds to wait before retry number `retry` (1-based); `draw` in [0, 1) spreads it."""
        if retry < 1:
            raise ValueError(f"retry numbers start at 1, got {retry}")
        if not 0.0 <= draw < 1.0:
            raise ValueError(f"draw must be in [0, 1), got {draw}")
        # Exponent capped: past ~64 doublings the cap has long been reached, and floats would overflow.
        base = min(self.initial_s * self.multiplier ** min(retry - 1, 64), self.max_s)
        return base + self.jitter_s * draw
