"""The README runs (issue 27): every shell block, in order, as one terminal session.

- `test_readme_runs_in_this_checkout` (in `make test`): the blocks run in this checkout, whose `make
  venv` is then a no-op; about 90 s alone (its "Your first agent" starts a second `agentmesh up`).
- `test_readme_runs_from_a_fresh_clone` (`make test-readme`, README_TEST_CLONE=1): `git clone` of this
  repository's HEAD (uncommitted changes are not in it) into a temporary directory, where the README's
  install step really installs (PyPI and npm), then the same session.

Both check the acceptance of the headline: the install step, `agentmesh up &` and the README's first
`agentmesh run` with nothing in between, which ends SUCCEEDED; then every other block exits 0. Blocks
marked `<!-- readme-test: skip (reason) -->` are left out: the Docker, Jaeger and Kubernetes ones only.
How the session differs from a terminal (ports, grpcurl): tests/readme/session.py.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.readme import grpcurl
from tests.readme.blocks import Block, parse_blocks
from tests.readme.session import SessionResult, build_script, rewrite_ports, run_session, split_output

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SKIPPABLE = re.compile(r"\b(docker|jaeger|kubectl|kubernetes|k8s)\b", re.IGNORECASE)
RECURSIVE = re.compile(r"^\s*make\s+(test|demo|bench|fuzz|chaos|gen|clients|toolchains)\b", re.MULTILINE)


def commands(block: Block) -> list[str]:
    """The block's command lines: comments and blank lines dropped, continuations joined."""
    joined = block.text.replace("\\\n", " ")
    lines = [re.sub(r"\s+#.*$", "", line).strip() for line in joined.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def readme_blocks() -> list[Block]:
    return parse_blocks(README.read_text(encoding="utf-8"))


def first_run(blocks: list[Block]) -> int:
    """The block of `agentmesh up &` immediately followed by the first `agentmesh run` (its number among
    all the blocks, skipped ones included)."""
    for number, block in enumerate(blocks):
        if block.skip is not None:
            continue
        lines = commands(block)
        for i, line in enumerate(lines):
            if re.match(r"^agentmesh up\s*&", line):
                assert i + 1 < len(lines) and lines[i + 1].startswith("agentmesh run "), (
                    f"README line {block.line}: `agentmesh up &` must be followed by the first `agentmesh run`"
                )
                return number
    raise AssertionError("no `agentmesh up &` block in the README")


# --- the README's shape ----------------------------------------------------------------------------


def test_only_docker_jaeger_and_kubernetes_blocks_are_skipped() -> None:
    skipped = [block for block in readme_blocks() if block.skip is not None]
    assert len(skipped) <= 3
    for block in skipped:
        assert SKIPPABLE.search(block.skip or ""), f"line {block.line}: skip reason must name Docker/Jaeger/Kubernetes"
        assert SKIPPABLE.search(block.text), f"line {block.line}: only a Docker, Jaeger or Kubernetes block may skip"


def test_no_block_runs_a_make_target_that_would_recurse() -> None:
    for block in readme_blocks():
        if block.skip is None:
            assert not RECURSIVE.search(block.text), f"README line {block.line} runs {RECURSIVE.search(block.text)}"


def test_the_blocks_parse_as_shell() -> None:
    for block in readme_blocks():
        result = subprocess.run(["bash", "-n"], input=block.text, text=True, capture_output=True, check=False)
        assert result.returncode == 0, f"README line {block.line}: {result.stderr}"


def test_install_then_up_then_the_first_run() -> None:
    blocks = readme_blocks()
    number = first_run(blocks)
    before = [line for block in blocks[:number] if block.skip is None for line in commands(block)]
    assert before == ["make venv", "source .venv/bin/activate"]


def test_no_placeholder_in_a_command() -> None:
    for block in readme_blocks():
        if block.skip is None:
            for line in commands(block):
                assert not re.search(r"<[a-z_ ]+>", line), f"README line {block.line}: placeholder in {line!r}"
            # Each block parses as bash on its own (a quoted script may span lines).
            check = subprocess.run(["bash", "-n"], input=block.text, text=True, capture_output=True, check=False)
            assert check.returncode == 0, f"README line {block.line}: {check.stderr}"


# --- the parser, the port rewriting and grpcurl's command line --------------------------------------


def test_parser_reads_fences_markers_and_console_prompts() -> None:
    text = "\n".join([
        "intro", "```sh", "echo one", "```",
        "- item:", "  <!-- readme-test: skip (Docker: no daemon) -->", "", "  ```bash", "  docker ps", "  ```",
        "```yaml", "a: 1", "```",
        "```console", "$ echo two", "two", "```",
        "<!-- readme-test: skip (x) -->", "text in between", "```sh", "echo three", "```",
    ])  # fmt: skip
    blocks = parse_blocks(text)
    assert [(b.lang, b.text, b.skip) for b in blocks] == [
        ("sh", "echo one\n", None),
        ("bash", "docker ps\n", "Docker: no daemon"),
        ("console", "echo two\n", None),
        ("sh", "echo three\n", None),
    ]
    assert blocks[0].line == 2


def test_ports_are_rewritten_only_where_they_are_ports() -> None:
    text = "curl -s localhost:50061/metrics; agentmesh probe 127.0.0.1:50053; x=150051 v1.50051 --port 8765"
    assert rewrite_ports(text, 30000) == (
        "curl -s localhost:30010/metrics; agentmesh probe 127.0.0.1:30002; x=150051 v1.50051 --port 30030"
    )
    same = 'agentmesh run assistant "And 4321 * 8765?" x:150061 y:500510 --port=50051'
    assert rewrite_ports(same, 30000) == same.replace("--port=50051", "--port=30000")


def test_the_script_marks_every_block_and_the_output_splits_back() -> None:
    blocks = [Block(1, "sh", "echo a\n"), Block(5, "sh", "docker ps\n", skip="Docker"), Block(9, "sh", "false\n")]
    script = build_script(blocks, 30000)
    assert "docker" not in script and script.startswith("set -e\n")
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False)
    outputs, succeeded, failed = split_output(result.stdout)
    assert outputs[0] == "a\n" and succeeded == [0] and failed == 2


def test_grpcurl_command_line() -> None:
    args = grpcurl.parse(["-plaintext", "-H", "x-agentmesh-identity: abc", "-d", "{}", "h:1", "a.B/C"])
    assert (args.address, args.verb, args.data) == ("h:1", ["a.B/C"], "{}")
    assert args.headers == [("x-agentmesh-identity", "abc")]
    assert grpcurl.parse(["-plaintext", "-max-time=3", "h:1", "list"]).max_time == 3.0
    bad_lines = (
        ["h:1", "list"],
        ["-plaintext"],
        ["-plaintext", "h:1"],
        ["-insecure", "h:1", "list"],
        ["-plaintext", "-H"],
    )
    for bad in bad_lines:
        with pytest.raises(grpcurl.UsageError):
            grpcurl.parse(bad)
    with pytest.raises(grpcurl.UsageError):
        grpcurl.parse(["-plaintext", "-H", "no colon", "h:1", "list"])


# --- the session ------------------------------------------------------------------------------------


def check_session(result: SessionResult, blocks: list[Block]) -> None:
    runnable = [number for number, block in enumerate(blocks) if block.skip is None]
    if result.failed is not None or result.returncode != 0:
        block = blocks[result.failed] if result.failed is not None else None
        where = f"README line {block.line}:\n{block.text}" if block else "(no block)"
        pytest.fail(f"session stopped (exit {result.returncode}) at {where}\n--- output ---\n{result.output[-6000:]}")
    assert result.succeeded == runnable
    runs = result.outputs[first_run(blocks)]
    statuses = re.findall(r"^task \S+: (\w+)", runs, re.MULTILINE)
    assert statuses[:1] == ["SUCCEEDED"], runs[-3000:]
    check_first_agent(result, blocks)
    check_answers(result, blocks)


def block_output(result: SessionResult, blocks: list[Block], marker: str) -> str:
    """What the (first) block whose text holds `marker` printed."""
    number = next(i for i, block in enumerate(blocks) if block.skip is None and marker in block.text)
    return result.outputs[number]


def check_first_agent(result: SessionResult, blocks: list[Block]) -> None:
    """ "Your first agent" (issue 42), played in a folder outside the clone: the function tool and the HTTP
    tool are called with the entity the goal names, both runs SUCCEED, the trace reaches into tools.py."""
    init = block_output(result, blocks, "agentmesh init")
    written = re.search(r"^wrote (\S+)/agentmesh\.yaml$", init, re.MULTILINE)
    assert written, init
    assert not Path(written.group(1)).resolve().is_relative_to(ROOT), "the folder must be outside the clone"
    out = block_output(result, blocks, "agentmesh run helper")
    assert re.search(r'tool call +mytools__get_weather \{"city": ?"Oslo"\}', out), out[-4000:]
    assert re.search(r'tool result +mytools__get_weather -> ok: .*"temperature_c": ?-3', out), out[-4000:]
    assert re.search(r'tool call +forecast \{"city": ?"Bergen"\}', out), out[-4000:]
    assert re.search(r'tool result +forecast -> ok: .*"tomorrow": ?"snow"', out), out[-4000:]
    assert "task first-1: SUCCEEDED" in out and "task first-2: SUCCEEDED" in out, out[-4000:]
    assert "tools/call get_weather [tool_svc CLIENT]" in out, out[-4000:]  # the trace, into tools.py
    assert "agents[helper].tools" in out and "forecast.yaml" in out  # config show, with the sources


def check_answers(result: SessionResult, blocks: list[Block]) -> None:
    """The README's "6 times 7" over Connect answers 42; the MCP listing with the agent token lists tools."""
    stream = block_output(result, blocks, "application/connect+json")
    assert re.search(r'"result": ?42\b', stream), stream[-3000:]
    mcp = block_output(result, blocks, "streamable_http_client")
    assert "'calculator'" in mcp and "42" in mcp.splitlines()[-1], mcp[-3000:]


@pytest.mark.e2e
@pytest.mark.timeout(480)
@pytest.mark.skipif(
    os.environ.get("README_TEST_CHECKOUT") != "1",
    reason="CI runs the README once, from a fresh clone (make test-readme); README_TEST_CHECKOUT=1 here",
)
def test_readme_runs_in_this_checkout(tmp_path: Path) -> None:
    blocks = readme_blocks()
    # About 90 s alone (two `agentmesh up`s since "Your first agent"); a guard, generous for a loaded machine.
    result = run_session(blocks, ROOT, tmp_path, timeout_s=420)
    check_session(result, blocks)


@pytest.mark.e2e
@pytest.mark.timeout(1500)
@pytest.mark.skipif(os.environ.get("README_TEST_CLONE") != "1", reason="make test-readme (README_TEST_CLONE=1)")
def test_readme_runs_from_a_fresh_clone(tmp_path: Path) -> None:
    clone = tmp_path / "agentmesh"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, timeout=300)
    blocks = parse_blocks((clone / "README.md").read_text(encoding="utf-8"))
    result = run_session(blocks, clone, tmp_path / "work", timeout_s=1400)
    check_session(result, blocks)
