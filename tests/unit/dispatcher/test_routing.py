"""Capability routing (issue 44): the choice among an capability's carriers (health, depth, ties by id),
its typed errors, the ListModels cache, and the agents' load counters in Redis (agent_load.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import ValidationError

from agentmesh.config import AgentSettings, RoutingSettings
from agentmesh.errors import AgentmeshError, ErrorCode, UnavailableError
from agentmesh.store import Store
from dispatcher_svc.agent_load import AgentLoad
from dispatcher_svc.agents import AgentConfig
from dispatcher_svc.model import TaskStatus
from dispatcher_svc.routing import Health, ModelState, Router, choose

SETTINGS = RoutingSettings(models_cache_s=10, failed_window_s=600, failed_share_max=0.5, failed_min_ended=4)


def agent(agent_id: str, *capabilities: str, model: str = "fake/m", task_tag: str = "") -> AgentConfig:
    return AgentConfig.from_settings(
        AgentSettings(id=agent_id, model=model, task_tag=task_tag, capabilities=list(capabilities))
    )


class FakeLoad:
    def __init__(self, depths: Mapping[str, int] | None = None, outcomes: Mapping[str, tuple[int, int]] | None = None):
        self.depths = dict(depths or {})
        self.outcomes = dict(outcomes or {})
        self.asked: list[list[str]] = []

    async def signals(self, agents: Sequence[str]) -> tuple[Mapping[str, int], Mapping[str, tuple[int, int]]]:
        self.asked.append(list(agents))
        return self.depths, self.outcomes


class FakeCatalog:
    def __init__(self, state: ModelState | None = None, error: AgentmeshError | None = None) -> None:
        self.state = state or ModelState(available=frozenset({"fake/m"}))
        self.error = error
        self.calls = 0
        self.tokens: list[str] = []

    async def models(self, identity_token: str) -> ModelState:
        self.calls += 1
        self.tokens.append(identity_token)
        if self.error is not None:
            raise self.error
        return self.state


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


AGENTS = [agent("b-log", "logs"), agent("a-log", "logs", "triage"), agent("c-log", "logs"), agent("solo", "report")]


def router(load: FakeLoad, catalog: FakeCatalog | None = None, clock: Clock | None = None) -> Router:
    return Router(AGENTS, load, catalog or FakeCatalog(), SETTINGS, clock or Clock())


# -- the pure rule -----------------------------------------------------------------------------------


def test_the_lowest_depth_wins_and_ties_go_to_the_smallest_id() -> None:
    assert choose("logs", [Health("b", 2), Health("a", 3), Health("c", 2)]).agent_id == "b"
    assert choose("logs", [Health("z", 0), Health("y", 0), Health("x", 1)]).agent_id == "y"


def test_an_unhealthy_carrier_is_skipped_even_when_idle() -> None:
    choice = choose("logs", [Health("a", 0, problem="model down"), Health("b", 5)])
    assert (choice.agent_id, choice.depth, choice.healthy) == ("b", 5, 1)


def test_every_carrier_unhealthy_is_unavailable_naming_the_capability_and_each_problem() -> None:
    with pytest.raises(UnavailableError) as caught:
        choose("logs", [Health("b", 0, problem="model gone"), Health("a", 0, problem="7 of 8 FAILED")])
    err = caught.value
    assert err.code == ErrorCode.UNAVAILABLE
    assert err.metadata["capability"] == "logs" and err.metadata["reason"] == "NO_HEALTHY_AGENT"
    assert "'logs'" in err.message and "a: 7 of 8 FAILED; b: model gone" in err.message


# -- the Router: signals, errors, the ListModels cache ------------------------------------------------


async def test_the_router_picks_the_least_loaded_carrier_and_asks_for_the_carriers_only() -> None:
    load = FakeLoad(depths={"a-log": 3, "b-log": 1, "c-log": 1})
    choice = await router(load).route("logs")
    assert choice.agent_id == "b-log"  # b and c tie at 1: by id
    assert [h.agent_id for h in choice.carriers] == ["a-log", "b-log", "c-log"]
    assert load.asked == [["a-log", "b-log", "c-log"]]
    assert choice.attributes() == {
        "capability": "logs",
        "routed_depth": "1",
        "routed_healthy": "3",
        "routed_models": "checked",
    }


async def test_a_high_failed_share_makes_an_agent_unhealthy_once_enough_tasks_ended() -> None:
    load = FakeLoad(outcomes={"a-log": (4, 2), "b-log": (3, 3), "c-log": (10, 4)})
    choice = await router(load).route("logs")
    # a: 2 of 4 FAILED (at the 0.5 threshold): unhealthy; b: 3 of 3 but under failed_min_ended: healthy.
    assert choice.agent_id == "b-log"
    problems = {h.agent_id: h.problem for h in choice.carriers}
    assert problems["a-log"] == "2 of its 4 tasks ended FAILED in the last 10 min"
    assert problems["b-log"] == "" and problems["c-log"] == ""


async def test_an_unavailable_or_unlisted_model_makes_an_agent_unhealthy() -> None:
    agents = [agent("a", "x", model="p/down"), agent("b", "x", model="p/missing"), agent("c", "x", model="alias")]
    state = ModelState(available=frozenset({"alias"}), unavailable={"p/down": "OPENAI_API_KEY is unset"})
    choice = await Router(agents, FakeLoad(depths={"c": 9}), FakeCatalog(state), SETTINGS, Clock()).route("x")
    assert choice.agent_id == "c"
    problems = {h.agent_id: h.problem for h in choice.carriers}
    assert problems == {
        "a": "model p/down unavailable: OPENAI_API_KEY is unset",
        "b": "model p/missing is not in provider_svc's ListModels",
        "c": "",
    }


def test_a_task_tag_route_is_checked_through_the_routes() -> None:
    state = ModelState(available=frozenset({"p/m"}), unavailable={"p/off": "down"}, routes={"t": "p/off", "u": "p/m"})
    assert state.problem(agent("a", "x", model="", task_tag="t")) == "model p/off unavailable: down"
    assert state.problem(agent("a", "x", model="", task_tag="u")) == ""
    assert state.problem(agent("a", "x", model="", task_tag="v")) == ""  # the provider's default


async def test_list_models_is_cached_and_a_failure_routes_without_the_model_check() -> None:
    clock = Clock()
    catalog = FakeCatalog(ModelState(available=frozenset({"other"})))
    r = router(FakeLoad(), catalog, clock)
    with pytest.raises(UnavailableError):
        await r.route("logs")  # fake/m is not listed: no carrier is healthy
    await r.models()
    assert catalog.calls == 1
    clock.now += SETTINGS.models_cache_s
    catalog.error = UnavailableError("provider down")
    choice = await r.route("logs")  # provider_svc cannot say: the models are not held against anyone
    assert choice.agent_id == "a-log" and catalog.calls == 2
    assert choice.attributes()["routed_models"] == "unchecked: provider down"
    await r.route("logs")
    assert catalog.calls == 2  # the failure is cached too
    assert catalog.tokens == ["", ""]  # without a minter: the incoming caller's token
    minted = Router(AGENTS, FakeLoad(), catalog, SETTINGS, Clock(), identity=lambda: "dispatcher-token")
    await minted.route("logs")
    assert catalog.tokens[-1] == "dispatcher-token"


async def test_an_unknown_capability_is_not_found_naming_it_and_the_known_ones() -> None:
    with pytest.raises(AgentmeshError) as caught:
        await router(FakeLoad()).route("billing")
    err = caught.value
    assert err.code == ErrorCode.NOT_FOUND
    assert err.metadata == {"field": "capability", "capability": "billing", "reason": "CAPABILITY_UNKNOWN"}
    assert "'billing'" in err.message and "known: logs, report, triage" in err.message


@pytest.mark.parametrize("tag", ["", "Logs", "a b", "-x", "x" * 65, "é"])
async def test_a_malformed_capability_is_invalid(tag: str) -> None:
    with pytest.raises(AgentmeshError) as caught:
        router(FakeLoad()).carriers(tag)
    assert caught.value.code == ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize("tags", [["Logs"], ["a b"], ["ok", "ok"], ["x" * 65]])
def test_config_refuses_a_malformed_or_repeated_capability(tags: list[str]) -> None:
    with pytest.raises(ValidationError, match="capabilit"):
        AgentSettings(id="a", capabilities=tags)


async def test_the_choice_is_a_span_with_its_attributes() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    r = Router(AGENTS, FakeLoad(depths={"a-log": 2}), FakeCatalog(), SETTINGS, Clock(), provider.get_tracer("t"))
    await r.route("logs")
    (span,) = exporter.get_finished_spans()
    assert span.name == "dispatcher.route"
    assert dict(span.attributes or {}) == {
        "agentmesh.route.capability": "logs",
        "agentmesh.route.carriers": 3,
        "agentmesh.route.agent_id": "b-log",
        "agentmesh.route.depth": 0,
        "agentmesh.route.healthy": 3,
    }


# -- agent_load.py on Redis ------------------------------------------------------------------------


async def test_depth_counts_each_unfinished_task_once_whatever_repeats(store: Store) -> None:
    load = AgentLoad(store, SETTINGS)
    for _ in range(2):  # a retried create, an acquire: the same member
        await load.entered("a", "t1")
        await load.entered("a", "t2")
    await load.entered("b", "t3")
    assert await load.depths(["a", "b", "c"]) == {"a": 2, "b": 1, "c": 0}
    await load.ended("a", "t1", TaskStatus.FAILED, first=True)
    await load.ended("a", "t1", TaskStatus.FAILED, first=False)  # a later write to the ended task
    await load.ended("a", "t2", TaskStatus.CANCELLED, first=True)
    depths, outcomes = await load.signals(["a", "b"])
    assert depths == {"a": 0, "b": 1}
    assert outcomes == {"a": (2, 1), "b": (0, 0)}


async def test_repair_drops_finished_gone_and_foreign_members_and_keeps_live_ones(store: Store) -> None:
    load = AgentLoad(store, SETTINGS)
    keys = store.keys
    await store.redis.hset(keys.task("live"), mapping={"status": int(TaskStatus.RUNNING), "agent_id": "a"})
    await store.redis.hset(keys.task("done"), mapping={"status": int(TaskStatus.SUCCEEDED), "agent_id": "a"})
    await store.redis.hset(keys.task("other"), mapping={"status": int(TaskStatus.PENDING), "agent_id": "b"})
    for task_id in ("live", "done", "other", "gone"):  # left behind by crashes
        await load.entered("a", task_id)
    assert await load.repair("a") == 0  # all too young to re-check: just added
    assert await load.repair("a", grace_ms=-1000) == 3
    raw: list[bytes] = await store.redis.zrange(keys.agent_active("a"), 0, -1)  # type: ignore[assignment]
    members = {m.decode() for m in raw}
    assert members == {"live"}


async def test_repair_never_drops_a_member_re_added_since_it_looked(store: Store) -> None:
    load = AgentLoad(store, SETTINGS)
    key = store.keys.agent_active("a")
    await store.redis.zadd(key, {"t": 1000})
    # Repair saw score 999 (the task finished), then a resume re-added it (score 1000): it stays.
    assert await load._drop(keys=[key], args=["t", "999.0"]) == 0
    assert await load._drop(keys=[key], args=["t", "1000.0"]) == 1
    assert await store.redis.zcard(key) == 0


async def test_the_outcome_hash_is_trimmed_and_its_ttl_refreshed_once_a_minute_per_agent(store: Store) -> None:
    load = AgentLoad(store, SETTINGS)
    key = store.keys.agent_outcomes("a")
    await store.redis.hset(key, "1:e", 5)  # a minute long past the window
    await load.ended("a", "t1", TaskStatus.SUCCEEDED, first=True)
    assert await store.redis.hexists(key, "1:e") == 0 and await store.redis.ttl(key) > 0
    # Later ends of the same minute only count (issue 45): what they would drop waits a minute.
    await store.redis.hset(key, "1:e", 5)
    await store.redis.persist(key)
    await load.ended("a", "t2", TaskStatus.FAILED, first=True)
    assert await store.redis.hexists(key, "1:e") == 1 and await store.redis.ttl(key) == -1
    assert (await load.signals(["a"]))[1] == {"a": (2, 1)}
    load._trimmed["a"] -= 1  # the next minute
    await load.ended("a", "t3", TaskStatus.SUCCEEDED, first=True)
    assert await store.redis.hexists(key, "1:e") == 0 and await store.redis.ttl(key) > 0


async def test_an_end_after_the_minutes_first_is_its_counts_and_removal_only(store: Store) -> None:
    # Issue 45: no script run for an end that has nothing to trim: HINCRBY(s) and ZREM, counted at Redis.
    load = AgentLoad(store, SETTINGS)
    for task_id in ("t1", "t2", "t3", "t4"):
        await load.entered("a", task_id)
    await load.ended("a", "t1", TaskStatus.SUCCEEDED, first=True)  # the minute's first: the script trims
    stats: Any = await store.redis.info("commandstats")
    before = Counter({name: int(v["calls"]) for name, v in stats.items()})
    await load.ended("a", "t2", TaskStatus.SUCCEEDED, first=True)
    await load.ended("a", "t3", TaskStatus.FAILED, first=True)
    await load.ended("a", "t4", TaskStatus.FAILED, first=False)  # a later write to an ended task: not counted
    stats = await store.redis.info("commandstats")
    used = +(Counter({name: int(v["calls"]) for name, v in stats.items()}) - before)
    used["cmdstat_info"] -= 1
    assert +used == Counter({"cmdstat_hincrby": 3, "cmdstat_zrem": 3})
    depths, outcomes = await load.signals(["a"])
    assert depths == {"a": 0} and outcomes == {"a": (3, 1)}
