"""The console's browser tests' helpers: a headless Chromium driven by playwright-core (driver.mjs) with
one JSON command a line, the stack the console talks to, and the checks every page must pass."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from pathlib import Path
from typing import Any

from tests.contract.test_connect_browser import chromium

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).resolve().parent / "driver.mjs"
AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"
SCREENSHOTS = ROOT / "docs" / "console"
"""Where `make console-screenshots` (CONSOLE_SCREENSHOTS=1) writes the README's screenshots."""

PHONE = (390, 844)
DESKTOP = (1280, 800)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class DriverError(AssertionError):
    """A command the browser could not carry out (a selector that never appeared, ...)."""


class Browser:
    """One Chromium, several contexts (one per operator): `await browser.call("click", ctx="alice", ...)`."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls) -> Browser:
        assert AXE.exists(), "node_modules/axe-core missing: run `make venv`"
        proc = await asyncio.create_subprocess_exec(
            "node", str(DRIVER), chromium(), str(AXE), cwd=ROOT,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            limit=16 * 1024 * 1024,
        )  # fmt: skip
        return cls(proc)

    async def call(self, op: str, ctx: str = "", **args: Any) -> Any:
        """Runs one command; the driver's own waits time out first (`timeout` in ms, 20 s by default)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write((json.dumps({"op": op, "ctx": ctx, **args}) + "\n").encode())
        await self.proc.stdin.drain()
        line = await asyncio.wait_for(self.proc.stdout.readline(), 90)
        if not line:
            err = await self.proc.stderr.read() if self.proc.stderr else b""
            raise DriverError(f"the browser driver exited: {err.decode()[-2000:]}")
        answer = json.loads(line)
        if not answer.get("ok"):
            raise DriverError(f"{op} {args}: {answer.get('error')}")
        return answer.get("value")

    async def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 15)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()


async def page_is_clean(browser: Browser, ctx: str, page: str) -> list[dict[str, Any]]:
    """The checks of every page: no critical or serious axe violation, no CSP violation, no hostile
    script ran, nothing wider than the viewport; returns the other axe findings (for the report)."""
    violations = await browser.call("axe", ctx)
    worst = [v for v in violations if v["impact"] in ("critical", "serious")]
    assert not worst, f"{page}: accessibility violations {worst}"
    state = await browser.call(
        "eval",
        ctx,
        expression="({csp: window.__csp, pwned: window.__pwned ?? null, "
        "overflow: document.documentElement.scrollWidth - document.documentElement.clientWidth, "
        "wide: [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > "
        "document.documentElement.clientWidth + 0.5).slice(-4).map(e => e.tagName + '.' + e.className)})",
    )
    assert state["csp"] == [], f"{page}: CSP violations {state['csp']}"
    assert state["pwned"] is None, f"{page}: a hostile script ran ({state['pwned']})"
    assert state["overflow"] <= 0, f"{page}: {state['overflow']} px wider than the viewport: {state['wide']}"
    return [v for v in violations if v not in worst]


async def screenshot(browser: Browser, ctx: str, name: str, out: Path, selector: str = "") -> Path:
    """A screenshot (of the viewport, or of `selector`'s element) into `out` (tmp), and into
    docs/console/ too when CONSOLE_SCREENSHOTS=1."""
    path = out / f"{name}.png"
    await browser.call("screenshot", ctx, path=str(path), selector=selector)
    assert path.stat().st_size > 5000, f"{name}: an empty screenshot"
    if os.environ.get("CONSOLE_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        (SCREENSHOTS / path.name).write_bytes(path.read_bytes())
    return path
