"""The four services in-process on one Redis (standalone or Cluster), for whole-task contract tests.

`Stack(redis_url, workdir, overrides)` starts provider_svc, tool_svc and context_svc on 127.0.0.1:0,
then the dispatcher dialling them; `run(goal)` runs a task of agent `smoke` through RunTask. The
agent's scripted model (`policy`) computes the goal's arithmetic with the `calculator` tool and answers
`ANSWER: <result>`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import grpc.aio

from agentmesh.authenticator import Authenticator
from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.config import Settings, deep_merge, load_settings
from agentmesh.rpc.host import ServiceHost, ServiceSpec
from agentmesh.store import Store
from agentmesh.telemetry import setup_telemetry
from agentmesh.v1 import dispatcher_pb2, dispatcher_pb2_grpc
from context_svc.server import SPEC as CONTEXT_SPEC
from dispatcher_svc.server import SPEC as DISPATCHER_SPEC
from provider_svc.models.base import Role
from provider_svc.server import SPEC as PROVIDER_SPEC
from provider_svc.testing.scripted import ScriptedReply, ScriptedRequest, ScriptedToolCall
from tests.conftest import TEST_AUTH_KEY
from tool_svc.server import SPEC as TOOL_SPEC

AGENT = "smoke"
_EXPRESSION = re.compile(r"compute ([0-9*+ -]+)")


def policy(req: ScriptedRequest) -> ScriptedReply:
    """Calls the calculator on the goal's expression, then answers with its output."""
    results = [m for m in req.messages if m.role == Role.TOOL]
    if not results:
        match = _EXPRESSION.search(req.goal)
        expression = match.group(1).strip() if match else "1+1"
        return ScriptedReply(tool_calls=(ScriptedToolCall("calculator", json.dumps({"expression": expression})),))
    return ScriptedReply(text=f"ANSWER: {results[-1].content[:200]}")


class Stack:
    """The four services in-process (module docstring)."""

    def __init__(
        self,
        redis_url: str,
        workdir: Path,
        overrides: dict[str, Any] | None = None,
        *,
        http: bool = False,
        http_addresses: dict[str, str] | None = None,
        service_overrides: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        self.redis_url = redis_url
        self.http = http
        """Open every service's HTTP listener too (Connect, /metrics) on a free port: `host.http_port`."""
        self.http_addresses = http_addresses or {}
        """With `http`: a service's HTTP listener address instead of a free port ("dispatcher": "127.0.0.1:PORT")."""
        self.service_overrides = service_overrides or {}
        """Settings of one service only, merged over `overrides` (e.g. tool_svc's CORS origins)."""
        self.workdir = workdir
        self.overrides = overrides or {}
        self.hosts: dict[str, tuple[ServiceHost, Any]] = {}
        self.channel: grpc.aio.Channel | None = None

    def settings(self, services: dict[str, Any], extra: dict[str, Any] | None = None) -> Settings:
        base: dict[str, Any] = {
            "redis": {"url": self.redis_url},
            "auth": {"key": TEST_AUTH_KEY},
            "server": {"drain_delay_s": 0, "grace_period_s": 1},
            "telemetry": {"span_file": str(self.workdir / "spans.jsonl"), "log_level": "WARNING"},
            "services": services,
            "providers": {
                "default_model": "scripted/smoke",
                "backends": [
                    {
                        "name": "scripted",
                        "type": "scripted",
                        "models": [{"name": "smoke", "policy": "tests.contract.stack:policy"}],
                    }
                ],
            },
            # The first calculator call starts tool_svc's CPU pool: a loaded test machine may take seconds.
            "tools": {
                "builtins": ["calculator", "read_payload"],
                "registry": [{"name": "calculator", "executor": "builtin", "timeout_s": 60}],
            },
            "agents": [
                {
                    "id": AGENT,
                    "model": "scripted/smoke",
                    "tools": ["calculator"],
                    "permissions": ["*:*:*"],
                    "max_steps": 4,
                    "token_budget": 20_000,
                }
            ],
            "dispatcher": {"call_timeout_s": 10, "heartbeat_interval_s": 0.5},
        }
        empty = self.workdir / "agentmesh-stack.yaml"
        empty.write_text("{}\n", encoding="utf-8")
        return load_settings(empty, overrides=deep_merge(deep_merge(base, self.overrides), extra or {}))

    async def _start(self, spec: ServiceSpec, services: dict[str, Any]) -> ServiceHost:
        settings = self.settings(services, self.service_overrides.get(spec.name))
        store = await Store.connect(settings.redis, settings.environment)
        host = ServiceHost(
            name=spec.name,
            settings=settings,
            telemetry=setup_telemetry(f"{spec.name}_svc", settings),
            authenticator=Authenticator(settings.auth, settings.environment),
            method_roles=spec.method_roles,
            store=store,
        )
        cleanup = await spec.setup(host)
        http_address = self.http_addresses.get(spec.name, "127.0.0.1:0") if self.http else None
        await host.start("127.0.0.1:0", http_address=http_address)
        self.hosts[spec.name] = (host, cleanup)
        return host

    async def __aenter__(self) -> Stack:
        try:
            services: dict[str, Any] = {}
            for spec in (PROVIDER_SPEC, TOOL_SPEC, CONTEXT_SPEC):
                host = await self._start(spec, services)
                services[spec.name] = {"host": "127.0.0.1", "port": host.port}
            dispatcher = await self._start(DISPATCHER_SPEC, services)
            self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{dispatcher.port}")
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self.channel is not None:
            await self.channel.close(None)
            self.channel = None
        for host, cleanup in reversed(list(self.hosts.values())):
            await host.stop(grace=0, drain_delay=0)
            if cleanup is not None:
                await cleanup()
            if host.store is not None:
                await host.store.close()
            await host.telemetry.aclose()
        self.hosts.clear()

    def store(self, service: str) -> Store:
        store = self.hosts[service][0].store
        assert store is not None
        return store

    async def run(self, goal: str, task_id: str = "", session_id: str = "") -> list[dispatcher_pb2.TaskEvent]:
        """Runs a task of `smoke` through RunTask (continuing `session_id` when given); its events."""
        assert self.channel is not None
        token = Authenticator(self.hosts["dispatcher"][0].settings.auth, "dev").mint(
            subject="operator", roles=("operator",)
        )
        stub = dispatcher_pb2_grpc.DispatcherServiceStub(self.channel)  # type: ignore[no-untyped-call]
        start = dispatcher_pb2.StartTaskRequest(agent_id=AGENT, goal=goal, task_id=task_id, session_id=session_id)
        call = stub.RunTask(
            dispatcher_pb2.RunTaskRequest(start=start), metadata=((IDENTITY_HEADER, token),), timeout=60
        )
        return [reply.event async for reply in call]
