"""The port of gitleaks' sample generator: the Go-subset interpreter (golite), the reggen port, and the
refresh script that vendors the rule files."""

from __future__ import annotations

import importlib.util
import random
import re
import subprocess
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest

from tests.secretcorpus import golite, reggen
from tests.secretcorpus.corpus import GITLEAKS, rule_secrets

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "refresh_gitleaks.py"


@cache
def refresh_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("refresh_gitleaks", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(src: str, fn: str, *args: object, natives: dict[str, dict[str, object]] | None = None) -> object:
    interp = golite.Interpreter({"fmt": {"Sprintf": golite.go_sprintf}, **(natives or {})})
    pkg = interp.load("example.com/p", [src])
    return interp.call_function(pkg, fn, *args)


def test_go_subset_statements_and_literals() -> None:
    src = """package p

import "fmt"

var names = []string{"b", "a"}

func F() []string {
	out := []string{`raw\\n`, "esc\\t\\x41"}
	m := map[string][]string{
		"z": {"1", "2"},
		"y": {"3"},
	}
	for k, vs := range m {
		for _, v := range vs {
			out = append(out, fmt.Sprintf("%s=%s", k, v))
		}
	}
	var (
		n = 0
	)
	for {
		n++
		if n < 3 {
			continue
		}
		break
	}
	if ok := n == 3; ok {
		out = append(out, names...)
	}
	return out
}
"""
    # Maps range in sorted key order (Go's is random).
    assert _run(src, "F") == ["raw\\n", "esc\tA", "y=3", "z=1", "z=2", "b", "a"]


def test_unsupported_go_fails_loudly() -> None:
    with pytest.raises(golite.GoError):
        _run("package p\n\nfunc F() int {\n\tswitch x {\n\t}\n}\n", "F")
    with pytest.raises(golite.GoError, match="undefined"):
        _run("package p\n\nfunc F() int {\n\treturn y\n}\n", "F")


def test_replacer_is_gos_left_to_right_first_match() -> None:
    r = golite.Replacer((("{i}", "x"), ("{I}", "X"), ("{s}", "{i}")))
    assert r.go_Replace("{i}_{I}={s}") == "x_X={i}"  # a replacement is not scanned again


@pytest.mark.parametrize(
    ("pattern", "check"),
    [
        (r"[a-z0-9]{32}", r"[a-z0-9]{32}"),
        (r"ey[a-zA-Z0-9]{17,}\.ey[a-zA-Z0-9\/\\_-]{17,}", r"ey[a-zA-Z0-9]{17}\.ey[a-zA-Z0-9/\\_-]{17}"),  # {n,} -> n
        (r"\b(HRKU-AA[0-9a-zA-Z_-]{58})", r"HRKU-AA[0-9a-zA-Z_-]{58}"),
        (
            r"access-(?:sandbox|development|production)-[a-f0-9]{8}",
            r"access-(sandbox|development|production)-[a-f0-9]{8}",
        ),
        (r"fm2_[a-zA-Z0-9+\/]{100,}={0,3}", r"fm2_[a-zA-Z0-9+/]{100}=?"),  # {0,3} -> 0 or 1 (limit 1)
        (r"[[:alnum:]]{14}\.[a-f0-9]{4}", r"[A-Za-z0-9]{14}\.[a-f0-9]{4}"),
        (r"[a-zA-Z-0-9]{32}", r"[a-zA-Z0-9-]{32}"),
        (
            r"A3-[A-Z0-9]{6}-(?:[A-Z0-9]{11}|[A-Z0-9]{6}-[A-Z0-9]{5})",
            r"A3-[A-Z0-9]{6}-(?:[A-Z0-9]{11}|[A-Z0-9]{6}-[A-Z0-9]{5})",
        ),
    ],
)
def test_reggen_draws_what_the_pattern_matches(pattern: str, check: str) -> None:
    rng = random.Random(1)
    for _ in range(50):
        assert re.fullmatch(check, reggen.new_secret(pattern, rng)), pattern


def test_reggen_uses_the_whole_alphabet_uniformly() -> None:
    rng = random.Random(2)
    drawn = "".join(reggen.new_secret("[a-z0-9]{1000}", rng) for _ in range(10))
    counts = {c: drawn.count(c) for c in "abcdefghijklmnopqrstuvwxyz0123456789"}
    assert min(counts.values()) > 150 and max(counts.values()) < 400  # expected ~278 each
    folded = "".join(reggen.new_secret("(?i)[k]{200}", rng) for _ in range(5))
    assert set(folded) == {"k", "K", "\u212a"}  # Go folds k to the Kelvin sign too


def test_rule_secrets_follow_the_secret_group() -> None:
    text = 'gitlab_api_token = "glpat-Xk9vQ2mR7tLp4Wz8Ns3Y"'
    assert rule_secrets("gitlab-pat", text) == ("glpat-Xk9vQ2mR7tLp4Wz8Ns3Y",)
    assert rule_secrets("no-such-rule", text) == ()


def test_vendored_sources_name_their_commit() -> None:
    stamp = (GITLEAKS / "VERSION").read_text(encoding="utf-8")
    runtime = (Path(refresh_module().RUNTIME) / "VERSION.gitleaks").read_text(encoding="utf-8")
    assert stamp == runtime and re.fullmatch(r"gitleaks [0-9a-f]{40}\n", stamp)
    assert "MIT License" in (GITLEAKS / "LICENSE").read_text(encoding="utf-8")


def test_refresh_script_copies_a_checkout(tmp_path: Path) -> None:
    repo = tmp_path / "gitleaks"
    for rel, body in {
        "config/gitleaks.toml": "title = 'x'\n",
        "LICENSE": "MIT License\n",
        "cmd/generate/config/main.go": "package main\n",
        "cmd/generate/config/rules/a.go": "package rules\n",
        "cmd/generate/config/rules/a_test.go": "package rules\n",
        "cmd/generate/config/utils/generate.go": "package utils\n",
    }.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(body, encoding="utf-8")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    runtime, corpus_dir = tmp_path / "runtime", tmp_path / "corpus"
    commit = refresh_module().refresh(repo, "HEAD", runtime, corpus_dir)
    assert (runtime / "gitleaks.toml").read_text(encoding="utf-8") == "title = 'x'\n"
    assert sorted(p.name for p in (corpus_dir / "rules").iterdir()) == ["a.go"]  # tests left out
    assert (corpus_dir / "VERSION").read_text(encoding="utf-8") == f"gitleaks {commit}\n"
