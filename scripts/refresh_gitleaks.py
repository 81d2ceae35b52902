#!/usr/bin/env python3
"""Refresh the vendored gitleaks data from a gitleaks checkout (MIT, github.com/gitleaks/gitleaks).

Two copies, both verbatim:
- agentmesh/redact/data/: `config/gitleaks.toml` (the rule set the redactor compiles at import) and LICENSE;
- tests/secretcorpus/gitleaks/: the rule sources `cmd/generate/config/rules/*.go` and `utils/*.go`,
  whose true/false-positive samples tests/secretcorpus turns into the public redaction corpus.
Each gets a VERSION file naming the commit. Then run `python -m bench.bench_redaction` and the redaction
tests: a new rule set changes the figures.

    scripts/refresh_gitleaks.py /path/to/gitleaks            # a work tree or a bare git dir, at HEAD
    scripts/refresh_gitleaks.py /path/to/gitleaks --rev v8.28.0
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "agentmesh" / "redact" / "data"
CORPUS = ROOT / "tests" / "secretcorpus" / "gitleaks"


def _git(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True).stdout


def _files(repo: Path, rev: str, folder: str, suffix: str) -> list[str]:
    names = _git(repo, "ls-tree", "--name-only", f"{rev}:{folder}").decode().split()
    return sorted(f"{folder}/{name}" for name in names if name.endswith(suffix) and not name.endswith("_test.go"))


def refresh(repo: Path, rev: str = "HEAD", runtime: Path = RUNTIME, corpus: Path = CORPUS) -> str:
    """Copy the files of `rev` in `repo`; returns the commit."""
    commit = _git(repo, "rev-parse", f"{rev}^{{commit}}").decode().strip()
    wanted: list[tuple[str, Path]] = [
        ("config/gitleaks.toml", runtime / "gitleaks.toml"),
        ("LICENSE", runtime / "LICENSE.gitleaks"),
        ("LICENSE", corpus / "LICENSE"),
    ]
    for folder, target in (("cmd/generate/config/rules", "rules"), ("cmd/generate/config/utils", "utils")):
        old = corpus / target
        if old.is_dir():
            for stale in old.glob("*.go"):
                stale.unlink()
        wanted += [(name, corpus / target / Path(name).name) for name in _files(repo, commit, folder, ".go")]
    # The template of the generated config: the rules' order in the toml comes from main.go's list.
    wanted.append(("cmd/generate/config/main.go", corpus / "main.go"))
    for source, target in wanted:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(_git(repo, "show", f"{commit}:{source}"))
    stamp = f"gitleaks {commit}\n"
    (runtime / "VERSION.gitleaks").write_text(stamp, encoding="utf-8")
    (corpus / "VERSION").write_text(stamp, encoding="utf-8")
    return commit


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("repo", type=Path, help="a gitleaks checkout (work tree or git dir)")
    parser.add_argument("--rev", default="HEAD", help="the commit, tag or branch to vendor (default HEAD)")
    args = parser.parse_args(argv)
    commit = refresh(args.repo, args.rev)
    print(f"vendored gitleaks {commit} into {RUNTIME.relative_to(ROOT)} and {CORPUS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
