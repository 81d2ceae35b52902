"""The timeout message of run_python names the limit the code really had (issue 39: "ran longer than
600s" for code killed after 10 s, the sandbox's own limit)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from agentmesh.errors import AgentmeshError, ErrorCode
from tool_svc.builtin.run_python import make
from tool_svc.model import Caller, Invocation
from tool_svc.sandbox import SandboxRun


class StubSandbox:
    def __init__(self, limit_s: float) -> None:
        self.settings = SimpleNamespace(timeout_s=limit_s)
        self.asked: list[float | None] = []

    async def run(self, code: str, *, timeout_s: float | None = None) -> SandboxRun:
        self.asked.append(timeout_s)
        return SandboxRun(exit_code=-9, stdout="", stderr="", truncated=False, timed_out=True)


@pytest.mark.parametrize(
    ("argument", "call_timeout", "sandbox_limit", "said"),
    [(600, 600, 10, "10s"), (600, 5, 10, "5s"), (3, 600, 10, "3s"), (None, 600, 10, "10s")],
)
async def test_the_message_states_the_real_limit(
    argument: float | None, call_timeout: float, sandbox_limit: float, said: str
) -> None:
    sandbox = StubSandbox(sandbox_limit)
    run: Any = make(sandbox)  # type: ignore[arg-type]
    arguments: dict[str, Any] = {"code": "while True: pass"}
    if argument is not None:
        arguments["timeout_s"] = argument
    invocation = Invocation(
        tool=None,  # type: ignore[arg-type]  # run_python does not read it
        arguments=arguments,
        session_id="s",
        goal="",
        timeout_s=call_timeout,
        caller=Caller(subject="a"),
    )
    with pytest.raises(AgentmeshError) as caught:
        await run(invocation)
    assert caught.value.code == ErrorCode.UPSTREAM_TIMEOUT
    assert f"longer than {said} " in caught.value.message, caught.value.message
    assert sandbox.asked == [float(said[:-1])]
