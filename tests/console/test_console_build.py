"""The committed console (agentmesh/console_dist) is what scripts/build-console.sh makes from console/ with
the pinned toolchain: rebuilt here, byte for byte (so the build is reproducible and the committed files are
not stale), and free of what the CSP and the XSS rules forbid."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from agentmesh.rpc.console import ASSETS_DIR

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_console_is_the_build_of_its_sources(tmp_path: Path) -> None:
    out = tmp_path / "dist"
    done = subprocess.run(
        [str(ROOT / "scripts" / "build-console.sh"), str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    built = sorted(p.name for p in out.iterdir())
    committed = sorted(p.name for p in ASSETS_DIR.iterdir())
    assert built == committed == ["console.css", "console.js", "favicon.svg", "index.html"]
    for name in built:
        assert (out / name).read_bytes() == (ASSETS_DIR / name).read_bytes(), (
            f"agentmesh/console_dist/{name} differs from its build: run scripts/build-console.sh and commit"
        )


def test_the_console_has_no_inline_script_and_no_markup_sinks() -> None:
    page = (ASSETS_DIR / "index.html").read_text(encoding="utf-8")
    assert re.findall(r"<script[^>]*>", page) == ['<script src="console.js" defer>']
    assert "style=" not in page and "<style" not in page and " on" not in page.replace(" one", "")
    bundle = (ASSETS_DIR / "console.js").read_text(encoding="utf-8")
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "new Function", "eval("):
        assert sink not in bundle, sink
    # A link's target is set in one place, dom.ts (console routes, or a configured http(s) URL), never
    # from data elsewhere.
    for source in (ROOT / "console" / "src").rglob("*.ts"):
        text = source.read_text(encoding="utf-8")
        if source.name != "dom.ts":
            assert not re.search(r"\.(href|src)\s*=|setAttribute\(\s*\"(href|src|style)", text), source
