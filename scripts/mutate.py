"""`make mutate` (issue 50): mutation testing (mutmut, pinned in the dev extra) of the modules that keep a
promise, each against the fast tests that cover it.

Each module runs in its own directory, var/mutate/<module>/: links to the checkout's packages and tests, and
a copy of pyproject.toml with a [tool.mutmut] section naming the one file to mutate and its tests. mutmut
puts its mutants and results under that directory's mutants/, so modules never share a cache and a rerun
only retests what changed. The score excludes the equivalent mutants listed, one reason each, in
scripts/mutate_equivalent.txt; a mutant that no test reaches counts as not killed.

    python scripts/mutate.py                 # every module, one after the other
    python scripts/mutate.py lease idempotency
    python scripts/mutate.py --list          # the modules and their tests
    python scripts/mutate.py --report lease  # the last results again, without running
    python scripts/mutate.py --rerun idempotency  # retest only the last run's survivors (tests added since)

Mutation runs are CPU-heavy: they run one module at a time, one mutant at a time (`--max-children`, default
1); run them under `nice`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VAR = ROOT / "var" / "mutate"
EQUIVALENT = ROOT / "scripts" / "mutate_equivalent.txt"
# What a module's tests import from the checkout (pytest's pythonpath names clients/; the redaction corpus
# test imports bench/).
LINKED = ("agentmesh", "context_svc", "tool_svc", "provider_svc", "dispatcher_svc", "tests", "clients", "bench")
# The score each module must reach, equivalent mutants excluded (issue 50).
TARGET = 0.90


@dataclass(frozen=True)
class Module:
    source: str
    tests: tuple[str, ...]
    also: tuple[str, ...] = ()  # files split out of `source` (one job each), mutated and scored with it

    @property
    def paths(self) -> tuple[str, ...]:
        return (self.source, *self.also)


IDENTITY_TESTS = ("tests/unit/test_auth.py", "tests/unit/test_oidc.py", "tests/unit/test_external_identity_config.py")

MODULES: dict[str, Module] = {
    "lease": Module("dispatcher_svc/lease.py", ("tests/unit/dispatcher/test_lease.py",)),
    "idempotency": Module(
        "tool_svc/idempotency.py",
        (
            "tests/unit/tool/test_idempotency_claims.py",
            "tests/unit/tool/test_idempotency_unknown.py",
            "tests/unit/tool/test_idempotency_header.py",
        ),
    ),
    "access": Module(
        "dispatcher_svc/access.py",
        ("tests/unit/dispatcher/test_access.py", "tests/unit/dispatcher/test_access_rules.py"),
    ),
    # The settler's own tests: the sweeper rigs of test_settlement.py / test_approval_expiry.py take 10-20 s
    # a mutant (414 mutants: over an hour) and reach nothing these do not.
    "settlement": Module("dispatcher_svc/settling.py", ("tests/unit/dispatcher/test_settler.py",)),
    "permissions": Module(
        "tool_svc/permissions.py", ("tests/unit/tool/test_permissions.py", "tests/unit/tool/test_steps.py")
    ),
    "grants": Module("agentmesh/grants.py", ("tests/unit/test_grants.py", "tests/unit/tool/test_steps.py")),
    "breaker": Module("tool_svc/breaker.py", ("tests/unit/tool/test_breaker.py", "tests/unit/tool/test_steps.py")),
    "ratelimit": Module("tool_svc/ratelimit.py", ("tests/unit/tool/test_ratelimit.py",)),
    # The store's own tests (fast, direct): test_tasks.py's replica rigs add minutes per survivor, no kills.
    "fencing": Module(
        "dispatcher_svc/tasks.py",
        ("tests/unit/dispatcher/test_task_store.py", "tests/unit/dispatcher/test_commit_commands.py"),
    ),
    # identity.py, split by job (issue 47): our signed tokens, the configured authenticator (with the JWT
    # mapping), and `agentmesh token`'s command; each against identity.py's tests.
    "tokens": Module("agentmesh/tokens.py", IDENTITY_TESTS),
    "authenticator": Module("agentmesh/authenticator.py", IDENTITY_TESTS),
    "token_command": Module("agentmesh/cli/token_mint.py", IDENTITY_TESTS),
    # The Identity value (roles and their implication, the dev identity) and the call's identity
    # (current_identity, require_identity) moved out of identity.py.
    "identity_value": Module("agentmesh/identity_value.py", ("tests/unit/test_auth.py",)),
    "oidc": Module("agentmesh/oidc.py", ("tests/unit/test_oidc.py", "tests/unit/test_external_identity_config.py")),
    # The table tests and the rule/step tests (test_guard_rules.py reaches GuardArguments and danger_error
    # directly): the whole of tests/unit/tool (bwrap sandbox runs included) took minutes a mutant.
    "guard": Module(
        "tool_svc/guard.py",
        ("tests/unit/tool/test_guard.py", "tests/unit/tool/test_guard_rules.py"),
        also=("tool_svc/guard_policy.py",),
    ),
    # The redactor's promise-keeping files: the entry points and vetoes, masking, the assignment grammar,
    # placeholders and gitleaks' rule matcher (not the vendored rules data: that is gitleaks' to test).
    "redaction": Module(
        "agentmesh/redact/__init__.py",
        (
            "tests/unit/redact/test_assignments.py",
            "tests/unit/redact/test_context.py",
            "tests/unit/redact/test_masking.py",
            "tests/unit/redact/test_rule_matcher.py",
            "tests/unit/tool/test_redaction_corpus.py",
        ),
        also=(
            "agentmesh/redact/spans.py",
            "agentmesh/redact/assignments.py",
            "agentmesh/redact/placeholders.py",
            "agentmesh/redact/gitleaks_rules.py",
        ),
    ),
    "payload_access": Module("agentmesh/payload_grants.py", ("tests/unit/test_payload_grants.py",)),
    # The real bwrap runs (a few seconds for the whole files) and the parts one by one.
    "sandbox_policy": Module(
        "tool_svc/sandbox.py",
        (
            "tests/unit/tool/test_sandbox.py",
            "tests/unit/tool/test_sandbox_hardening.py",
            "tests/unit/tool/test_sandbox_parts.py",
        ),
        also=("tool_svc/sandbox_prelude.py",),
    ),
    # The sandbox's seccomp filter (libseccomp), checked by a BPF interpreter against the hand-built oracle.
    "seccomp": Module("tool_svc/seccomp.py", ("tests/unit/tool/test_seccomp.py",)),
}


def _work_dir(name: str, module: Module) -> Path:
    """var/mutate/<name>/: the checkout's packages linked, and the mutmut config for this module alone."""
    work = VAR / name
    work.mkdir(parents=True, exist_ok=True)
    for entry in LINKED:
        link = work / entry
        if not link.is_symlink():
            link.symlink_to(ROOT / entry, target_is_directory=True)
    tests = [t for t in module.tests if (ROOT / t).exists()]
    package = module.source.split("/", 1)[0]
    config = (
        "\n[tool.mutmut]\n"
        f"source_paths = [{json.dumps(package)}]\n"
        f"only_mutate = {json.dumps(list(module.paths))}\n"
        f"pytest_add_cli_args_test_selection = {json.dumps(tests)}\n"
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "-q", "--timeout=60"]\n'
        "use_git_change_detection = false\n"
        'also_copy = ["clients", "bench"]\n'
    )
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8") + config
    target = work / "pyproject.toml"
    if not target.exists() or target.read_text(encoding="utf-8") != pyproject:
        target.write_text(pyproject, encoding="utf-8")
        # A new config (other tests): mutmut's cache of which tests reach which function is stale.
        shutil.rmtree(work / "mutants", ignore_errors=True)
    return work


def _equivalents() -> dict[str, str]:
    """Mutant name -> why it is equivalent (scripts/mutate_equivalent.txt)."""
    found: dict[str, str] = {}
    for raw in EQUIVALENT.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, _, reason = line.partition(" ")
        if not reason.strip():
            raise SystemExit(f"{EQUIVALENT.name}: {name} has no reason")
        found[name] = reason.strip()
    return found


def _status(code: int | None) -> str:
    if code in (1, 3, 37):
        return "killed"
    if code in (36, 24, -24, 152, 255):
        return "timeout"
    if code == 0:
        return "survived"
    if code in (5, 33):
        return "unreached"
    if code is None:
        return "not checked"
    return "suspicious"


def _codes(name: str, module: Module) -> dict[str, int | None] | None:
    """mutmut's exit code per mutant over every file of the module; None before the main file's first run."""
    codes: dict[str, int | None] = {}
    for path in module.paths:
        meta = VAR / name / "mutants" / (path + ".meta")
        if meta.exists():
            codes.update(json.loads(meta.read_text(encoding="utf-8"))["exit_code_by_key"])
        elif path == module.source:
            return None
    return codes


def report(name: str, module: Module) -> bool:
    """Prints the module's score and survivors; writes var/mutate/<name>/summary.json. True at >= TARGET."""
    codes = _codes(name, module)
    if codes is None:
        print(f"== {name}: no results (var/mutate/{name}/mutants/{module.source}.meta missing)")
        return False
    equivalent = _equivalents()
    statuses = {mutant: _status(code) for mutant, code in codes.items()}
    listed = {m for m in statuses if m in equivalent}
    counted = {m: s for m, s in statuses.items() if m not in listed}
    census = Counter(counted.values())
    detected = census["killed"] + census["timeout"]
    scored = len(counted)
    score = detected / scored if scored else 1.0
    # Listed but killed: the list is stale (the mutant is not equivalent after all).
    stale = sorted(m for m in listed if statuses[m] in ("killed", "timeout"))
    print(
        f"== {name} ({' '.join(module.paths)}): {detected}/{scored} killed = {score:.1%} "
        f"(equivalent excluded: {len(listed)}; survived {census['survived']}, unreached {census['unreached']}, "
        f"timeout {census['timeout']}, suspicious {census['suspicious']}, not checked {census['not checked']})"
    )
    for mutant, status in sorted(counted.items()):
        if status not in ("killed", "timeout"):
            print(f"   {status:>11}  {mutant}")
    for mutant in stale:
        print(f"   listed as equivalent but killed: {mutant}")
    summary = {
        "module": module.source,
        "also": list(module.also),
        "tests": list(module.tests),
        "total": len(statuses),
        "equivalent": len(listed),
        "scored": scored,
        "killed": detected,
        "score": round(score, 4),
        **{k.replace(" ", "_"): v for k, v in census.items()},
        "survivors": sorted(m for m, s in counted.items() if s not in ("killed", "timeout")),
    }
    (VAR / name / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return score >= TARGET and not stale


def _not_killed(name: str, module: Module) -> list[str]:
    """The mutants the last run of `name` did not kill (survived, unreached, ...), equivalent ones included."""
    codes = _codes(name, module) or {}
    return sorted(m for m, code in codes.items() if _status(code) not in ("killed", "timeout"))


def run(name: str, module: Module, max_children: int, *, rerun: bool = False) -> bool:
    work = _work_dir(name, module)
    mutmut = Path(sys.executable).with_name("mutmut")
    print(f"== {name}: mutmut run in {work.relative_to(ROOT)} (tests: {' '.join(module.tests)})", flush=True)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    # mutmut keeps a mutant's result until its function changes; tests added since would not be tried on
    # the survivors: --rerun names them, so exactly those run again (new tests are found by mutmut itself).
    names = _not_killed(name, module) if rerun else []
    if rerun and not names:
        print(f"== {name}: nothing to rerun")
        return report(name, module)
    done = subprocess.run([str(mutmut), "run", "--max-children", str(max_children), *names], cwd=work, env=env)
    if done.returncode != 0:
        print(f"== {name}: mutmut exited {done.returncode}")
    return report(name, module) and done.returncode == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("modules", nargs="*", help=f"modules to run (default: all): {', '.join(MODULES)}")
    parser.add_argument("--max-children", type=int, default=1, help="mutants tested at once (default 1)")
    parser.add_argument("--report", action="store_true", help="print the last results without running")
    parser.add_argument("--rerun", action="store_true", help="retest only the mutants the last run did not kill")
    parser.add_argument("--list", action="store_true", help="list the modules and their tests")
    args = parser.parse_args(argv)
    if args.list:
        for name, module in MODULES.items():
            print(f"{name:12} {','.join(module.paths):28} {' '.join(module.tests)}")
        return 0
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        parser.error(f"unknown modules {unknown}; known: {', '.join(MODULES)}")
    ok = True
    for name in args.modules or list(MODULES):
        module = MODULES[name]
        ok = (report(name, module) if args.report else run(name, module, args.max_children, rerun=args.rerun)) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
