"""The four real services in-process on one Redis, provider_svc on a fake OpenAI server (issue 24).

`stack` starts context_svc, tool_svc (its built-ins: the calculator), provider_svc (backend `openai`
pointing at a `tests.contract.provider.fakes.FakeProvider` speaking the real chat completions wire,
validated against the SDK, plus `scripted`) and dispatcher_svc with two agents: `chat` on the fake,
`other` on the scripted model. Tests call the dispatcher and context_svc with tokens of their choosing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from agentmesh.config import ServiceEndpoint, ServicesSettings, Settings
from agentmesh.rpc.status import from_rpc_error
from agentmesh.v1 import context_pb2_grpc, dispatcher_pb2, dispatcher_pb2_grpc
from context_svc.server import SPEC as CONTEXT
from dispatcher_svc.server import SPEC as DISPATCHER
from provider_svc.server import SPEC as PROVIDER
from tests.conftest import RunningService
from tests.contract.provider.fakes import FakeProvider
from tool_svc.server import SPEC as TOOL

D = dispatcher_pb2
OPENAI_KEY = "sk-test-openai-SECRET-0123456789abcdef"
TERMINAL = {D.TASK_STATUS_SUCCEEDED, D.TASK_STATUS_FAILED, D.TASK_STATUS_ABORTED, D.TASK_STATUS_CANCELLED}
Metadata = tuple[tuple[str, str], ...]


@dataclass
class Stack:
    dispatcher: RunningService
    context: RunningService
    fake: FakeProvider
    stub: dispatcher_pb2_grpc.DispatcherServiceStub
    context_stub: context_pb2_grpc.ContextServiceStub

    def md(self, roles: tuple[str, ...] = ("operator",), **claims: Any) -> Metadata:
        claims.setdefault("subject", "alice")
        return self.dispatcher.metadata(roles, **claims)

    def user(self, subject: str, *agents: str) -> Metadata:
        """A non-operator's token (no agent id) allowed to run `agents` (`dev:agent.<id>:run`)."""
        grants = [f"dev:agent.{a}:run" for a in agents or ("chat",)]
        return self.md(("agent",), subject=subject, permissions=grants)

    @property
    def redis(self) -> Any:
        """The dispatcher's own Redis client (bytes in, bytes out)."""
        assert self.dispatcher.host.store is not None
        return self.dispatcher.host.store.redis

    @property
    def settings(self) -> Settings:
        """The configuration a CLI on this machine would read: the dispatcher's, with its real port."""
        settings = self.dispatcher.settings
        services = settings.services.model_copy(update={"dispatcher": ServiceEndpoint(port=self.dispatcher.host.port)})
        assert isinstance(services, ServicesSettings)
        return settings.model_copy(update={"services": services})

    async def start(self, goal: str, md: Metadata | None = None, **fields: Any) -> D.Task:
        request = D.StartTaskRequest(agent_id=fields.pop("agent_id", "chat"), goal=goal, **fields)
        task: D.Task = (await self.stub.StartTask(request, metadata=md or self.md())).task
        return task

    async def wait(self, task_id: str, md: Metadata | None = None, timeout_s: float = 30.0) -> D.Task:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            task: D.Task = (await self.stub.GetTask(D.GetTaskRequest(task_id=task_id), metadata=md or self.md())).task
            if task.status in TERMINAL:
                return task
            assert asyncio.get_running_loop().time() < deadline, f"task {task_id} still {task.status}"
            await asyncio.sleep(0.05)

    async def run(self, goal: str, md: Metadata | None = None, **fields: Any) -> D.Task:
        task = await self.start(goal, md, **fields)
        return await self.wait(task.task_id, md)


def code_of(exc: grpc.aio.AioRpcError) -> str:
    return from_rpc_error(exc).code.name


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    server = FakeProvider("openai").start()
    try:
        yield server
    finally:
        server.stop()
    assert not server.errors, "requests or responses the SDK types reject:\n" + "\n".join(server.errors)


MakeStack = Callable[..., Awaitable[Stack]]


@pytest.fixture
async def make_stack(
    start_service: Callable[..., Awaitable[RunningService]], fake: FakeProvider
) -> AsyncIterator[MakeStack]:
    async def make(dispatcher: dict[str, Any] | None = None, context: dict[str, Any] | None = None) -> Stack:
        providers = {
            "backends": [
                {
                    "name": "openai",
                    "type": "openai",
                    "base_url": fake.base_url,
                    "api_key": OPENAI_KEY,
                    "retry": {"max_retries": 0},
                    "rate_limit_per_min": None,
                    "models": [{"name": "m1"}],
                },
                {"name": "scripted", "type": "scripted", "rate_limit_per_min": None, "models": [{"name": "default"}]},
            ],
            "default_model": "scripted/default",
        }
        ctx = await start_service(CONTEXT, {"context": context or {}})
        # The calculator's first call starts tool_svc's worker processes: slow on a loaded machine.
        tool = await start_service(
            TOOL, {"tools": {"registry": [{"name": "calculator", "executor": "builtin", "timeout_s": 30}]}}
        )
        provider = await start_service(PROVIDER, {"providers": providers})
        agents = [
            {
                "id": "chat",
                "model": "openai/m1",
                "system_prompt": "You answer briefly.",
                "temperature": 0.2,
                "max_output_tokens": 256,
                "tools": ["calculator"],
                "permissions": ["*:builtin.*:read"],
            },
            {"id": "other", "model": "scripted/default", "tools": ["calculator"], "permissions": ["*:builtin.*:read"]},
        ]
        ports = {"context": ctx.host.port, "tool": tool.host.port, "provider": provider.host.port}
        svc = await start_service(
            DISPATCHER,
            {
                "services": {name: {"port": port} for name, port in ports.items()},
                "agents": agents,
                "dispatcher": {
                    "claim_idle_s": 2.0,
                    "claim_interval_s": 0.2,
                    "heartbeat_interval_s": 0.2,
                    "service_retry_backoff_s": 0.01,
                    # Fail once the quick retries are spent, as these tests of failing and resuming expect; the
                    # outage waits (dispatcher.outage_budget_s) have tests of their own (test_outage.py).
                    "outage_budget_s": 0,
                    **(dispatcher or {}),
                },
            },
        )
        return Stack(
            dispatcher=svc,
            context=ctx,
            fake=fake,
            stub=dispatcher_pb2_grpc.DispatcherServiceStub(svc.channel),  # type: ignore[no-untyped-call]
            context_stub=context_pb2_grpc.ContextServiceStub(ctx.channel),  # type: ignore[no-untyped-call]
        )

    yield make
