"""A browser streams RunTask over gRPC-Web: Debian's headless Chromium, driven by playwright-core, loads a
page (tests/contract/browser) whose Connect-ES client (createGrpcWebTransport) calls the dispatcher's HTTP
listener from another origin (CORS) and shows the task's final status, which the test reads.

The page is bundled by esbuild with the TypeScript stubs protoc-gen-es writes (buf.gen.yaml's
TypeScript plugin, package.json's pinned versions) and served by a small static server on its own port.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from agentmesh.authenticator import Authenticator
from tests.contract.stack import AGENT, Stack

ROOT = Path(__file__).resolve().parents[2]
PAGE = Path(__file__).resolve().parent / "browser"
NODE_BIN = ROOT / "node_modules" / ".bin"


def chromium() -> str:
    """Debian's chromium; installed by scripts/install-toolchains.sh (`make toolchains`) when missing.
    Skips only when it is absent and cannot be installed here."""
    found = shutil.which("chromium")
    if found:
        return found
    done = subprocess.run([str(ROOT / "scripts" / "install-toolchains.sh")], capture_output=True, text=True)
    found = shutil.which("chromium")
    if not found:
        pytest.skip(f"Debian's chromium is absent and could not be installed: {done.stderr.strip()[-300:]}")
    return found


def build_page(out: Path) -> None:
    """index.html and runtask.js (esbuild bundle of runtask.ts with freshly generated TypeScript stubs)."""
    for tool in ("buf", "protoc-gen-es", "esbuild"):
        assert (NODE_BIN / tool).exists(), f"node_modules/.bin/{tool} missing: run `make venv`"
    work = out.parent / "page-src"
    work.mkdir()
    shutil.copy(PAGE / "runtask.ts", work / "runtask.ts")
    plugin = {"local": str(NODE_BIN / "protoc-gen-es"), "out": str(work / "gen"), "opt": "target=ts"}
    template = {"version": "v2", "plugins": [{**plugin, "include_imports": True}]}
    subprocess.run(
        [str(NODE_BIN / "buf"), "generate", "--template", json.dumps(template), "--path", "protos/agentmesh/v1"],
        cwd=ROOT, check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    out.mkdir()
    subprocess.run(
        [str(NODE_BIN / "esbuild"), str(work / "runtask.ts"), "--bundle", "--format=iife", "--target=es2022",
         f"--outfile={out / 'runtask.js'}", "--log-level=warning"],
        cwd=work, check=True, capture_output=True, timeout=120,
        env={**os.environ, "NODE_PATH": str(ROOT / "node_modules")},
    )  # fmt: skip
    shutil.copy(PAGE / "index.html", out / "index.html")


@pytest.fixture
def page_server(tmp_path: Path) -> Iterator[str]:
    """The page's origin: a static server of the built page on a free port."""
    site = tmp_path / "site"
    build_page(site)
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(site))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def test_a_browser_streams_run_task_over_grpc_web_and_shows_the_final_status(
    redis_url: str, tmp_path: Path, page_server: str
) -> None:
    browser = chromium()
    overrides = {"server": {"cors_allowed_origins": [page_server]}}
    async with Stack(redis_url, tmp_path, overrides, http=True) as stack:
        host = stack.hosts["dispatcher"][0]
        token = Authenticator(host.settings.auth, "dev").mint(subject="browser-user", roles=("operator",))
        query = f"api=http://127.0.0.1:{host.http_port}&token={token}&agent={AGENT}&goal=compute%206*7"
        proc = await asyncio.create_subprocess_exec(
            "node", str(PAGE / "drive.mjs"), f"{page_server}/index.html?{query}", browser, str(tmp_path / "profile"),
            cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), timeout=110)
    assert proc.returncode == 0, err.decode()[-2000:]
    shown = json.loads(out.decode().strip().splitlines()[-1])
    assert shown["status"] == "final: SUCCEEDED", shown
    assert len(shown["events"]) >= 2, shown
