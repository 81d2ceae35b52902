"""The console in a real browser (issue 48's acceptance): Debian's headless Chromium, driven by
playwright-core, against the four services in-process with their HTTP listeners open.

One session, as operators would live it:
- alice (the login name the CLI signs with, so the CLI's tasks are hers) signs in with a pasted dev
  token; a task with hostile tool output and a 1 MB answer is already there;
- `agentmesh run` (a separate process) starts a task whose write needs approval: it appears live in
  the Tasks list of a third operator watching (a "new task" bar, then the row), without anything moving;
- alice opens it: its timeline, step 1's exact prompt; she tries to approve and is refused with the
  reason (separation of duties), shown as the dispatcher says it;
- bob, a second operator, approves it from the Approvals page; alice's page shows it resume and
  finish live, and the CLI exits 0 with the answer; then its trace as a waterfall;
- the hostile task's page renders every hostile string as text (no script runs, no javascript: link,
  bidi overrides shown as markers) and its 1 MB line clamped, then whole on demand;
- Tools, Spend (the console agent's budget and spend, over provider_svc's edge) and Settlements; keyboard
  navigation; times in the viewer's zone; copyable ids; the token
  only in sessionStorage.
Every page: axe-core finds no critical or serious violation, no CSP violation, no horizontal overflow.
Screenshots of each page go to docs/console/ with CONSOLE_SCREENSHOTS=1 (`make console-screenshots`).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from agentmesh.authenticator import Authenticator
from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.cli.run_view import login_name
from agentmesh.v1 import dispatcher_pb2, dispatcher_pb2_grpc
from tests.conftest import TEST_AUTH_KEY
from tests.console.browser import DESKTOP, PHONE, ROOT, Browser, page_is_clean, screenshot
from tests.console.scenario import CONSOLE_AGENT, HOSTILE, console_stack
from tests.contract.stack import Stack
from tests.contract.tool.fakes import FakeUpstream


def token(stack: Stack, subject: str) -> str:
    return Authenticator(stack.hosts["dispatcher"][0].settings.auth, "dev").mint(subject=subject, roles=("operator",))


async def run_hostile_task(stack: Stack) -> str:
    """A task of the console agent reading the hostile log (over gRPC, as alice): its id once it ended."""
    assert stack.channel is not None
    stub = dispatcher_pb2_grpc.DispatcherServiceStub(stack.channel)  # type: ignore[no-untyped-call]
    start = dispatcher_pb2.StartTaskRequest(agent_id=CONSOLE_AGENT, goal="read the hostile logs " + HOSTILE)
    call = stub.RunTask(
        dispatcher_pb2.RunTaskRequest(start=start),
        metadata=((IDENTITY_HEADER, token(stack, login_name())),),
        timeout=60,
    )
    events = [reply.event async for reply in call]
    assert events[-1].status == dispatcher_pb2.TASK_STATUS_SUCCEEDED, events[-1]
    return str(events[-1].task_id)


async def start_note_task(stack: Stack) -> str:
    """A task of the console agent posting a note (as alice): its write's outcome will be unknown."""
    assert stack.channel is not None
    stub = dispatcher_pb2_grpc.DispatcherServiceStub(stack.channel)  # type: ignore[no-untyped-call]
    start = dispatcher_pb2.StartTaskRequest(agent_id=CONSOLE_AGENT, goal="note the deploy")
    reply = await stub.StartTask(start, metadata=((IDENTITY_HEADER, token(stack, login_name())),), timeout=30)
    return str(reply.task.task_id)


async def start_cli(stack: Stack, workdir: Path, goal: str) -> asyncio.subprocess.Process:
    """`agentmesh run console <goal>` as its own process (the task is alice's: the CLI signs as the login name)."""
    dispatcher = stack.hosts["dispatcher"][0]
    config = workdir / "cli.yaml"
    config.write_text(
        json.dumps(
            {
                "environment": "dev",
                "auth": {"key": TEST_AUTH_KEY},
                "services": {"dispatcher": {"host": "127.0.0.1", "port": dispatcher.port}},
                "telemetry": {"span_file": str(workdir / "spans.jsonl"), "log_level": "WARNING"},
            }
        ),
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTMESH_", "OTEL_"))}
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentmesh.cli", "--config", str(config), "run", CONSOLE_AGENT, goal, "--wait", "0",
        cwd=workdir, env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def sign_in(browser: Browser, ctx: str, base: str, value: str) -> None:
    await browser.call("goto", ctx, url=f"{base}/console/")
    await browser.call("wait", ctx, selector="h1", text="Sign in")
    await browser.call("fill", ctx, selector="#token", value=value)
    await browser.call("click", ctx, selector="form.login button[type=submit]")
    await browser.call("wait", ctx, selector="h1", text="Tasks")


async def test_operators_watch_approve_and_inspect_tasks_in_the_console(
    redis_url: str, tmp_path: Path, browser: Browser, upstream: FakeUpstream
) -> None:
    upstream.slow_s = 1.5  # post_note times out after 0.5 s: its outcome is unknown
    stack, port = console_stack(redis_url, tmp_path, note_upstream=upstream.url("").rstrip("/"))
    base = f"http://127.0.0.1:{port}"
    shots = tmp_path / "shots"
    shots.mkdir()
    findings: dict[str, Any] = {}
    async with stack:
        alice, bob = token(stack, login_name()), token(stack, "bob")
        hostile_id = await run_hostile_task(stack)

        # -- alice signs in (a pasted token; kept in sessionStorage only) ---------------------------
        await browser.call("open", "alice", viewport=list(DESKTOP), timezone="Asia/Kolkata")
        await browser.call("goto", "alice", url=f"{base}/console/")
        await browser.call("wait", "alice", selector="h1", text="Sign in")
        findings["login"] = await page_is_clean(browser, "alice", "login")
        await screenshot(browser, "alice", "login", shots)
        await browser.call("fill", "alice", selector="#token", value=alice)
        await browser.call("press", "alice", selector="#token", key="Enter")
        await browser.call("wait", "alice", selector=f'tr[data-task-id="{hostile_id}"]')
        stored = await browser.call(
            "eval",
            "alice",
            expression="({local: localStorage.length, cookie: document.cookie, url: location.href, "
            "session: sessionStorage.getItem('agentmesh.console.token')})",
        )
        assert stored["session"] == alice and stored["local"] == 0 and stored["cookie"] == ""
        assert alice not in stored["url"]
        # Times in the viewer's zone (Asia/Kolkata is UTC+5:30), the instant in UTC in the title.
        shown = await browser.call("text", "alice", selector=f'tr[data-task-id="{hostile_id}"] time')
        assert shown and all("GMT+5:30" in text for text in shown), shown

        # -- a third operator watches the Tasks list (phone width): the CLI's task appears live ------
        await browser.call("open", "carol", viewport=list(PHONE), timezone="Europe/Paris")
        await sign_in(browser, "carol", base, token(stack, "carol"))
        await browser.call("wait", "carol", selector=f'tr[data-task-id="{hostile_id}"]')
        cli = await start_cli(stack, tmp_path, "apply 6*7")
        await browser.call("wait", "carol", selector=".new-bar", text="1 new task", timeout=30_000)
        new_id = (await browser.call("text", "carol", selector=".new-bar .mono"))[0].strip()
        await browser.call("click", "carol", selector=".new-bar button")
        row = f'tr[data-task-id="{new_id}"]'
        await browser.call("wait", "carol", selector=f"{row} .col-status", text="WAITING APPROVAL", timeout=30_000)
        findings["tasks-phone"] = await page_is_clean(browser, "carol", "tasks (phone)")
        await screenshot(browser, "carol", "tasks-phone", shots)

        # -- alice opens the task: timeline, the prompt of step 1, and her approval is refused -------
        await browser.call("goto", "alice", url=f"{base}/console/#/tasks/{new_id}")
        await browser.call("wait", "alice", selector=".section-pending textarea")
        await browser.call("wait", "alice", selector="li.event", text="APPROVAL REQUIRED")
        await browser.call("click", "alice", selector=".section-timeline details.prompt summary")
        await browser.call("wait", "alice", selector=".prompt-body pre", text='"apply 6*7"')
        await browser.call("fill", "alice", selector=".section-pending textarea", value="looks right to me")
        await browser.call("click", "alice", selector=".section-pending button.primary")
        await browser.call("wait", "alice", selector=".section-pending .problem", text="Separation of duties")
        refusal = " ".join(await browser.call("text", "alice", selector=".section-pending .problem"))
        assert "may not resolve its approvals" in refusal and "approver:not-task-creator" in refusal, refusal
        findings["task-refused"] = await page_is_clean(browser, "alice", "task (refused)")
        await screenshot(browser, "alice", "task-refused", shots)

        # -- bob approves from the Approvals page --------------------------------------------------
        await browser.call("open", "bob", viewport=list(DESKTOP))
        await sign_in(browser, "bob", base, bob)
        await browser.call("click", "bob", selector='nav a[href="#/approvals"]')
        card = f'article[data-task-id="{new_id}"]'
        await browser.call("wait", "bob", selector=f"{card} pre.arguments", text='"expression": "6*7"')
        findings["approvals"] = await page_is_clean(browser, "bob", "approvals")
        await screenshot(browser, "bob", "approvals", shots)
        await browser.call("fill", "bob", selector=f"{card} textarea", value="checked the plan")
        await browser.call("click", "bob", selector=f"{card} button.primary")
        await browser.call("wait", "bob", selector=f"{card} .decision-result .ok", text="Approved")

        # -- alice's page shows it resume and finish, live; the CLI ends with the answer -----------
        await browser.call("wait", "alice", selector="#task-status", text="SUCCEEDED", timeout=30_000)
        await browser.call("wait", "alice", selector="li.event", text="APPROVAL RESOLVED")
        await browser.call("wait", "alice", selector=".answer pre", text="42")
        out, err = await asyncio.wait_for(cli.communicate(), 60)
        assert cli.returncode == 0, (out.decode()[-2000:], err.decode()[-2000:])
        assert "SUCCEEDED" in out.decode() and "42" in out.decode()
        await browser.call("wait", "carol", selector=f"{row} .col-status", text="SUCCEEDED", timeout=30_000)
        shifts = await browser.call("eval", "carol", expression="window.__shifts.reduce((a, b) => a + b, 0)")
        findings["tasks-live-layout-shift"] = shifts
        assert shifts < 0.01, f"live updates moved the Tasks list (cumulative layout shift {shifts})"
        # The trace: a waterfall of the spans of the CLI's request, the services' hops included.
        await browser.call("wait", "alice", selector=".waterfall", text="ToolService/ExecuteTool", timeout=30_000)
        # Read again once the task ended (the last spans reach the file about a second later): the CLI's
        # root span, which ends when the command exits, and its closing GetTask.
        await browser.call("wait", "alice", selector=".waterfall .span-row", text="agentmesh run", timeout=30_000)
        await browser.call("wait", "alice", selector=".waterfall .span-row", text="DispatcherService/GetTask")
        await browser.call(
            "until", "alice", expression="document.querySelector('.trace-state').textContent.includes('read at')"
        )
        spans = await browser.call("count", "alice", selector=".waterfall li.span-row")
        assert spans >= 5, spans
        findings["task"] = await page_is_clean(browser, "alice", "task")
        await browser.call("eval", "alice", expression="window.scrollTo(0, 0)")
        await screenshot(browser, "alice", "task", shots)
        await screenshot(browser, "alice", "trace", shots, selector=".section-trace")

        # -- the hostile task: every string is text ------------------------------------------------
        await browser.call("goto", "alice", url=f"{base}/console/#/tasks/{hostile_id}")
        await browser.call("wait", "alice", selector=".answer pre", text="<script>window.__pwned='script'</script>")
        await browser.call("wait", "alice", selector="li.event pre", text="<img src=x onerror=")
        await browser.call("wait", "alice", selector=".answer pre", text="⟨U+202E⟩txt.exe")
        markup = await browser.call(
            "eval",
            "alice",
            expression="({scripts: document.querySelectorAll('main script, main img, main iframe').length, "
            "js: [...document.querySelectorAll('a')].filter(a => a.protocol === 'javascript:').length, "
            "answer: document.querySelector('.answer pre').textContent.length})",
        )
        assert markup["scripts"] == 0 and markup["js"] == 0, markup
        assert markup["answer"] < 10_000, "the 1 MB line is clamped until asked for"
        await browser.call("click", "alice", selector=".answer button")
        whole = await browser.call(
            "eval", "alice", expression="document.querySelector('.answer pre').textContent.length"
        )
        assert whole > 1_000_000, whole
        findings["task-hostile"] = await page_is_clean(browser, "alice", "task (hostile)")

        # -- keyboard only: skip link, then the navigation ----------------------------------------
        await browser.call("goto", "alice", url=f"{base}/console/#/tasks")
        await browser.call("reload", "alice")  # a first load: focus at the top of the page
        await browser.call("wait", "alice", selector="h1", text="Tasks")
        await browser.call("press", "alice", key="Tab")
        assert await browser.call("eval", "alice", expression="document.activeElement.id") == "skip"
        await browser.call("press", "alice", key="Enter")
        assert await browser.call("eval", "alice", expression="document.activeElement.id") == "main"
        assert await browser.call("eval", "alice", expression="location.hash") == "#/tasks"
        await browser.call("press", "alice", selector='nav a[href="#/tools"]', key="Enter")
        await browser.call("wait", "alice", selector="h1", text="Tools")
        # Focus moves to the new page's heading (announced by screen readers).
        await browser.call("until", "alice", expression="document.activeElement.tagName === 'H1'")

        # -- Tools (over tool_svc's own Connect edge) and Settlements ---------------------------------
        await browser.call("wait", "alice", selector='tr[data-tool="apply_change"]', text="approval")
        perms = await browser.call("text", "alice", selector='tr[data-tool="apply_change"] .col-perm')
        assert perms == ["*:ops.write:write"], perms
        findings["tools"] = await page_is_clean(browser, "alice", "tools")
        await screenshot(browser, "alice", "tools", shots)
        # -- Spend (over provider_svc's own Connect edge): the console agent's budget and spend --------
        await browser.call("click", "alice", selector='nav a[href="#/spend"]')
        await browser.call("wait", "alice", selector="h1", text="Spend")
        budget = 'table.budgets tr[data-scope="console"]'
        await browser.call("wait", "alice", selector=f"{budget} .col-day", text="of $50.0000")
        await browser.call("select", "alice", selector="#s-by", value="agent")
        await browser.call("click", "alice", selector="form.filters button[type=submit]")
        await browser.call("wait", "alice", selector='table.spend tr[data-key="console"] .col-cost', text="$")
        assert await browser.call("eval", "alice", expression="location.hash.startsWith('#/spend?by=agent')")
        cost = (await browser.call("text", "alice", selector='table.spend tr[data-key="console"] .col-cost'))[0]
        assert float(cost.strip().lstrip("$")) > 0, cost  # the tasks above were paid for
        findings["spend"] = await page_is_clean(browser, "alice", "spend")
        await screenshot(browser, "alice", "spend", shots)
        # -- a write whose outcome is unknown: bob checks the upstream and settles it as ran ---------
        note_id = await start_note_task(stack)
        await browser.call("click", "bob", selector='nav a[href="#/settlements"]')
        card = f'article[data-task-id="{note_id}"]'
        await browser.call("wait", "bob", selector=card, text="outcome is unknown", timeout=30_000)
        findings["settlements"] = await page_is_clean(browser, "bob", "settlements")
        await screenshot(browser, "bob", "settlements", shots)
        await browser.call("fill", "bob", selector=f"{card} textarea", value="the note is in the change log")
        await browser.call("click", "bob", selector=f"{card} button.primary")  # "It ran"
        await browser.call("wait", "bob", selector=f"{card} .decision-result .ok", text="Settled as ran")
        await browser.call("goto", "alice", url=f"{base}/console/#/tasks/{note_id}")
        await browser.call("wait", "alice", selector="#task-status", text="SUCCEEDED", timeout=30_000)
        assert upstream.counts["/slow"] == 1, upstream.counts  # settled as ran: never sent again
        await browser.call("goto", "alice", url=f"{base}/console/#/settlements")
        await browser.call("wait", "alice", selector="p[role=status]", text="No call is waiting")
        await browser.call("goto", "alice", url=f"{base}/console/#/tasks")
        await browser.call("wait", "alice", selector=f'tr[data-task-id="{new_id}"] .col-status', text="SUCCEEDED")
        findings["tasks"] = await page_is_clean(browser, "alice", "tasks")
        await screenshot(browser, "alice", "tasks", shots)

        # -- a copyable id: the copy button puts the task id on the clipboard ----------------------
        await browser.call("click", "alice", selector=f'tr[data-task-id="{new_id}"] button.copy')
        assert await browser.call("eval", "alice", expression="navigator.clipboard.readText()") == new_id

        # Filters live in the route: agent `smoke` has no task.
        await browser.call("goto", "carol", url=f"{base}/console/#/tasks?agent=smoke")
        await browser.call("wait", "carol", selector="td.empty", text="No task matches")
        assert await browser.call("eval", "carol", expression="document.querySelector('#f-agent').value") == "smoke"
        # A token the services refuse signs the user out, saying why.
        await browser.call(
            "eval", "carol", expression="sessionStorage.setItem('agentmesh.console.token', 'e30.forged')"
        )
        await browser.call("reload", "carol")
        await browser.call("wait", "carol", selector="[role=alert]", text="Your token was refused")
        assert await browser.call("eval", "carol", expression="sessionStorage.length") == 0

        # The accessibility check can fail: a nameless button is reported.
        await browser.call(
            "eval", "alice", expression="document.querySelector('main').append(document.createElement('button'))"
        )
        assert "button-name" in {v["id"] for v in await browser.call("axe", "alice")}

        logs = {ctx: await browser.call("log", ctx) for ctx in ("alice", "bob", "carol")}
        errors = [line for lines in logs.values() for line in lines if line.startswith("pageerror")]
        assert not errors, errors
        for ctx in ("alice", "bob", "carol"):  # their streams end before the services stop
            await browser.call("close", ctx)
    (tmp_path / "findings.json").write_text(json.dumps(findings, indent=1), encoding="utf-8")
    print("console findings:", json.dumps(findings))


def test_the_screenshots_in_docs_are_the_readmes() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    names = ("login", "tasks", "task", "trace", "approvals", "settlements", "tools", "spend", "tasks-phone")
    for name in (*names, "task-refused"):
        assert (ROOT / "docs" / "console" / f"{name}.png").exists(), name
        assert f"docs/console/{name}.png" in readme, name
