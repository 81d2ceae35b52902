"""deploy/k8s: the base and the dev and prod overlays as `kubectl kustomize` renders them, valid against
the Kubernetes schemas (offline, strict), probed over native gRPC, drained within the grace period (Istio's
too), rolled on a configuration change, scraped for metrics, and consistent with the configuration the
pods load, which is production-safe."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_validate.utils import ValidationError, validate  # type: ignore[import-untyped]

from agentmesh.dev.deployfiles import CONFIG_COPY_PATH
from tests.unit.deploy.conftest import SECRETS
from tests.unit.deploy.manifests import (
    K8S_BASE,
    K8S_OVERLAYS,
    REPO,
    SERVICES,
    agentmesh_compose_services,
    config_map,
    container_port,
    demo_findings,
    dockerfile_instructions,
    final_stage,
    full_service_name,
    k8s_deployments,
    k8s_documents,
    k8s_env,
    k8s_files,
    k8s_resources,
    kustomize,
    load_compose,
    services_json,
)

# Native gRPC probes are GA since 1.27; validate against it and the newest schemas shipped.
K8S_VERSIONS = ("1.27", "1.37")

DRAIN_MARGIN_S = 2
TREES = {"base": K8S_BASE, **K8S_OVERLAYS}


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(only)


def pod_labels(deployment: dict[str, Any]) -> dict[str, str]:
    return dict(deployment["spec"]["template"]["metadata"]["labels"])


def duration_s(text: str) -> float:
    """A protobuf JSON duration as Istio writes it ("17s", "1.5s")."""
    assert text.endswith("s") and not text.endswith("ms"), text
    return float(text[:-1])


@pytest.mark.parametrize("tree", sorted(TREES))
def test_base_and_overlays_render(tree: str) -> None:
    """`kubectl kustomize` renders each (a missing kubectl fails, never skips) into the four services."""
    kinds = sorted(doc["kind"] for _, doc in k8s_documents(TREES[tree]))
    assert kinds.count("Deployment") == len(SERVICES)
    assert kinds.count("Service") == len(SERVICES)
    assert kinds.count("ConfigMap") == 2
    assert sorted(k8s_deployments(TREES[tree])) == sorted(SERVICES)


@pytest.mark.usefixtures("no_network")
@pytest.mark.parametrize("tree", sorted(TREES))
@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_rendered_manifest_matches_the_kubernetes_schema(tree: str, version: str) -> None:
    checked = 0
    for where, doc in k8s_documents(TREES[tree]):
        try:
            validate(doc, version, strict=True)
        except ValidationError as exc:
            pytest.fail(f"{tree}: {where}: {exc.message}")
        checked += 1
    assert checked >= 14


@pytest.mark.usefixtures("no_network")
@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: container(d)["readinessProbe"].update(grpcc=container(d)["readinessProbe"].pop("grpc")),
        lambda d: container(d)["livenessProbe"]["grpc"].update(port="fifty"),
        lambda d: d["spec"]["template"]["spec"].update(terminationGracePeriod=20),
    ],
)
def test_schema_check_rejects_a_broken_manifest(mutate: Any) -> None:
    broken = copy.deepcopy(k8s_deployments()["tool"])
    mutate(broken)
    with pytest.raises(ValidationError):
        validate(broken, K8S_VERSIONS[0], strict=True)


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((K8S_BASE / "kustomization.yaml").read_text(encoding="utf-8"))
    assert sorted(kustomization["resources"]) == sorted(p.name for p in k8s_files())


def test_overlays_set_their_environment_and_namespace(pod_settings: Any) -> None:
    expected = {"dev": ("agentmesh-dev", "dev"), "prod": ("agentmesh", "prod")}
    for name, tree in K8S_OVERLAYS.items():
        namespaces = {doc["metadata"].get("namespace") for _, doc in k8s_documents(tree)}
        assert namespaces == {expected[name][0]}, name
        for key in SERVICES:
            assert pod_settings(key, tree).environment == expected[name][1], f"{name}: {key}"
    prod = k8s_deployments(K8S_OVERLAYS["prod"])
    assert all(":" in container(d)["image"] for d in prod.values()), "prod pins the image tag"


def test_one_deployment_and_service_per_agentmesh_service() -> None:
    deployments = k8s_deployments()
    assert sorted(deployments) == sorted(SERVICES)
    services = k8s_resources("Service")
    assert len(services) == len(SERVICES)
    compose = agentmesh_compose_services(load_compose())
    for key, deployment in deployments.items():
        # The same commands and image as docker-compose.yml.
        assert container(deployment)["args"] == compose[key]["command"]
        assert container(deployment)["image"] == compose[key]["image"]
        matching = [s for s in services.values() if s["spec"]["selector"].items() <= pod_labels(deployment).items()]
        assert len(matching) == 1, f"{key}: {len(matching)} Services select its pods"
        by_name = {p["name"]: p for p in matching[0]["spec"]["ports"]}
        assert sorted(by_name) == ["grpc", "http-metrics"]
        # The health port is for the kubelet's probes only: no Service exposes it.
        assert sorted(p["name"] for p in container(deployment)["ports"]) == ["grpc", "grpc-health", "http-metrics"]
        for name, protocol in (("grpc", "grpc"), ("http-metrics", "http")):
            assert by_name[name]["port"] == container_port(deployment, name), f"{key}: {name}"
            assert by_name[name]["targetPort"] in (name, container_port(deployment, name))
            assert by_name[name]["appProtocol"] == protocol


def test_every_deployment_has_native_grpc_probes() -> None:
    for key, deployment in k8s_deployments().items():
        c = container(deployment)
        # The plaintext health port: the service's own port requires a client certificate (mTLS).
        port = container_port(deployment, "grpc-health")
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert set(c[probe]) & {"grpc", "exec", "httpGet", "tcpSocket"} == {"grpc"}, f"{key}: {probe}"
            assert c[probe]["grpc"]["port"] == port, f"{key}: {probe} port"
        # Readiness asks for the service itself: NOT_SERVING on SIGTERM takes the pod out at once.
        for probe in ("startupProbe", "readinessProbe"):
            assert c[probe]["grpc"]["service"] == full_service_name(key), f"{key}: {probe} service"
        # Liveness asks for "" (the server), which a Redis outage leaves SERVING: only readiness
        # (the service name) follows Redis, so an outage never restarts every pod (rpc/host.py).
        assert c["livenessProbe"]["grpc"].get("service", "") == "", f"{key}: livenessProbe service"


def test_pods_listen_where_the_probes_services_and_scrapers_look(pod_settings: Any) -> None:
    services = k8s_resources("Service")
    for key, deployment in k8s_deployments().items():
        settings = pod_settings(key)
        own = settings.services.endpoint(key)
        assert own.host == "0.0.0.0" and own.port == container_port(deployment, "grpc")
        # /metrics on the HTTP listener, where the pod's prometheus.io annotations send Prometheus.
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        assert own.http_port == container_port(deployment, "http-metrics") == int(annotations["prometheus.io/port"])
        assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/path"] == "/metrics"
        assert settings.telemetry.metrics
        # Others dial this service through its headless Service with client-side round_robin.
        assert settings.client.load_balancing == "round_robin"
        target = settings.services.endpoint(key).dial_target
        assert target.startswith("dns:///"), target
        host, port = target.removeprefix("dns:///").rsplit(":", 1)
        assert host in services and services[host]["spec"]["clusterIP"] == "None"
        assert int(port) == services[host]["spec"]["ports"][0]["port"]
        assert settings.environment == "prod"


@pytest.mark.parametrize("tree", sorted(TREES))
def test_termination_grace_period_and_istio_drain_cover_the_drain(tree: str, pod_settings: Any) -> None:
    for key, deployment in k8s_deployments(TREES[tree]).items():
        server = pod_settings(key, TREES[tree]).server
        drain = server.drain_delay_s + server.grace_period_s
        pod = deployment["spec"]["template"]
        grace = pod["spec"]["terminationGracePeriodSeconds"]
        assert grace >= drain + DRAIN_MARGIN_S, f"{key}: {grace}s does not cover the {drain}s drain"
        assert server.drain_delay_s >= 3, "endpoints need a few seconds to drop a NOT_SERVING pod"
        # With Istio the sidecar must keep forwarding through the service's whole drain, and finish
        # before the kubelet's SIGKILL.
        proxy = json.loads(pod["metadata"]["annotations"]["proxy.istio.io/config"])
        istio_drain = duration_s(proxy["terminationDrainDuration"])
        assert drain <= istio_drain <= grace, f"{key}: terminationDrainDuration {istio_drain}s vs drain {drain}s"
        assert proxy["holdApplicationUntilProxyStarts"] is True


@pytest.mark.parametrize("tree", sorted(TREES))
def test_pods_read_the_generated_config_maps(tree: str) -> None:
    """Both ConfigMaps are generated with a content hash in their names, and every pod refers to them
    by those names: a changed configuration is a changed pod template, which rolls the pods."""
    generated = {name for name in k8s_resources("ConfigMap", TREES[tree])}
    assert {name.rsplit("-", 1)[0] for name in generated} == {"agentmesh-config", "agentmesh-env"}
    assert all(len(name.rsplit("-", 1)[1]) >= 8 for name in generated), generated
    for key, deployment in k8s_deployments(TREES[tree]).items():
        pod = deployment["spec"]["template"]["spec"]
        refs = {source["configMapRef"]["name"] for source in container(deployment)["envFrom"]}
        refs |= {volume["configMap"]["name"] for volume in pod["volumes"] if "configMap" in volume}
        assert refs == generated, f"{tree}: {key} refers to {refs}"


@pytest.mark.parametrize("changed", ["config/agentmesh.yaml", "config/agentmesh.env"])
def test_a_configuration_change_rolls_the_pods(tmp_path: Path, changed: str) -> None:
    base = tmp_path / "base"
    shutil.copytree(K8S_BASE, base)
    before = {key: d["spec"]["template"] for key, d in k8s_deployments(base).items()}
    with (base / changed).open("a", encoding="utf-8") as handle:
        handle.write("\n# edited\n" if changed.endswith(".yaml") else "AGENTMESH_TELEMETRY_LOG_LEVEL=DEBUG\n")
    after = {key: d["spec"]["template"] for key, d in k8s_deployments(base).items()}
    for key in SERVICES:
        assert after[key] != before[key], f"{key}: a change to {changed} leaves the pod template as it was"
    # And the new content is what the pods get.
    assert kustomize(base) != kustomize(K8S_BASE)


def test_resources_are_bounded() -> None:
    for key, deployment in k8s_deployments().items():
        resources = container(deployment)["resources"]
        for kind in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(resources[kind]), f"{key}: {kind}"


@pytest.mark.parametrize("tree", sorted(TREES))
def test_dispatcher_and_tool_scale_and_survive_disruption(tree: str) -> None:
    deployments = {d["metadata"]["name"]: (key, d) for key, d in k8s_deployments(TREES[tree]).items()}
    scaled = {}
    for hpa in k8s_resources("HorizontalPodAutoscaler", TREES[tree]).values():
        target = hpa["spec"]["scaleTargetRef"]
        assert target["kind"] == "Deployment"
        key, deployment = deployments[target["name"]]
        assert hpa["spec"]["minReplicas"] >= (1 if tree == "dev" else 2)
        assert "replicas" not in deployment["spec"], f"{key}: the HPA owns the replica count"
        scaled[key] = deployment
    assert {"dispatcher", "tool"} <= set(scaled)
    protected = set()
    for pdb in k8s_resources("PodDisruptionBudget", TREES[tree]).values():
        for key, deployment in scaled.items():
            if pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels(deployment).items():
                protected.add(key)
    assert {"dispatcher", "tool"} <= protected


def test_config_map_is_agentmesh_yaml() -> None:
    repository = (REPO / "agentmesh.yaml").read_text(encoding="utf-8")
    assert CONFIG_COPY_PATH.read_text(encoding="utf-8") == repository, "run `python -m agentmesh.dev.deployfiles`"
    for tree in TREES.values():
        assert config_map("agentmesh-config", tree)["data"]["agentmesh.yaml"] == repository


@pytest.mark.parametrize("tree", sorted(TREES))
def test_the_config_map_is_production_safe(tree: str, pod_settings: Any) -> None:
    """No demo tool: no run_shell, no tool (or allowlist entry) pointing at localhost, whatever the
    environment sets (the demo's DEMO_OPS_API_URL included)."""
    text = config_map("agentmesh-config", TREES[tree])["data"]["agentmesh.yaml"]
    assert "run_shell" not in text and "DEMO_OPS_API_URL" not in text
    for key in SERVICES:
        assert demo_findings(pod_settings(key, TREES[tree])) == [], key


def test_the_production_check_finds_the_demo_tools(container_settings: Any) -> None:
    """The check above is not vacuous: the demo overlay fails it on every count."""
    settings = container_settings({}, [REPO / "agentmesh.yaml", REPO / "agentmesh.demo.yaml"])
    found = demo_findings(settings)
    assert "tool run_shell" in found and "agent ops offered run_shell" in found
    assert any(f.startswith("tool restart_service -> http://127.0.0.1") for f in found)
    assert any(f.startswith("http_allowlist http://127.0.0.1") for f in found)


def test_keys_come_from_secret_references_only() -> None:
    assert not k8s_resources("Secret"), "no Secret with values is committed; see deploy/k8s/README.md"
    for key, deployment in k8s_deployments().items():
        env = container(deployment).get("env") or []
        by_name = {item["name"]: item for item in env}
        for name in ("AGENTMESH_AUTH_KEY", "AGENTMESH_REDIS_URL"):
            assert "secretKeyRef" in by_name[name]["valueFrom"], f"{key}: {name}"
        for item in env:
            if any(word in item["name"] for word in ("KEY", "SECRET", "TOKEN", "PASSWORD")):
                assert "value" not in item, f"{key}: {item['name']} is written into the manifest"
    provider_env = {item["name"] for item in container(k8s_deployments()["provider"])["env"]}
    assert {"OPENAI_API_KEY", "ANTHROPIC_API_KEY"} <= provider_env
    for key in ("dispatcher", "context", "tool"):
        names = {item["name"] for item in container(k8s_deployments()[key])["env"]}
        assert not names & {"OPENAI_API_KEY", "ANTHROPIC_API_KEY"}, f"{key} must not hold provider keys"


def test_pods_run_as_the_images_non_root_user() -> None:
    (user,) = [i.value[0] for i in final_stage(dockerfile_instructions()) if i.cmd == "USER"]
    uid = int(user.split(":")[0])
    for key, deployment in k8s_deployments().items():
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == uid, key
        assert pod["automountServiceAccountToken"] is False
        security = container(deployment)["securityContext"]
        assert security["allowPrivilegeEscalation"] is False and security["capabilities"]["drop"] == ["ALL"]
        if security.get("readOnlyRootFilesystem"):
            writable = {m["mountPath"] for m in container(deployment)["volumeMounts"] if not m.get("readOnly")}
            env = k8s_env(deployment, SECRETS)
            assert "/tmp" in writable, key
            assert str(Path(env["AGENTMESH_TELEMETRY_SPAN_FILE"]).parent) in writable, key


def test_env_config_map_targets_every_service() -> None:
    env = config_map("agentmesh-env")["data"]
    assert sorted(services_json(env)) == sorted(SERVICES)
    assert env["OTEL_EXPORTER_OTLP_PROTOCOL"] in ("grpc", "http/protobuf")
