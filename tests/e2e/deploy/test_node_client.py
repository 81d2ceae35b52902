"""The Node.js client (examples/clients/node) against the services, started as docker-compose.yml
starts them: it streams RunTask, resumes with WatchTask after a dropped stream, and reads typed
errors (class and google.rpc details) from failed calls.

`npm ci` installs the client's locked dependencies into its folder (once per lockfile).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentmesh.config import load_settings
from agentmesh.identity import Authenticator
from agentmesh.localredis import LocalRedis
from tests.e2e.conftest import AUTH_KEY
from tests.e2e.deploy.conftest import SHELL
from tests.e2e.deploy.stack import Image, Stack, start_stack
from tests.unit.deploy.manifests import REPO

pytestmark = pytest.mark.e2e

CLIENT_DIR = REPO / "examples" / "clients" / "node"
TERMINAL = {"SUCCEEDED", "FAILED", "ABORTED", "CANCELLED"}
# The test's own agent on the offline scripted model, so the run is deterministic whatever agents
# the example agentmesh.yaml configures (set through the documented AGENTMESH_AGENTS override).
AGENT = "node-client-e2e"
AGENTS = [{"id": AGENT, "description": "answers directly (node client test)", "model": "scripted/default"}]
GOAL = "Say hello"


def npm_ci() -> None:
    """Installs the client's dependencies exactly as locked, unless already installed from this lock."""
    npm = shutil.which("npm")
    assert npm, "npm is needed (the Makefile installs buf with it too)"
    lock = CLIENT_DIR / "package-lock.json"
    digest = hashlib.sha256(lock.read_bytes() + (CLIENT_DIR / "package.json").read_bytes()).hexdigest()
    stamp = CLIENT_DIR / "node_modules" / ".agentmesh-lock-sha256"
    # Two test runs at once must not install into the same folder together.
    with (Path(tempfile.gettempdir()) / "agentmesh-node-client-npm.lock").open("w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text(encoding="utf-8") == digest:
            return
        result = subprocess.run(
            [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=CLIENT_DIR,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, f"npm ci failed:\n{result.stdout}{result.stderr}"
        stamp.write_text(digest, encoding="utf-8")


@dataclass
class NodeClient:
    stack: Stack

    def run(self, *args: str, token: str | None = None, timeout_s: float = 120) -> tuple[int, list[dict[str, Any]]]:
        """Runs client.js with --json; its exit code and the JSON records it printed."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTMESH_")}
        env["AGENTMESH_DISPATCHER"] = self.stack.target("dispatcher")
        if token is not None:
            env["AGENTMESH_TOKEN"] = token
        node = shutil.which("node")
        assert node
        result = subprocess.run(
            [node, "client.js", *args, "--json"],
            cwd=CLIENT_DIR,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        try:
            records = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
        except json.JSONDecodeError:
            pytest.fail(f"client.js printed a line that is not JSON:\n{result.stdout}\n{result.stderr}")
        assert not result.stderr.strip() or result.returncode != 0, result.stderr
        return result.returncode, records


def token(roles: tuple[str, ...] = ("operator",)) -> str:
    """An operator's token by default, as the README's AGENTMESH_TOKEN: a token without the operator role
    needs the grant `<env>:agent.<id>:run` to start (or list) an agent, and reads only its own tasks."""
    settings = load_settings(overrides={"auth": {"key": AUTH_KEY}})
    return Authenticator(settings.auth, settings.environment).mint(subject="node-client", roles=roles)


@pytest.fixture(scope="module")
def client(image: Image, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeClient]:
    npm_ci()
    logs = tmp_path_factory.mktemp("node-stack")
    with LocalRedis() as redis:
        stack = start_stack(image, SHELL, redis.url, logs, extra_env={"AGENTMESH_AGENTS": json.dumps(AGENTS)})
        try:
            yield NodeClient(stack)
        finally:
            stack.stop(timeout_s=20)


def only(records: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r for r in records if r["type"] == kind]


def test_lists_the_configured_agents(client: NodeClient) -> None:
    code, records = client.run("agents", token=token())
    assert code == 0
    assert [a["agent_id"] for a in only(records, "agent")] == [AGENT]


def test_run_streams_events_and_resumes_without_gaps_or_repeats(client: NodeClient) -> None:
    code, records = client.run("run", "--agent", AGENT, "--goal", GOAL, "--disconnect-after", "2", token=token())
    (info,) = only(records, "info")
    task_id = info["task_id"]
    events = only(records, "event")
    (resume,) = only(records, "resume")
    (task,) = only(records, "task")

    # Two events from RunTask, then the stream is dropped and WatchTask picks up after sequence 2.
    assert len(events) > 2, "the task must have events after the dropped stream"
    assert [e["stream"] for e in events[:2]] == ["run", "run"]
    assert resume == {
        "type": "resume",
        "task_id": task_id,
        "after_sequence": 2,
        "reason": "dropped",
        "method": "WatchTask",
    }
    assert records.index(resume) == records.index(events[1]) + 1
    assert all(e["stream"] == "watch" for e in events[2:])
    sequences = [e["sequence"] for e in events]
    assert sequences == list(range(1, len(sequences) + 1)), f"gap or repeat: {sequences}"
    assert all(e["task_id"] == task_id for e in events)

    # The final status, as the stream's last event and as GetTask reports it.
    assert events[-1]["status"] in TERMINAL
    assert task["status"] == events[-1]["status"] and task["last_sequence"] == sequences[-1]
    assert code == (0 if task["status"] == "SUCCEEDED" else 1)
    assert task["status"] == "SUCCEEDED", f"task ended {task['status']}: {task.get('error')}"
    assert task["answer"]

    # The server's own log of the task, read afresh: what the client printed is all of it, once.
    code, replay = client.run("watch", "--task-id", task_id, "--after", "0", token=token())
    assert code == 0
    assert [(e["sequence"], e["kind"]) for e in only(replay, "event")] == [(e["sequence"], e["kind"]) for e in events]


def test_watch_replays_after_a_sequence(client: NodeClient) -> None:
    _, records = client.run("run", "--agent", AGENT, "--goal", GOAL, token=token())
    (task,) = only(records, "task")
    assert task["status"] in TERMINAL
    _, replay = client.run("watch", "--task-id", task["task_id"], "--after", "1", token=token())
    assert [e["sequence"] for e in only(replay, "event")] == list(range(2, task["last_sequence"] + 1))


def test_unauthenticated_call_is_typed(client: NodeClient) -> None:
    code, records = client.run("agents")
    (error,) = only(records, "error")
    assert code == 3
    assert error["grpc_status"] == "UNAUTHENTICATED"
    assert error["code"] == "UNAUTHENTICATED" and error["error_class"] == "ENGINEERING"
    assert error["error_info"]["domain"] == "agentmesh.v1"
    assert error["error_info"]["metadata"]["error_class"] == "ENGINEERING"
    # Our own ErrorDetail travels beside the standard details and says the same.
    assert error["detail"]["code"] == "ERROR_CODE_UNAUTHENTICATED"
    assert error["detail"]["errorClass"] == "ERROR_CLASS_ENGINEERING"


def test_unknown_agent_carries_bad_request_details(client: NodeClient) -> None:
    code, records = client.run("run", "--agent", "no-such-agent", "--goal", GOAL, token=token())
    (error,) = only(records, "error")
    assert code == 3
    assert (error["grpc_status"], error["code"], error["error_class"]) == ("NOT_FOUND", "NOT_FOUND", "ENGINEERING")
    violations = error["bad_request"]["fieldViolations"]
    assert [v["field"] for v in violations] == ["agent_id"]
    assert "no-such-agent" in violations[0]["description"]
    assert not only(records, "event"), "no task was started"


def test_missing_role_names_the_missing_permission(client: NodeClient) -> None:
    code, records = client.run("approve", "--task-id", "t-1", "--approval-id", "a-1", token=token(("agent",)))
    (error,) = only(records, "error")
    assert code == 3
    assert (error["grpc_status"], error["code"], error["error_class"]) == (
        "PERMISSION_DENIED",
        "PERMISSION_DENIED",
        "ENGINEERING",
    )
    assert error["error_info"]["metadata"]["missing_permission"] == "role:admin|operator"
    assert error["detail"]["missingPermission"] == "role:admin|operator"
    assert error["retryable"] is False


def test_human_readable_output(client: NodeClient) -> None:
    node = shutil.which("node")
    assert node
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTMESH_")}
    env["AGENTMESH_DISPATCHER"] = client.stack.target("dispatcher")
    result = subprocess.run(
        [node, "client.js", "agents"], cwd=CLIENT_DIR, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 3
    lines = result.stdout.splitlines()
    assert lines[0] == "error UNAUTHENTICATED class=ENGINEERING grpc=UNAUTHENTICATED(16)"
    assert any(line.startswith("  google.rpc.ErrorInfo: reason=UNAUTHENTICATED domain=agentmesh.v1") for line in lines)
    assert any(line.startswith("  what to do: ") for line in lines)


def test_usage_errors_exit_2(client: NodeClient) -> None:
    node = shutil.which("node")
    assert node
    result = subprocess.run([node, "client.js", "run"], cwd=CLIENT_DIR, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "run needs --agent and --goal" in result.stderr
