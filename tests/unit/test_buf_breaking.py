"""`buf breaking` gates contract breaks: main passes against the committed baseline image, and a
renumbered field (tests/lint_fixtures/renumbered_field.json) fails. `make lint` runs the same check."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUF = ROOT / "node_modules" / ".bin" / "buf"
BASELINE = ROOT / "protos" / "breaking-baseline.binpb"
FIXTURE = ROOT / "tests" / "lint_fixtures" / "renumbered_field.json"


def _breaking(tree: Path) -> subprocess.CompletedProcess[str]:
    """buf build of `tree`'s protos, then buf breaking of that image against the baseline."""
    if not BUF.exists():
        pytest.fail(f"{BUF} is missing: `make test` installs it (npm ci)")
    image = tree / "current.binpb"
    built = subprocess.run([str(BUF), "build", "-o", str(image)], cwd=tree, capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    return subprocess.run(
        [str(BUF), "breaking", str(image), "--against", str(BASELINE)],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _copy(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "protos", tree / "protos")
    shutil.copy(ROOT / "buf.yaml", tree / "buf.yaml")
    return tree


def test_main_has_no_breaking_change_against_the_baseline(tmp_path: Path) -> None:
    result = _breaking(_copy(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_renumbered_field_fails_buf_breaking(tmp_path: Path) -> None:
    fixture = json.loads(FIXTURE.read_text(encoding="utf-8"))
    tree = _copy(tmp_path)
    target = tree / fixture["file"]
    text = target.read_text(encoding="utf-8")
    assert text.count(fixture["old"]) == 1, "the fixture must match the contract exactly once"
    target.write_text(text.replace(fixture["old"], fixture["new"]), encoding="utf-8")
    result = _breaking(tree)
    assert result.returncode != 0
    assert fixture["reported"] in result.stdout, result.stdout + result.stderr
