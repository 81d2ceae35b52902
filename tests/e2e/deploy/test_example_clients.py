"""The Go, TypeScript and Java example clients (examples/clients/go, ts, java), built from stubs generated
this run (`fresh_clients`: buf generate, then scripts/build-clients.sh; Java on Debian's grpc-java 1.41 over
Netty), against the services started as docker-compose.yml starts them: a task's events stream to
SUCCEEDED, a dropped stream resumes with WatchTask(after_sequence) with no gap or repeat, and a failed
call prints its typed error with our ErrorDetail (Java: and google.rpc.ErrorInfo), which carries the
request id the client sent.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from agentmesh.authenticator import Authenticator
from agentmesh.config import load_settings
from agentmesh.dev.localredis import LocalRedis
from tests.codegen import FreshTree
from tests.e2e.conftest import AUTH_KEY
from tests.e2e.deploy.conftest import SHELL
from tests.e2e.deploy.netcut import CuttingProxy
from tests.e2e.deploy.stack import Image, Stack, start_stack

pytestmark = pytest.mark.e2e

LANGUAGES = ("go", "ts", "java")
TERMINAL = {"SUCCEEDED", "FAILED", "ABORTED", "CANCELLED"}
# The test's own agent on the offline scripted model, so the run is deterministic whatever agents
# the example agentmesh.yaml configures (set through the documented AGENTMESH_AGENTS override).
AGENT = "example-client-e2e"
AGENTS = [{"id": AGENT, "description": "answers directly (example client test)", "model": "scripted/default"}]
GOAL = "Say hello"


@dataclass
class ExampleClient:
    language: str
    argv: list[str]
    stack: Stack

    def run(
        self, *args: str, token: str | None = None, json_lines: bool = True, timeout_s: float = 120
    ) -> tuple[int, list[dict[str, Any]], subprocess.CompletedProcess[str]]:
        """Runs the client (with --json); its exit code, the JSON records it printed, the process."""
        # Only the example's own variables: none of agentmesh's configuration (AGENTMESH_*) leaks in.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTMESH_", "AM_EXAMPLE_"))}
        env["AM_EXAMPLE_DISPATCHER"] = self.stack.target("dispatcher")
        if token is not None:
            env["AM_EXAMPLE_TOKEN"] = token
        flags = ["-json" if self.language == "go" else "--json"] if json_lines else []
        result = subprocess.run([*self.argv, *args, *flags], env=env, capture_output=True, text=True, timeout=timeout_s)
        records = []
        if json_lines:
            try:
                records = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
            except json.JSONDecodeError:
                pytest.fail(
                    f"{self.language} client printed a line that is not JSON:\n{result.stdout}\n{result.stderr}"
                )
        assert not result.stderr.strip() or result.returncode != 0, result.stderr
        return result.returncode, records, result

    def flag(self, name: str) -> str:
        """Go's flag package spells options -name, node's parseArgs and the Java example --name."""
        return f"-{name}" if self.language == "go" else f"--{name}"


def token(roles: tuple[str, ...] = ("operator",)) -> str:
    """An operator's token, as the README's AM_EXAMPLE_TOKEN from `agentmesh token --role operator`."""
    settings = load_settings(overrides={"auth": {"key": AUTH_KEY}})
    return Authenticator(settings.auth, settings.environment).mint(subject="example-client", roles=roles)


@pytest.fixture(scope="module")
def stack(image: Image, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    logs = tmp_path_factory.mktemp("clients-stack")
    with LocalRedis() as redis:
        started = start_stack(image, SHELL, redis.url, logs, extra_env={"AGENTMESH_AGENTS": json.dumps(AGENTS)})
        try:
            yield started
        finally:
            started.stop(timeout_s=20)


@pytest.fixture(scope="module")
def built(fresh_clients: FreshTree) -> FreshTree:
    """The examples built from this run's generated stubs."""
    for language in LANGUAGES:
        fresh_clients.build("java-client" if language == "java" else language)
    return fresh_clients


def argv_of(language: str, built: FreshTree) -> list[str]:
    if language == "go":
        return [str(built.go_client)]
    if language == "java":
        return [str(built.java_client)]
    node = shutil.which("node")
    assert node, "node is needed (the Makefile installs buf and the TypeScript toolchain with npm)"
    return [node, str(built.ts_client)]


@pytest.fixture(params=LANGUAGES)
def client(request: pytest.FixtureRequest, built: FreshTree, stack: Stack) -> ExampleClient:
    return ExampleClient(request.param, argv_of(request.param, built), stack)


def only(records: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r for r in records if r["type"] == kind]


def test_the_examples_build_from_the_fresh_stubs(built: FreshTree) -> None:
    assert built.go_client.exists()
    assert built.ts_client.exists()
    assert built.java_client.exists()
    # The TypeScript example compiled the generated code it imports, not a copy of its own.
    generated = built.root / "examples" / "clients" / "ts" / "dist" / "gen" / "ts" / "agentmesh" / "v1"
    assert (generated / "dispatcher_pb.js").exists()


def test_the_go_example_is_gofmt_clean_and_vetted(built: FreshTree) -> None:
    source = built.root / "examples" / "clients" / "go"
    gofmt = subprocess.run(["gofmt", "-l", str(source)], capture_output=True, text=True, timeout=60)
    assert gofmt.returncode == 0 and gofmt.stdout == "", f"not gofmt-formatted: {gofmt.stdout}{gofmt.stderr}"
    gopath = f"{built.root / 'build' / 'clients' / 'gopath'}:/usr/share/gocode"
    env = {**os.environ, "GOPATH": gopath, "GO111MODULE": "off", "GOFLAGS": "", "GOPROXY": "off"}
    # -trimpath, as the build: Go's cache then holds the analysis of the dependencies for every checkout.
    vet = subprocess.run(
        ["go", "vet", "-trimpath", "."], cwd=source, capture_output=True, text=True, timeout=120, env=env
    )
    assert vet.returncode == 0, vet.stderr


def test_lists_the_configured_agents(client: ExampleClient) -> None:
    code, records, _ = client.run("agents", token=token())
    assert code == 0
    assert [a["agent_id"] for a in only(records, "agent")] == [AGENT]


def test_run_streams_events_and_resumes_without_gaps_or_repeats(client: ExampleClient) -> None:
    code, records, _ = client.run("run", client.flag("agent"), AGENT, client.flag("goal"), GOAL,
                                  client.flag("disconnect-after"), "2", token=token())  # fmt: skip
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
    assert events[-1]["status"] == "SUCCEEDED", f"task ended {events[-1]}: {task.get('error')}"
    assert task["status"] == "SUCCEEDED" and task["last_sequence"] == sequences[-1]
    assert task["answer"]
    assert code == 0

    # The server's own log of the task, read afresh: what the client printed is all of it, once.
    code, replay, _ = client.run("watch", client.flag("task-id"), task_id, client.flag("after"), "0", token=token())
    assert code == 0
    assert [(e["sequence"], e["kind"]) for e in only(replay, "event")] == [(e["sequence"], e["kind"]) for e in events]


def test_a_stream_cut_by_the_network_resumes_without_gaps_or_repeats(client: ExampleClient) -> None:
    """The connection closes under the client after the first event: it sees a broken stream (not
    its own drop), backs off and resumes with WatchTask on a new connection, printing each event once."""
    with CuttingProxy(client.stack.target("dispatcher")) as proxy:
        code, records, result = client.run(
            client.flag("target"), proxy.target, "run", client.flag("agent"), AGENT, client.flag("goal"), GOAL,
            token=token(),
        )  # fmt: skip
    assert proxy.cuts == 1 and proxy.connections >= 2, result.stderr
    events = only(records, "event")
    resumes = only(records, "resume")
    assert resumes, f"no resume after the cut: {records}"
    first = resumes[0]
    before = [e for e in events if records.index(e) < records.index(first)]
    assert before and all(e["stream"] == "run" for e in before)
    assert (first["reason"], first["method"]) == ("broken", "WatchTask")
    assert first["after_sequence"] == before[-1]["sequence"]
    sequences = [e["sequence"] for e in events]
    assert sequences == list(range(1, len(sequences) + 1)), f"gap or repeat: {sequences}"
    (task,) = only(records, "task")
    assert events[-1]["status"] == task["status"] == "SUCCEEDED" and code == 0


def test_a_stream_cut_before_any_event_runs_the_same_task_again(client: ExampleClient) -> None:
    """Cut before the call's first response: nothing seen, so RunTask again with the same task_id,
    which finds the task started rather than starting a second one."""
    with CuttingProxy(client.stack.target("dispatcher"), before_response=True) as proxy:
        code, records, result = client.run(
            client.flag("target"), proxy.target, "run", client.flag("agent"), AGENT, client.flag("goal"), GOAL,
            token=token(),
        )  # fmt: skip
    assert proxy.cuts == 1, result.stderr
    (info,) = only(records, "info")
    (resume,) = only(records, "resume")
    assert (resume["reason"], resume["method"], resume["after_sequence"]) == ("broken", "RunTask", 0)
    assert records.index(resume) == records.index(info) + 1, "no event before the cut"
    events = only(records, "event")
    assert [e["sequence"] for e in events] == list(range(1, len(events) + 1))
    assert {e["task_id"] for e in events} == {info["task_id"]}
    (task,) = only(records, "task")
    assert task["status"] == "SUCCEEDED" and code == 0
    # One task, created once: a second start would have logged a second "task created" event.
    assert sum("task created" in e["message"] for e in events) == 1


def test_watch_replays_after_a_sequence(client: ExampleClient) -> None:
    _, records, _ = client.run("run", client.flag("agent"), AGENT, client.flag("goal"), GOAL, token=token())
    (task,) = only(records, "task")
    assert task["status"] in TERMINAL
    _, replay, _ = client.run(
        "watch", client.flag("task-id"), task["task_id"], client.flag("after"), "1", token=token()
    )
    assert [e["sequence"] for e in only(replay, "event")] == list(range(2, task["last_sequence"] + 1))


def test_unknown_agent_prints_not_found_with_its_error_detail(client: ExampleClient) -> None:
    code, records, _ = client.run(
        "run", client.flag("agent"), "no-such-agent", client.flag("goal"), GOAL, token=token()
    )
    (error,) = only(records, "error")
    assert code == 3
    assert (error["grpc_status"], error["grpc_code"]) == ("NOT_FOUND", 5)
    assert (error["code"], error["error_class"], error["retryable"]) == ("NOT_FOUND", "ENGINEERING", False)
    detail = error["detail"]
    assert detail["code"] == "ERROR_CODE_NOT_FOUND" and detail["error_class"] == "ERROR_CLASS_ENGINEERING"
    assert [v["path"] for v in detail["violations"]] == ["agent_id"]
    assert "no-such-agent" in detail["message"]
    assert not only(records, "event"), "no task was started"

    # What a person sees: the ErrorDetail, its violation, and what to do.
    code, _, result = client.run("run", client.flag("agent"), "no-such-agent", client.flag("goal"), GOAL,
                                 token=token(), json_lines=False)  # fmt: skip
    lines = result.stdout.splitlines()
    assert code == 3
    assert "error NOT_FOUND class=ENGINEERING grpc=NOT_FOUND(5)" in lines
    assert (
        "  agentmesh.v1.ErrorDetail: code=ERROR_CODE_NOT_FOUND error_class=ERROR_CLASS_ENGINEERING retryable=false"
        in lines
    )
    assert any(line.startswith("    violation agent_id: ") for line in lines)
    assert any(line.startswith("  what to do: ") for line in lines)


def test_unauthenticated_call_is_typed(client: ExampleClient) -> None:
    code, records, _ = client.run("agents")
    (error,) = only(records, "error")
    assert code == 3
    assert (error["grpc_status"], error["code"], error["error_class"]) == (
        "UNAUTHENTICATED",
        "UNAUTHENTICATED",
        "ENGINEERING",
    )
    assert error["detail"]["code"] == "ERROR_CODE_UNAUTHENTICATED"


def test_missing_role_names_the_missing_permission(client: ExampleClient) -> None:
    # A token without the operator role or a run grant for the agent may not start its tasks.
    code, records, _ = client.run(
        "run", client.flag("agent"), AGENT, client.flag("goal"), GOAL, token=token(("agent",))
    )
    (error,) = only(records, "error")
    assert code == 3
    assert (error["grpc_status"], error["code"]) == ("PERMISSION_DENIED", "PERMISSION_DENIED")
    assert error["detail"]["missing_permission"] == f"dev:agent.{AGENT}:run"


def test_every_language_reads_the_same_error_detail(built: FreshTree, stack: Stack) -> None:
    """The same failure decodes to the same ErrorDetail JSON in Go, TypeScript and Java, whose request_id
    is the one each client sent (issue 42)."""
    details = {}
    for language in LANGUAGES:
        example = ExampleClient(language, argv_of(language, built), stack)
        _, records, _ = example.run("run", example.flag("agent"), "no-such-agent", example.flag("goal"), GOAL,
                                    token=token())  # fmt: skip
        (info,) = only(records, "info")
        (error,) = only(records, "error")
        assert error["detail"].pop("request_id") == info["request_id"], language
        details[language] = error["detail"]
    assert details["go"] == details["ts"] == details["java"]


def test_java_decodes_error_info_and_the_request_id_trailer(built: FreshTree, stack: Stack) -> None:
    """google.rpc.ErrorInfo (newer than Debian's common protos: generated from the vendored proto) and the
    `x-request-id` trailer, as a client without agentmesh's own types reads an error."""
    example = ExampleClient("java", argv_of("java", built), stack)
    code, records, _ = example.run("run", "--agent", "no-such-agent", "--goal", GOAL, token=token())
    (info,) = only(records, "info")
    (error,) = only(records, "error")
    assert code == 3
    assert error["error_info"] == {
        "reason": "NOT_FOUND",
        "domain": "agentmesh.v1",
        "metadata": {"error_class": "ENGINEERING", "field": "agent_id"},
    }
    assert error["request_id"] == info["request_id"] == error["detail"]["request_id"]
    assert "google.rpc.BadRequest" in error["detail_types"]


def test_unreachable_dispatcher_is_a_typed_unavailable(client: ExampleClient) -> None:
    code, records, _ = client.run(client.flag("target"), "127.0.0.1:1", "agents", token=token())
    (error,) = only(records, "error")
    assert code == 3
    assert (error["grpc_status"], error["code"], error.get("detail")) == ("UNAVAILABLE", None, None)


def test_usage_errors_exit_2(client: ExampleClient) -> None:
    code, _, result = client.run("run", token=token(), json_lines=False)
    assert code == 2 and "run needs" in result.stderr
    code, _, result = client.run("nonsense", json_lines=False)
    assert code == 2 and "usage" in result.stderr
