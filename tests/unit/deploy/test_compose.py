"""docker-compose.yml: valid against the Compose specification (offline), healthy, bounded (CPU and memory
limits), with Jaeger v2 on persistent storage, a demo profile, and consistent with the configuration the
services load inside their containers, which is production-safe outside that profile."""

from __future__ import annotations

import copy
import json
import re
from importlib import resources
from typing import Any
from urllib.parse import urlparse

import jsonschema  # type: ignore[import-untyped]
import pytest
import yaml
from referencing import Registry

from agentmesh.config import NO_AUTH_KEY, ConfigError
from tests.unit.deploy.manifests import (
    COMPOSE_FILE,
    SERVICES,
    agentmesh_compose_services,
    compose_config_files,
    compose_environment,
    compose_mounts,
    demo_findings,
    duration_s,
    full_service_name,
    load_compose,
    services_json,
)

PROD_KEY = "compose-test-key-" + "c" * 32
SECRET_WORDS = ("KEY", "SECRET", "TOKEN", "PASSWORD")


def compose_validator() -> jsonschema.protocols.Validator:
    # The schema check-jsonschema vendors (`--builtin-schema vendor.compose-spec`), read from the
    # installed package. A registry that refuses every retrieval: nothing is fetched, ever.
    text = resources.files("check_jsonschema.builtin_schemas.vendor").joinpath("compose-spec.json").read_text()
    schema = json.loads(text)

    def refuse(uri: str) -> Any:
        raise LookupError(f"schema tried to fetch {uri}")

    cls = jsonschema.validators.validator_for(schema)
    return cls(schema, registry=Registry(retrieve=refuse), format_checker=cls.FORMAT_CHECKER)  # type: ignore[call-arg]


def schema_errors(document: dict[str, Any]) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in compose_validator().iter_errors(document)]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_compose()


@pytest.fixture(scope="module")
def ours(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return agentmesh_compose_services(compose)


@pytest.mark.usefixtures("no_network")
def test_compose_file_matches_the_compose_specification(compose: dict[str, Any]) -> None:
    assert schema_errors(compose) == []


@pytest.mark.usefixtures("no_network")
@pytest.mark.parametrize(
    ("mutate", "where"),
    [
        (lambda c: c["services"]["tool"]["healthcheck"].update(intervall="5s"), "services/tool/healthcheck"),
        (lambda c: c["services"]["dispatcher"]["depends_on"]["tool"].update(condition="healthy"), "condition"),
        (lambda c: c["services"]["redis"].update(restart=["always"]), "services/redis/restart"),
    ],
)
def test_schema_check_rejects_a_broken_file(compose: dict[str, Any], mutate: Any, where: str) -> None:
    """The validation is real: a typo, a wrong enum value or a wrong type is reported."""
    broken = copy.deepcopy(compose)
    mutate(broken)
    errors = schema_errors(broken)
    assert errors, "a broken compose file passed the schema"
    assert any(where in e for e in errors), errors


def test_four_agentmesh_services_one_per_process(ours: dict[str, dict[str, Any]]) -> None:
    assert sorted(ours) == sorted(SERVICES)
    images = {service["image"] for service in ours.values()}
    assert len(images) == 1, f"one image for every service, got {images}"
    for service in ours.values():
        assert service["build"]["dockerfile"] == "deploy/Dockerfile"


def one_shot(compose: dict[str, Any]) -> set[str]:
    """Services others wait for to finish (`service_completed_successfully`): jobs, not servers."""
    return {
        name
        for service in compose["services"].values()
        for name, dependency in (service.get("depends_on") or {}).items()
        if dependency.get("condition") == "service_completed_successfully"
    }


def test_every_service_has_a_health_check_and_a_restart_policy(compose: dict[str, Any]) -> None:
    jobs = one_shot(compose)
    for name in jobs:
        assert compose["services"][name]["restart"] == "no", f"{name} is a one-shot job"
    for name, service in compose["services"].items():
        if name in jobs:
            continue
        check = service.get("healthcheck")
        assert check and not check.get("disable"), f"{name}: no health check"
        assert check["test"][0] in ("CMD", "CMD-SHELL"), f"{name}: health check must run a command"
        assert service.get("restart") in ("always", "unless-stopped", "on-failure"), f"{name}: no restart policy"


def test_agentmesh_health_checks_probe_their_own_grpc_service(ours: dict[str, dict[str, Any]]) -> None:
    for key, service in ours.items():
        port = services_json(compose_environment(service, {}))[key]["port"]
        assert service["healthcheck"]["test"] == [
            "CMD",
            "agentmesh",
            "probe",
            f"127.0.0.1:{port}",
            "--service",
            full_service_name(key),
        ]


def test_start_order_waits_for_healthy_dependencies(ours: dict[str, dict[str, Any]]) -> None:
    for key, service in ours.items():
        depends = service["depends_on"]
        assert depends["redis"]["condition"] == "service_healthy", key
        # Tracing is exported in the background: a Jaeger outage must never stop the services.
        assert depends["jaeger"]["condition"] == "service_started", key
    dispatcher = ours["dispatcher"]["depends_on"]
    for other in ("context", "tool", "provider"):
        assert dispatcher[ours[other]["compose_name"]]["condition"] == "service_healthy"


def test_redis_keeps_every_task(compose: dict[str, Any]) -> None:
    command = compose["services"]["redis"]["command"]
    assert command[0] == "redis-server"
    options = dict(zip(command[1::2], command[2::2], strict=True))
    assert options["--maxmemory-policy"] == "noeviction"
    assert options["--appendonly"] == "yes"
    assert any(v.endswith(":/data") for v in compose["services"]["redis"]["volumes"]), "AOF needs a volume"


def test_traces_go_to_jaeger_v2_over_otlp(compose: dict[str, Any], ours: dict[str, dict[str, Any]]) -> None:
    jaeger = compose["services"]["jaeger"]
    image, _, tag = jaeger["image"].partition(":")
    assert image in ("jaegertracing/jaeger", "cr.jaegertracing.io/jaegertracing/jaeger"), "Jaeger v2's image"
    assert tag.split(".")[0] == "2", f"Jaeger v2, not {tag} (v1 reached end of life on 2025-12-31)"
    published = {p.rsplit(":", 1)[-1] for p in jaeger["ports"]}
    assert {"16686", "4317", "4318"} <= published
    config_path = compose_mounts(jaeger)[jaeger["command"][jaeger["command"].index("--config") + 1]]
    config = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    assert config["service"]["pipelines"]["traces"]["receivers"] == ["otlp"]
    assert set(config["receivers"]["otlp"]["protocols"]) == {"grpc", "http"}
    for service in ours.values():
        env = compose_environment(service, {})
        parsed = urlparse(env["OTEL_EXPORTER_OTLP_ENDPOINT"])
        assert (parsed.scheme, parsed.hostname, parsed.port) == ("http", "jaeger", 4317)
        assert env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "grpc"


def test_jaeger_keeps_traces_on_a_volume(compose: dict[str, Any]) -> None:
    jaeger = compose["services"]["jaeger"]
    config_path = compose_mounts(jaeger)[jaeger["command"][jaeger["command"].index("--config") + 1]]
    config = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    exporter = config["exporters"]["jaeger_storage_exporter"]["trace_storage"]
    assert config["extensions"]["jaeger_query"]["storage"]["traces"] == exporter
    backend = config["extensions"]["jaeger_storage"]["backends"][exporter]
    assert set(backend) == {"badger"}, "not the in-memory store: traces survive a restart"
    badger = backend["badger"]
    assert badger["ephemeral"] is False
    volumes = {v.split(":")[1]: v.split(":")[0] for v in jaeger["volumes"]}
    for directory in badger["directories"].values():
        mount = next(target for target in volumes if directory.startswith(target + "/"))
        assert volumes[mount] in compose["volumes"], f"{directory} is not on a named volume"
    # Jaeger runs as uid 10001: a one-shot job hands it the fresh (root-owned) volume first.
    init = compose["services"][next(iter(jaeger["depends_on"]))]
    assert jaeger["depends_on"][next(iter(jaeger["depends_on"]))]["condition"] == "service_completed_successfully"
    assert "chown -R 10001:10001" in " ".join(init["command"])


def test_every_service_has_cpu_and_memory_limits(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        limits = (service.get("deploy") or {}).get("resources", {}).get("limits", {})
        assert float(limits.get("cpus", 0)) > 0, f"{name}: no CPU limit"
        memory = str(limits.get("memory", ""))
        assert memory[:-1].isdigit() and memory[-1] in "KMG", f"{name}: no memory limit ({memory!r})"


def test_secrets_come_from_the_environment_only(ours: dict[str, dict[str, Any]]) -> None:
    for key, service in ours.items():
        raw = service["environment"]
        for name in ("AGENTMESH_AUTH_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
            assert name in raw and raw[name] is None, f"{key}: {name} must be passed through, not set here"
        literal = [n for n, v in raw.items() if v is not None and any(w in n for w in SECRET_WORDS)]
        assert not literal, f"{key}: secrets written into the compose file: {literal}"
        shell = {"AGENTMESH_AUTH_KEY": "from-the-shell", "OPENAI_API_KEY": "sk-from-the-shell"}
        env = compose_environment(service, shell)
        assert env["AGENTMESH_AUTH_KEY"] == "from-the-shell" and env["OPENAI_API_KEY"] == "sk-from-the-shell"


def test_ports_are_published_on_loopback_only(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        for port in service.get("ports") or []:
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} on every interface"


def test_config_is_the_mounted_agentmesh_yaml(ours: dict[str, dict[str, Any]]) -> None:
    for service in ours.values():
        env = compose_environment(service, {})
        assert compose_config_files(service, env) == [COMPOSE_FILE.parent / "agentmesh.yaml"]
        assert all(v.endswith(":ro") for v in service["volumes"] if "agentmesh" in v)


def test_the_default_stack_is_production_safe(ours: dict[str, dict[str, Any]], container_settings: Any) -> None:
    for key, service in ours.items():
        env = compose_environment(service, {})
        settings = container_settings(env, compose_config_files(service, env))
        assert demo_findings(settings) == [], key


def test_the_demo_profile_adds_the_demo(
    compose: dict[str, Any], ours: dict[str, dict[str, Any]], container_settings: Any
) -> None:
    """`AGENTMESH_DEMO=1 docker compose --profile demo up`: the overlay, and the fake ops API it calls."""
    in_profile = {name for name, service in compose["services"].items() if service.get("profiles")}
    assert in_profile == {"demo-ops"} and compose["services"]["demo-ops"]["profiles"] == ["demo"]
    ops = compose["services"]["demo-ops"]
    assert ops["command"][:3] == ["python", "-m", "agentmesh.cli.demo_ops"]
    port = ops["command"][ops["command"].index("--port") + 1]
    for key, service in ours.items():
        env = compose_environment(service, {"AGENTMESH_DEMO": "1"})
        files = compose_config_files(service, env)
        assert files == [COMPOSE_FILE.parent / "agentmesh.yaml", COMPOSE_FILE.parent / "agentmesh.demo.yaml"]
        settings = container_settings(env, files)
        assert "ops" in {a.id for a in settings.agents}, key
        endpoints = {urlparse(t.endpoint_url).netloc for t in settings.tools.registry}
        assert endpoints == {f"demo-ops:{port}"}, f"{key}: the demo's tools call the demo-ops service"


def test_containers_load_a_working_configuration(ours: dict[str, dict[str, Any]], container_settings: Any) -> None:
    names = {key: service["compose_name"] for key, service in ours.items()}
    for key, service in ours.items():
        env = compose_environment(service, {})
        settings = container_settings(env, compose_config_files(service, env))
        own = settings.services.endpoint(key)
        assert own.host == "0.0.0.0", f"{key} must listen on the container's interfaces"
        # /metrics is published on loopback at the listener's port.
        assert f"127.0.0.1:{own.http_port}:{own.http_port}" in service["ports"], key
        for other in SERVICES:
            endpoint = settings.services.endpoint(other)
            host, port = endpoint.dial_target.rsplit(":", 1)
            assert host == names[other], f"{key} dials {other} at {endpoint.dial_target}"
            assert int(port) == endpoint.port
        assert urlparse(settings.redis.url).hostname == "redis"


def test_production_needs_a_private_key(ours: dict[str, dict[str, Any]], container_settings: Any) -> None:
    service = ours["tool"]
    config = compose_config_files(service, compose_environment(service, {}))
    prod = compose_environment(service, {"AGENTMESH_ENVIRONMENT": "prod", "AGENTMESH_AUTH_KEY": PROD_KEY})
    assert container_settings(prod, config).environment == "prod"
    without_key = compose_environment(service, {"AGENTMESH_ENVIRONMENT": "prod"})
    with pytest.raises(ConfigError, match=rf"^{re.escape(NO_AUTH_KEY)}$"):
        container_settings(without_key, config)


def test_stop_grace_period_covers_the_drain(ours: dict[str, dict[str, Any]], container_settings: Any) -> None:
    for key, service in ours.items():
        env = compose_environment(service, {})
        server = container_settings(env, compose_config_files(service, env)).server
        drain = server.drain_delay_s + server.grace_period_s
        # Docker SIGKILLs after stop_grace_period (default 10 s); the drain must finish before.
        assert duration_s(service["stop_grace_period"]) >= drain + 2, f"{key}: drain {drain}s"
