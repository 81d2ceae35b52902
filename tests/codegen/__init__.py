"""Tests of the stubs buf.gen.yaml generates for every language, and their shared helpers.

`fresh_tree` runs `buf generate` (buf.gen.yaml, local plugins only) into an empty folder and lays the
example clients beside the output as they sit in the repository, so the examples build from code
generated this run, never from a developer's stale gen/. The toolchains come from
scripts/install-toolchains.sh (`make test` runs it); a missing one fails the test, never skips it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUF = ROOT / "node_modules" / ".bin" / "buf"
BUILD_CLIENTS = ROOT / "scripts" / "build-clients.sh"
INSTALL_TOOLCHAINS = ROOT / "scripts" / "install-toolchains.sh"
EXAMPLES = ("go", "ts", "java")


def toolchains_present() -> None:
    """Fails (never skips) naming what `make toolchains` would install."""
    assert BUF.exists(), f"{BUF} is missing: `make test` installs it (npm ci)"
    check = subprocess.run([str(INSTALL_TOOLCHAINS), "--check"], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, f"{check.stderr.strip()}: `make test` runs `make toolchains` first"


def buf_generate(out: Path) -> None:
    """`buf generate` of buf.gen.yaml into `out` (its outputs land under out/ as under the repository)."""
    result = subprocess.run(
        [str(BUF), "generate", "--template", "buf.gen.yaml", "-o", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"buf generate failed:\n{result.stdout}{result.stderr}"


def tree_files(root: Path) -> dict[str, bytes]:
    """Every file under `root` by relative path."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@dataclass(frozen=True)
class FreshTree:
    """A fresh generation with the example clients beside it (the repository's layout)."""

    root: Path

    @property
    def go_client(self) -> Path:
        return self.root / "build" / "clients" / "agentmesh-go-client"

    @property
    def ts_client(self) -> Path:
        return self.root / "examples" / "clients" / "ts" / "dist" / "examples" / "clients" / "ts" / "client.js"

    @property
    def java_client(self) -> Path:
        """The Java example's launcher (scripts/build-clients.sh java-client)."""
        return self.root / "build" / "clients" / "agentmesh-java-client"

    @property
    def java_classes(self) -> Path:
        return self.root / "build" / "clients" / "java"

    def build(self, what: str) -> None:
        """scripts/build-clients.sh `what` on this tree (Go's and javac's build caches make a repeat quick)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTMESH_", "GO"))}
        result = subprocess.run(
            [str(BUILD_CLIENTS), what, str(self.root)], capture_output=True, text=True, timeout=600, env=env
        )
        assert result.returncode == 0, f"build-clients.sh {what} failed:\n{result.stdout}{result.stderr}"


def fresh_tree(root: Path) -> FreshTree:
    """buf generate into `root`, then the example clients' sources and the pinned node_modules beside it."""
    toolchains_present()
    buf_generate(root)
    for name in EXAMPLES:
        source = ROOT / "examples" / "clients" / name
        shutil.copytree(source, root / "examples" / "clients" / name, ignore=shutil.ignore_patterns("dist"))
    # The npm packages pinned in package.json (TypeScript, Connect-ES), as the examples resolve them.
    (root / "node_modules").symlink_to(ROOT / "node_modules", target_is_directory=True)
    return FreshTree(root)
