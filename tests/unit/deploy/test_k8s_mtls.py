"""mTLS in the Kubernetes manifests (issue 22): the base turns it on with the certificate from the
agentmesh-tls Secret (cert-manager example in deploy/k8s/cert-manager), probes use the plaintext health
port, and the Istio overlay turns the services' own mTLS off and makes the mesh's STRICT."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes_validate.utils import validate  # type: ignore[import-untyped]

from tests.unit.deploy.manifests import K8S_BASE, K8S_DIR, K8S_OVERLAYS, container_port, k8s_deployments, kustomize
from tests.unit.deploy.test_k8s import K8S_VERSIONS, container

ISTIO = K8S_DIR / "overlays" / "istio"
CERT_MANAGER = K8S_DIR / "cert-manager"


def _tls_volume(deployment: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    mounts = {m["name"]: m["mountPath"] for m in container(deployment)["volumeMounts"]}
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    return mounts["tls"], volumes["tls"]


@pytest.mark.parametrize("tree", [K8S_BASE, K8S_OVERLAYS["prod"]], ids=["base", "prod"])
def test_the_base_runs_mtls_with_the_secrets_certificate_and_probes_the_health_port(
    tree: Path, pod_settings: Any
) -> None:
    for key, deployment in k8s_deployments(tree).items():
        settings = pod_settings(key, tree)
        mount, volume = _tls_volume(deployment)
        assert volume["secret"]["secretName"] == "agentmesh-tls"
        tls = settings.tls
        assert tls.enabled and tls.require_client_cert
        for path, name in ((tls.ca_file, "ca.crt"), (tls.cert_file, "tls.crt"), (tls.key_file, "tls.key")):
            assert path == Path(mount) / name, key
        assert settings.server.health_port == container_port(deployment, "grpc-health")
        probes = [container(deployment)[p]["grpc"]["port"] for p in ("startupProbe", "readinessProbe", "livenessProbe")]
        assert set(probes) == {settings.server.health_port} != {container_port(deployment, "grpc")}


def test_the_istio_overlay_leaves_mtls_to_the_mesh_in_strict_mode(pod_settings: Any) -> None:
    docs = list(kustomize(ISTIO))
    (peer,) = [d for d in docs if d["kind"] == "PeerAuthentication"]
    assert peer["apiVersion"] == "security.istio.io/v1" and peer["spec"]["mtls"]["mode"] == "STRICT"
    assert peer["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/part-of": "agentmesh"}
    deployments = k8s_deployments(ISTIO)
    assert sorted(deployments) == ["context", "dispatcher", "provider", "tool"]
    for key, deployment in deployments.items():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert labels["app.kubernetes.io/part-of"] == "agentmesh"
        settings = pod_settings(key, ISTIO)
        assert not settings.tls.enabled, key
        # No Secret needed: the volume is optional, and the probes still find the health port.
        assert _tls_volume(deployment)[1]["secret"]["optional"] is True
        assert settings.server.health_port == container(deployment)["livenessProbe"]["grpc"]["port"]
    for doc in docs:  # the Kubernetes kinds against the schema (Istio's CRD is not in it)
        if doc["kind"] != "PeerAuthentication":
            validate(doc, K8S_VERSIONS[-1], strict=True)


def test_the_cert_manager_certificate_names_every_service_and_fills_the_mounted_secret() -> None:
    docs = {(d["kind"], d["metadata"]["name"]): d for d in kustomize(CERT_MANAGER)}
    certificate = docs[("Certificate", "agentmesh-tls")]["spec"]
    assert certificate["secretName"] == "agentmesh-tls"
    assert {"server auth", "client auth"} <= set(certificate["usages"])
    assert docs[("Issuer", certificate["issuerRef"]["name"])]["spec"]["ca"]["secretName"] == "agentmesh-ca"
    for key in k8s_deployments():
        service = f"agentmesh-{key}"
        assert service in certificate["dnsNames"] and f"{service}.agentmesh.svc" in certificate["dnsNames"]
