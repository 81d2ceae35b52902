"""Signing in to the console with OIDC (authorization code + PKCE) against a local identity provider
(tests/console/idp.py): the browser goes to the IdP and back, the console exchanges the code with its
PKCE verifier, and the services accept the IdP's token (auth.oidc) for the operator group. A login answer
that this tab did not start (a forged state) is refused. The IdP answers a code only to the verifier of
its S256 challenge, so a sign-in that succeeds is one the console made with PKCE."""

from __future__ import annotations

from pathlib import Path

from tests.console.browser import DESKTOP, Browser, page_is_clean
from tests.console.idp import Provider
from tests.console.scenario import console_stack


async def test_an_operator_signs_in_with_oidc_and_pkce(redis_url: str, tmp_path: Path, browser: Browser) -> None:
    with Provider(allowed_origin="") as idp:
        stack, port = console_stack(
            redis_url, tmp_path, {"auth": {"oidc": [idp.auth_settings()]}, "console": {"oidc": idp.console_settings()}}
        )
        base = f"http://127.0.0.1:{port}"
        idp.allowed_origin = base
        async with stack:
            await browser.call("open", "op", viewport=list(DESKTOP))
            # A login answer this tab never asked for: refused, nothing exchanged.
            await browser.call("goto", "op", url=f"{base}/console/?code=stolen&state=forged")
            await browser.call("wait", "op", selector="[role=alert]", text="does not match a login started in this tab")
            assert idp.exchanges == []
            assert await browser.call("eval", "op", expression="location.search") == ""

            await browser.call("click", "op", selector="button.primary", timeout=10_000)  # "Sign in with idp..."
            await browser.call("wait", "op", selector="h1", text="Tasks")
            assert idp.exchanges == ["ok"]
            after = await browser.call(
                "eval",
                "op",
                expression="({search: location.search, hash: location.hash, "
                "token: sessionStorage.getItem('agentmesh.console.token'), local: localStorage.length})",
            )
            assert after["search"] == "" and after["hash"] == "#/tasks" and after["local"] == 0
            assert after["token"].count(".") == 2  # the IdP's JWT, kept in this tab only
            await browser.call("wait", "op", selector="#who", text="idp-operator")
            # The services accepted it: the list answered (an operator's, empty) rather than an error.
            await browser.call("wait", "op", selector="td.empty", text="No task matches")
            await page_is_clean(browser, "op", "tasks (OIDC)")
            await browser.call("close", "op")
