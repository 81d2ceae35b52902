"""Fixtures for dispatcher domain tests: a Dispatcher on the test Redis with in-memory fakes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from agentmesh.authenticator import Authenticator
from agentmesh.config import Settings
from agentmesh.identity_value import Identity
from agentmesh.metrics import Metrics
from agentmesh.store import Store
from dispatcher_svc.model import TaskEvent
from dispatcher_svc.run.loop import Hook
from dispatcher_svc.service import Dispatcher, StartRequest
from tests.unit.dispatcher.fakes import FakeContext, FakeProvider, FakeTools, Policy, ports

AGENT = {
    "id": "ops",
    "system_prompt": "You are an ops agent.",
    "model": "fake/m",
    "permissions": ["dev:*:*"],
    "token_budget": 100_000,
    "max_steps": 8,
}


def identity(
    subject: str,
    *roles: str,
    agent_id: str = "",
    permissions: tuple[str, ...] = (),
    task_id: str = "",
    environment: str = "dev",
) -> Identity:
    """A verified caller, as the RPC edge hands it to the dispatcher."""
    return Identity(
        subject=subject,
        agent_id=agent_id,
        instance="",
        environment=environment,
        roles=frozenset(roles or ("operator",)),
        permissions=permissions,
        task_id=task_id,
        issued_at=0,
        expires_at=2**40,
        token_id="",
    )


OPERATOR = identity("alice", "operator")
"""Who starts, reads and cancels the tests' tasks."""
APPROVER = identity("bob", "operator")
"""A second operator: the one who resolves approvals and settlements (separation of duties)."""

FAST = {
    "claim_idle_s": 0.6,
    "claim_interval_s": 0.1,
    "heartbeat_interval_s": 0.2,
    "service_retry_backoff_s": 0.01,
    # Fail once the quick retries are spent, as these tests of failing and resuming expect; the
    # outage waits (dispatcher.outage_budget_s) have tests of their own (test_outage.py).
    "outage_budget_s": 0,
}


@dataclass
class Rig:
    dispatcher: Dispatcher
    context: FakeContext
    tools: FakeTools
    provider: FakeProvider
    store: Store

    async def start(self, goal: str = "check payment-svc", **kw: Any) -> str:
        caller = kw.pop("caller", OPERATOR)
        task = await self.dispatcher.start_task(
            StartRequest(agent_id=kw.pop("agent_id", "ops"), goal=goal, **kw), caller=caller, request_id="req-1"
        )
        return task.task_id

    async def events(self, task_id: str, after: int = 0, timeout_s: float = 15.0) -> list[TaskEvent]:
        """Every event until the task's final one (heartbeats dropped), once the run that wrote it has
        ended (its answer's append follows the final commit: a test reading the session looks after it)."""

        async def collect() -> list[TaskEvent]:
            events = [e async for e in self.dispatcher.watch(task_id, after, caller=OPERATOR) if e.sequence]
            await self.dispatcher.worker.run_ended(task_id)
            return events

        return await asyncio.wait_for(collect(), timeout_s)


MakeRig = Callable[..., Awaitable[Rig]]


@pytest.fixture
async def make_rig(make_settings: Callable[..., Settings]) -> AsyncIterator[MakeRig]:
    rigs: list[Rig] = []

    async def make(
        policy: Policy,
        tools: FakeTools | None = None,
        *,
        agent: dict[str, Any] | None = None,
        dispatcher: dict[str, Any] | None = None,
        hook: Hook | None = None,
        context: FakeContext | None = None,
        start: bool = True,
        overrides: dict[str, Any] | None = None,
        metrics: Metrics | None = None,
    ) -> Rig:
        settings = make_settings(
            {"agents": [{**AGENT, **(agent or {})}], "dispatcher": {**FAST, **(dispatcher or {})}, **(overrides or {})}
        )
        store = await Store.connect(settings.redis, settings.environment)
        rig = Rig(
            dispatcher=Dispatcher(
                settings=settings,
                store=store,
                ports=ports(context or FakeContext(), tools or FakeTools(), FakeProvider(policy)),
                authenticator=Authenticator(settings.auth, settings.environment),
                hook=hook,
                metrics=metrics,
            ),
            context=context or FakeContext(),
            tools=tools or FakeTools(),
            provider=FakeProvider(policy),
            store=store,
        )
        # One set of fakes, shared by the rig and its dispatcher.
        rig.context = rig.dispatcher.ports.context  # type: ignore[assignment]
        rig.tools = rig.dispatcher.ports.tools  # type: ignore[assignment]
        rig.provider = rig.dispatcher.ports.provider  # type: ignore[assignment]
        if start:
            await rig.dispatcher.start()
        rigs.append(rig)
        return rig

    yield make
    for rig in rigs:
        await rig.dispatcher.stop()
        await rig.store.close()
