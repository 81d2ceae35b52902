"""The one grant matcher (agentmesh/grants.py) every service checks tokens with: what each access level
confers, globs and `*` per part, literal names with glob characters, malformed grants, and the agent
run permission. Pure functions: no Redis, no gRPC."""

from __future__ import annotations

import pytest

from agentmesh.grants import ACCESS_LEVELS, agent_run_permission, allowed, grant_allows


@pytest.mark.parametrize(
    ("granted", "confers"),
    [
        ("read", {"read"}),
        ("write", {"read", "write"}),  # write implies read, never the reverse
        ("run", {"run"}),  # starting a task is neither reading nor writing a tool's system
        ("*", {"read", "write", "run"}),
        ("r*", {"read", "run"}),  # a glob access part matches the level names
        ("wri?e", {"write"}),
        ("admin", set()),  # no such level: grants nothing
    ],
)
def test_each_access_part_confers_exactly_its_levels(granted: str, confers: set[str]) -> None:
    assert ACCESS_LEVELS == ("read", "write", "run")
    got = {level for level in ACCESS_LEVELS if grant_allows(f"prod:ops:{granted}", "prod", "ops", level)}
    assert got == confers


@pytest.mark.parametrize(
    ("grant", "environment", "group", "ok"),
    [
        ("prod:ops:read", "prod", "ops", True),
        ("*:ops:read", "staging", "ops", True),
        ("prod:*:read", "prod", "anything", True),
        ("pr*:ops:read", "prod", "ops", True),
        ("pr*:ops:read", "staging", "ops", False),
        ("prod:ops.*:read", "prod", "ops.k8s", True),
        ("prod:ops.*:read", "prod", "opsk8s", False),
        ("prod:ops:read", "prod", "OPS", False),  # case matters
        ("Prod:ops:read", "prod", "ops", False),
        ("staging:ops:read", "prod", "ops", False),  # the environment part is checked on its own
        ("prod:k8s:read", "prod", "ops", False),  # and so is the group part
    ],
)
def test_environment_and_group_parts(grant: str, environment: str, group: str, ok: bool) -> None:
    assert grant_allows(grant, environment, group, "read") is ok


def test_a_part_equal_to_the_name_matches_even_with_glob_characters() -> None:
    # "ops[1]" as a glob would match only "ops1"; granted literally it names the group "ops[1]".
    assert grant_allows("prod:ops[1]:read", "prod", "ops[1]", "read")
    assert grant_allows("env[a]:ops:read", "env[a]", "ops", "read")
    assert not grant_allows("prod:ops[1]:read", "prod", "ops[2]", "read")


@pytest.mark.parametrize("grant", ["prod:ops", "prod:ops:read:x", "", "prod::", "::read"])
def test_malformed_grants_grant_nothing(grant: str) -> None:
    assert not grant_allows(grant, "prod", "ops", "read")


def test_allowed_takes_any_of_the_grants() -> None:
    assert allowed(["staging:ops:read", "prod:ops:write"], "prod:ops:read")
    assert allowed(["prod:ops:write", "bad"], "prod:ops:write")
    assert not allowed(["staging:ops:write", "prod:k8s:write"], "prod:ops:read")
    assert not allowed([], "prod:ops:read")


def test_the_agent_run_permission() -> None:
    assert agent_run_permission("prod", "ops-agent") == "prod:agent.ops-agent:run"
    assert allowed(["prod:agent.*:run"], agent_run_permission("prod", "ops-agent"))
    assert not allowed(["prod:agent.*:write"], agent_run_permission("prod", "ops-agent"))
