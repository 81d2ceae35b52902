"""Spend admission around one generation: reserve in the caller's quota scopes, then settle or unwind.

Before the upstream call the plan's reserve (`planning.Plan`) is taken in every quota scope that
applies to the caller (API key, agent, tenant: `quotas.py`), which refuses with a typed error. After it:
a reply settles at its cost; a failed call is released when nothing went upstream, settled at no cost
when an upstream error ended it (an upstream error is not billed), or at its whole reserve when a reply
was under way (it may be billed). Settling runs off the reply's path: the reservation holds until it
lands, which only errs on the safe side.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from provider_svc.accounting import ANONYMOUS_AGENT, Generation
from provider_svc.models.base import CallContext
from provider_svc.planning import Plan
from provider_svc.quotas import Quotas, Reservation

__all__ = ["SpendAdmission"]


class SpendAdmission:
    """Reserves, settles and unwinds a call's spend (see the module docstring); inert without quotas."""

    def __init__(self, quotas: Quotas | None) -> None:
        self.quotas = quotas
        self._settling: set[asyncio.Task[None]] = set()

    async def aclose(self) -> None:
        """Waits (a while) for the settlements under way."""
        if self._settling:
            await asyncio.wait(set(self._settling), timeout=5.0)

    async def admit(self, plan: Plan, ctx: CallContext) -> Reservation | None:
        """The call's reservation in its quota scopes (None when none applies); typed refusals."""
        return await self.reserve(ctx, reserve_usd=plan.reserve_usd, tokens=plan.reserve_tokens)

    async def reserve(self, ctx: CallContext, *, reserve_usd: float, tokens: int) -> Reservation | None:
        """A reservation of these amounts in the caller's quota scopes (None when none applies); typed
        refusals. Embed reserves its estimate this way (it has no plan)."""
        if self.quotas is None:
            return None
        scopes = self.quotas.scopes(key_id=ctx.key_id, agent=ctx.agent_id or ANONYMOUS_AGENT, subject=ctx.subject)
        if not scopes:
            return None
        return await self.quotas.reserve(scopes, reserve_usd=reserve_usd, tokens=tokens)

    def _later(self, work: Awaitable[None]) -> None:
        # Off the reply's path: the reservation holds until it lands, which only errs on the safe side.
        task = asyncio.ensure_future(work)
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

    def settle(self, reservation: Reservation | None, generation: Generation) -> None:
        """A reply: the reservation settles at its cost and tokens."""
        if reservation is None or self.quotas is None:
            return
        usage = generation.response.usage
        tokens = usage.input_tokens + usage.output_tokens
        self._later(self.quotas.settle(reservation, cost_usd=generation.cost_usd, tokens=tokens))

    def settle_at(self, reservation: Reservation | None, *, cost_usd: float, tokens: int) -> None:
        """A call done without a Generation (Embed): the reservation settles at these amounts."""
        if reservation is None or self.quotas is None:
            return
        self._later(self.quotas.settle(reservation, cost_usd=cost_usd, tokens=tokens))

    def release(self, reservation: Reservation | None) -> None:
        """A call that never went upstream: its reservation leaves no trace."""
        if reservation is None or self.quotas is None:
            return
        self._later(self.quotas.release(reservation))

    def unwind(self, reservation: Reservation | None, ctx: CallContext, plan: Plan, *, started: bool) -> None:
        """A call that failed: released when nothing went upstream; otherwise settled at no cost (an upstream
        error is not billed), or at its whole reserve when a reply was under way (it may be billed)."""
        if reservation is None or self.quotas is None:
            return
        quotas = self.quotas
        if not ctx.attempts and not started:
            self._later(quotas.release(reservation))
        elif started:
            self._later(quotas.settle(reservation, cost_usd=plan.reserve_usd, tokens=plan.reserve_tokens))
        else:
            self._later(quotas.settle(reservation, cost_usd=0.0, tokens=0))
