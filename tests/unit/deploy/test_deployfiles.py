"""deploy/constraints.txt pins the image's whole runtime closure; the k8s base's config copy is exact."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentmesh.dev import deployfiles
from agentmesh.dev.deployfiles import (
    CONFIG_COPY_PATH,
    CONFIG_PATH,
    CONSTRAINTS_PATH,
    direct_pins,
    direct_requirements,
    read_constraints,
    runtime_closure,
)

STALE = "run `python -m agentmesh.dev.deployfiles` and commit the result"


def test_constraints_agree_with_every_pin_in_pyproject() -> None:
    constraints = read_constraints()
    for name, version in direct_pins().items():
        assert constraints.get(name) == version, f"{name}=={version} in pyproject.toml: {STALE}"


def test_constraints_cover_the_whole_runtime_closure() -> None:
    # Names only: a fresh virtualenv may resolve newer transitive versions than the committed file,
    # which is exactly what the image must not do. A new dependency must be added, though.
    missing = set(runtime_closure(direct_requirements())) - set(read_constraints())
    assert not missing, f"runtime dependencies the image would install unpinned: {sorted(missing)}: {STALE}"


def test_constraints_hold_no_dev_only_packages() -> None:
    constraints = read_constraints()
    for dev_only in ("pytest", "mypy", "ruff", "kubernetes-validate", "check-jsonschema", "dockerfile"):
        assert dev_only not in constraints


def test_unpinned_dependency_is_refused(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\ndependencies = ["grpcio>=1.0"]\n', encoding="utf-8")
    with pytest.raises(ValueError, match="not pinned"):
        direct_pins(pyproject)


def test_malformed_constraints_line_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "constraints.txt"
    bad.write_text("# ok\ngrpcio==1.0\nredis>=5\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r":3: expected name==version"):
        read_constraints(bad)


def test_missing_dependency_is_named() -> None:
    from packaging.requirements import Requirement

    with pytest.raises(LookupError, match="no-such-package-agentmesh"):
        runtime_closure([Requirement("no-such-package-agentmesh==1.0")])


def test_the_k8s_config_is_the_production_safe_file_verbatim() -> None:
    assert CONFIG_PATH.name == "agentmesh.yaml"
    assert CONFIG_COPY_PATH.read_bytes() == CONFIG_PATH.read_bytes(), STALE
    assert "run_shell" not in CONFIG_COPY_PATH.read_text(encoding="utf-8")


def test_check_mode_writes_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    target = tmp_path / "constraints.txt"
    monkeypatch.setattr(deployfiles, "_targets", lambda: [(target, "fresh\n")])
    monkeypatch.setattr(deployfiles, "ROOT", tmp_path)
    assert deployfiles.main(["--check"]) == 1
    assert not target.exists()
    assert deployfiles.main([]) == 0
    assert target.read_text(encoding="utf-8") == "fresh\n"
    assert deployfiles.main(["--check"]) == 0


def test_committed_constraints_parse() -> None:
    assert CONSTRAINTS_PATH.exists()
    assert len(read_constraints()) >= len(direct_pins())
