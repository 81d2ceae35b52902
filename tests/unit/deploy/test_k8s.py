"""deploy/k8s: valid against the Kubernetes schemas (offline, strict), probed over native gRPC,
drained within the grace period, and consistent with the configuration the pods load."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_validate.utils import ValidationError, validate  # type: ignore[import-untyped]

from agentmesh.deployfiles import CONFIGMAP_PATH, render_configmap
from tests.unit.deploy.manifests import (
    K8S_DIR,
    REPO,
    SERVICES,
    agentmesh_compose_services,
    dockerfile_instructions,
    final_stage,
    full_service_name,
    k8s_deployments,
    k8s_documents,
    k8s_env,
    k8s_files,
    k8s_resources,
    load_compose,
    services_json,
)

# Native gRPC probes are GA since 1.27; validate against it and the newest schemas shipped.
K8S_VERSIONS = ("1.27", "1.37")
SECRETS = {"agentmesh-secrets/auth-key": "k8s-test-key-" + "s" * 32, "agentmesh-secrets/redis-url": "redis://r:6379/0"}
DRAIN_MARGIN_S = 2


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(only)


def pod_labels(deployment: dict[str, Any]) -> dict[str, str]:
    return dict(deployment["spec"]["template"]["metadata"]["labels"])


@pytest.fixture
def pod_settings(container_settings: Any, tmp_path: Path) -> Any:
    """`pod_settings(key)`: the Settings a pod of that Deployment loads (its env + mounted config)."""

    def load(key: str) -> Any:
        deployment = k8s_deployments()[key]
        env = k8s_env(deployment, SECRETS)
        mounts = {m["mountPath"]: m["name"] for m in container(deployment)["volumeMounts"]}
        volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
        config_dir = str(Path(env["AGENTMESH_CONFIG"]).parent)
        config_map = k8s_resources("ConfigMap")[volumes[mounts[config_dir]]["configMap"]["name"]]
        config_file = tmp_path / Path(env["AGENTMESH_CONFIG"]).name
        config_file.write_text(config_map["data"][config_file.name], encoding="utf-8")
        return container_settings(env, config_file)

    return load


@pytest.mark.usefixtures("no_network")
@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_manifest_matches_the_kubernetes_schema(version: str) -> None:
    checked = 0
    for path, doc in k8s_documents():
        try:
            validate(doc, version, strict=True)
        except ValidationError as exc:
            pytest.fail(f"{path.name}: {doc['kind']}/{doc['metadata']['name']}: {exc.message}")
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
    kustomization = yaml.safe_load((K8S_DIR / "kustomization.yaml").read_text(encoding="utf-8"))
    assert sorted(kustomization["resources"]) == sorted(p.name for p in k8s_files())


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
        (port,) = container(deployment)["ports"]
        matching = [s for s in services.values() if s["spec"]["selector"].items() <= pod_labels(deployment).items()]
        assert len(matching) == 1, f"{key}: {len(matching)} Services select its pods"
        (svc_port,) = matching[0]["spec"]["ports"]
        assert svc_port["port"] == port["containerPort"] and svc_port["targetPort"] in (
            port["name"],
            port["containerPort"],
        )
        assert svc_port["appProtocol"] == "grpc"


def test_every_deployment_has_native_grpc_probes() -> None:
    for key, deployment in k8s_deployments().items():
        c = container(deployment)
        (port,) = c["ports"]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert set(c[probe]) & {"grpc", "exec", "httpGet", "tcpSocket"} == {"grpc"}, f"{key}: {probe}"
            assert c[probe]["grpc"]["port"] == port["containerPort"], f"{key}: {probe} port"
        # Readiness asks for the service itself: NOT_SERVING on SIGTERM takes the pod out at once.
        for probe in ("startupProbe", "readinessProbe"):
            assert c[probe]["grpc"]["service"] == full_service_name(key), f"{key}: {probe} service"
        # Liveness asks for "" (the server), which a Redis outage leaves SERVING: only readiness
        # (the service name) follows Redis, so an outage never restarts every pod (rpc/host.py).
        assert c["livenessProbe"]["grpc"].get("service", "") == "", f"{key}: livenessProbe service"


def test_pods_listen_where_the_probes_and_services_look(pod_settings: Any) -> None:
    services = k8s_resources("Service")
    for key, deployment in k8s_deployments().items():
        settings = pod_settings(key)
        own = settings.services.endpoint(key)
        assert own.host == "0.0.0.0" and own.port == container(deployment)["ports"][0]["containerPort"]
        # Others dial this service through its headless Service with client-side round_robin.
        assert settings.client.load_balancing == "round_robin"
        target = settings.services.endpoint(key).dial_target
        assert target.startswith("dns:///"), target
        host, port = target.removeprefix("dns:///").rsplit(":", 1)
        assert host in services and services[host]["spec"]["clusterIP"] == "None"
        assert int(port) == services[host]["spec"]["ports"][0]["port"]
        assert settings.environment == "prod"


def test_termination_grace_period_covers_the_drain(pod_settings: Any) -> None:
    for key, deployment in k8s_deployments().items():
        server = pod_settings(key).server
        drain = server.drain_delay_s + server.grace_period_s
        grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert grace >= drain + DRAIN_MARGIN_S, f"{key}: {grace}s does not cover the {drain}s drain"
        assert server.drain_delay_s >= 3, "endpoints need a few seconds to drop a NOT_SERVING pod"


def test_resources_are_bounded() -> None:
    for key, deployment in k8s_deployments().items():
        resources = container(deployment)["resources"]
        for kind in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(resources[kind]), f"{key}: {kind}"


def test_dispatcher_and_tool_scale_and_survive_disruption() -> None:
    deployments = {d["metadata"]["name"]: (key, d) for key, d in k8s_deployments().items()}
    scaled = {}
    for hpa in k8s_resources("HorizontalPodAutoscaler").values():
        target = hpa["spec"]["scaleTargetRef"]
        assert target["kind"] == "Deployment"
        key, deployment = deployments[target["name"]]
        assert hpa["spec"]["minReplicas"] >= 2
        assert "replicas" not in deployment["spec"], f"{key}: the HPA owns the replica count"
        scaled[key] = deployment
    assert {"dispatcher", "tool"} <= set(scaled)
    protected = set()
    for pdb in k8s_resources("PodDisruptionBudget").values():
        for key, deployment in scaled.items():
            if pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels(deployment).items():
                protected.add(key)
    assert {"dispatcher", "tool"} <= protected


def test_config_map_is_agentmesh_yaml() -> None:
    config_map = k8s_resources("ConfigMap")["agentmesh-config"]
    assert config_map["data"]["agentmesh.yaml"] == (REPO / "agentmesh.yaml").read_text(encoding="utf-8")
    expected = render_configmap((REPO / "agentmesh.yaml").read_text(encoding="utf-8"))
    assert CONFIGMAP_PATH.read_text(encoding="utf-8") == expected, "run `python -m agentmesh.deployfiles`"


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
    env = k8s_resources("ConfigMap")["agentmesh-env"]["data"]
    assert sorted(services_json(env)) == sorted(SERVICES)
