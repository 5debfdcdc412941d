"""``manifests/``: what a platform team installs. Rendered with ``kubectl kustomize`` (when on
PATH), every built-in object validated strictly for Kubernetes 1.30 and 1.33, and the install's
promises checked: least privilege, hardened pods, webhooks that fail closed, fast and never
reach kube-system or Turnstile's own namespace."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from admission.jobs import INTEGRATIONS
from admission.webhook import configurations

ROOT = Path(__file__).resolve().parents[2] / "manifests"
KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl (its built-in kustomize) is not on PATH")
INSTALLS = ["", "overlays/cert-manager", "overlays/prometheus"]
CUSTOM = {"cert-manager.io/v1", "monitoring.coreos.com/v1"}  # CRDs of the overlays' operators


def render(install: str) -> list[dict[str, Any]]:
    assert KUBECTL is not None
    out = subprocess.run(
        [KUBECTL, "kustomize", str(ROOT / install)], check=True, capture_output=True, text=True, timeout=60
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


@pytest.mark.parametrize("version", ["1.30.0", "1.33.0"])
@pytest.mark.parametrize("install", INSTALLS)
def test_every_object_validates_strictly(install: str, version: str) -> None:
    objects = render(install)
    assert objects
    for obj in objects:
        if obj["apiVersion"] in CUSTOM:
            assert obj["metadata"].get("name") and obj.get("spec"), obj
            continue
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} is invalid for Kubernetes {version}: {exc}")


def test_the_default_install_has_everything_a_production_install_needs() -> None:
    objects = render("")
    kinds = sorted({o["kind"] for o in objects})
    assert kinds == sorted(
        [
            "APIService",
            "ClusterRole",
            "ClusterRoleBinding",
            "CustomResourceDefinition",
            "Deployment",
            "MutatingWebhookConfiguration",
            "Namespace",
            "NetworkPolicy",
            "PodDisruptionBudget",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount",
            "ValidatingWebhookConfiguration",
        ]
    )
    cluster_scoped = ("Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "APIService")
    namespaced = [o for o in objects if o["kind"] not in cluster_scoped]
    namespaced = [o for o in namespaced if "WebhookConfiguration" not in o["kind"]]
    # one object outside turnstile-system: the RoleBinding that reads the API server's front-proxy settings
    (outside,) = [o for o in namespaced if o["metadata"].get("namespace") != "turnstile-system"]
    assert outside["kind"] == "RoleBinding" and outside["metadata"]["namespace"] == "kube-system"
    assert outside["roleRef"]["name"] == "extension-apiserver-authentication-reader"
    assert all("namespace" not in o["metadata"] for o in objects if o["kind"] in cluster_scoped)


@pytest.mark.parametrize("version", ["1.30.0", "1.33.0"])
def test_the_database_secret_template_is_valid_and_outside_the_kustomization(version: str) -> None:
    (secret,) = [d for d in yaml.safe_load_all((ROOT / "database-secret.yaml").read_text()) if d]
    kubernetes_validate.validate(secret, version, strict=True)
    assert secret["metadata"] == {"name": "turnstile-database", "namespace": "turnstile-system"}
    assert secret["stringData"]["url"].startswith("postgresql")
    assert not by_kind(render(""), "Secret"), "applying the install must never overwrite the credentials"


def test_rbac_is_least_privilege() -> None:
    objects = render("")
    for role in by_kind(objects, "ClusterRole") + by_kind(objects, "Role"):
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in rule.get(field, []), f"{role['kind']} {role['metadata']['name']}: wildcard {field}"
    cluster_rules = [r for role in by_kind(objects, "ClusterRole") for r in role["rules"]]
    assert not any("secrets" in r["resources"] for r in cluster_rules), "no cluster-wide access to Secrets"
    # plain Pods: watched, ungated and deleted; PriorityClasses read; Nodes read (topology-aware placement)
    for group, resource, verbs in (
        ("", "pods", {"get", "list", "watch", "patch", "delete"}),
        ("scheduling.k8s.io", "priorityclasses", {"get", "list", "watch"}),
        ("resource.k8s.io", "resourceclaimtemplates", {"get", "list", "watch"}),
        ("", "nodes", {"get", "list", "watch"}),
    ):
        rules = [r for r in cluster_rules if group in r["apiGroups"] and resource in r["resources"]]
        assert rules and verbs <= set(rules[0]["verbs"]), resource
    # ... and enough: every integrated kind can be watched and patched; webhook configurations
    # only by name, for the CA bundle.
    for integration in INTEGRATIONS:
        group = integration.ref.api_version.rpartition("/")[0]
        rules = [r for r in cluster_rules if group in r["apiGroups"] and integration.ref.plural in r["resources"]]
        assert rules and {"get", "list", "watch", "patch"} <= set(rules[0]["verbs"]), integration.ref.plural
        status = f"{integration.ref.plural}/status"  # the enactor clears status.startTime
        rules = [r for r in cluster_rules if group in r["apiGroups"] and status in r["resources"]]
        assert rules and "patch" in rules[0]["verbs"], status
    # the ProvisioningRequest admission check (admission.controller.features.checks): watched, made, deleted
    for group, resource, verbs in (
        ("autoscaling.x-k8s.io", "provisioningrequests", {"get", "list", "watch", "create", "delete"}),
        ("", "podtemplates", {"create", "delete"}),
        # which kinds the cluster serves (read only): an operator's CRD installed later is noticed
        ("apiextensions.k8s.io", "customresourcedefinitions", {"get", "list", "watch"}),
    ):
        rules = [r for r in cluster_rules if group in r["apiGroups"] and resource in r["resources"]]
        assert rules and verbs <= set(rules[0]["verbs"]), resource
    crds = [r for r in cluster_rules if "apiextensions.k8s.io" in r["apiGroups"]]
    assert all(set(r["verbs"]) <= {"get", "list", "watch"} for r in crds), "CRDs are only read"
    for r in cluster_rules:
        if "admissionregistration.k8s.io" in r["apiGroups"]:
            assert r.get("resourceNames") and set(r["verbs"]) <= {"get", "patch"}
    (role,) = by_kind(objects, "Role")
    assert {tuple(r["verbs"]) for r in role["rules"]} == {("create",), ("get", "update")}


def test_the_controller_pods_are_hardened_and_highly_available() -> None:
    (deployment,) = by_kind(render(""), "Deployment")
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    assert spec["replicas"] >= 2
    assert pod["affinity"]["podAntiAffinity"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"] and security["runAsNonRoot"] is True
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert {"cpu", "memory"} <= set(container["resources"]["requests"]) and container["resources"]["limits"]["memory"]
    env = {e["name"]: e for e in container["env"]}
    assert env["TURNSTILE_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["name"] == "turnstile-database"
    assert env["TURNSTILE_CERT_SECRET"]["value"] == "turnstile-system/turnstile-webhook-tls"
    (pdb,) = by_kind(render(""), "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1


def test_webhooks_are_what_the_code_registers_and_fail_closed_only_for_queued_jobs() -> None:
    rendered = by_kind(render(""), "MutatingWebhookConfiguration") + by_kind(
        render(""), "ValidatingWebhookConfiguration"
    )
    client = {"service": {"name": "turnstile-webhook", "namespace": "turnstile-system", "port": 443}}
    ours = configurations.configurations(client, None, integrations=INTEGRATIONS)
    assert {c["metadata"]["name"]: c["webhooks"] for c in rendered} == {
        c["metadata"]["name"]: c["webhooks"] for c in ours
    }, "manifests/base/webhooks.yaml is written by admission.webhook.configurations.configurations"
    for config in rendered:
        for hook in config["webhooks"]:
            assert hook["sideEffects"] == "None" and hook["timeoutSeconds"] <= 10
            assert hook["clientConfig"]["service"]["name"] == "turnstile-webhook"
            if hook["name"].endswith(".deletion.turnstile.dev"):
                # deletions of queue objects, only to audit who deleted: never refused, even during an outage
                (rule,) = hook["rules"]
                assert rule["operations"] == ["DELETE"] and hook["failurePolicy"] == "Ignore"
                assert config["kind"] == "ValidatingWebhookConfiguration"
                continue
            if hook["name"].endswith(".workloads.turnstile.dev"):
                # Kueue's Workload objects only (Turnstile's projection): creates and edits, never deletions
                (rule,) = hook["rules"]
                assert (rule["apiGroups"], rule["resources"]) == (["kueue.x-k8s.io"], ["workloads"])
                assert rule["operations"] == ["CREATE", "UPDATE"] and config["kind"] == "ValidatingWebhookConfiguration"
                assert "namespaceSelector" not in hook and "objectSelector" not in hook
                continue
            if hook["name"].endswith(".config.turnstile.dev"):
                # Kueue's queue objects, all of them: answered without the database or a configuration
                (rule,) = hook["rules"]
                assert rule["apiGroups"] == ["kueue.x-k8s.io"] and "clusterqueues" in rule["resources"]
                assert "namespaceSelector" not in hook and "objectSelector" not in hook
                continue
            (objects,) = hook["objectSelector"]["matchExpressions"]
            namespaces = hook["namespaceSelector"]["matchExpressions"]
            system = {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": ["kube-system", "turnstile-system"],
            }
            assert system in namespaces, hook["name"]
            conditions = {c["name"] for c in hook["matchConditions"]}
            # never a job's own pods, never a pod update that changes no gate or label (finalizer removal)
            assert {"not-a-jobs-pod", "pod-update-that-matters"} <= conditions, hook["name"]
            labelled = objects == {"key": "kueue.x-k8s.io/queue-name", "operator": "Exists"}
            if labelled:
                assert hook["failurePolicy"] == "Fail" and namespaces == [system]
                continue
            # unlabelled objects: only in namespaces whose turnstile.dev/webhook label (the leader's, so a
            # re-applied manifest resets nothing) says so, and under Fail only what Turnstile must hold
            (scope,) = [e for e in namespaces if e["key"] == configurations.SCOPE_LABEL]
            assert scope["operator"] == "In", hook["name"]
            if hook["failurePolicy"] == "Ignore":
                assert hook["name"] == "vjob.advised.turnstile.dev" and scope["values"] == [configurations.ADVISED]
            elif hook["name"].endswith(".managed.turnstile.dev"):
                assert scope["values"] == [configurations.EXTENDED] and "asks-for-an-extended-resource" in conditions
            else:
                assert hook["name"].endswith(".defaulted.turnstile.dev") and scope["values"] == [configurations.ALL]


def test_the_cert_manager_overlay_hands_certificates_to_cert_manager() -> None:
    objects = render("overlays/cert-manager")
    (certificate,) = by_kind(objects, "Certificate")
    assert certificate["spec"]["secretName"] == "turnstile-webhook-tls"
    assert "turnstile-webhook.turnstile-system.svc" in certificate["spec"]["dnsNames"]
    (deployment,) = by_kind(objects, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "TURNSTILE_CERT_SECRET" not in {e["name"] for e in container["env"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/tmp/turnstile/certs"]["readOnly"] is True
    for config in by_kind(objects, "MutatingWebhookConfiguration") + by_kind(objects, "ValidatingWebhookConfiguration"):
        assert (
            config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "turnstile-system/turnstile-webhook"
        )


def test_the_prometheus_overlay_scrapes_the_metrics_service() -> None:
    objects = render("overlays/prometheus")
    (monitor,) = by_kind(objects, "ServiceMonitor")
    selector = monitor["spec"]["selector"]["matchLabels"]
    services = [
        s for s in by_kind(objects, "Service") if selector.items() <= (s["metadata"].get("labels") or {}).items()
    ]
    assert [s["metadata"]["name"] for s in services] == ["turnstile-metrics"]
    assert monitor["spec"]["endpoints"][0]["port"] in {p["name"] for p in services[0]["spec"]["ports"]}


def test_api_services_are_what_the_code_registers_and_route_to_the_webhook_service() -> None:
    rendered = {o["metadata"]["name"]: o["spec"] for o in by_kind(render(""), "APIService")}
    service = {"name": "turnstile-webhook", "namespace": "turnstile-system", "port": 443}
    ours = {o["metadata"]["name"]: o["spec"] for o in configurations.api_services(service)}
    assert rendered == ours, "manifests/base/apiservices.yaml is written by admission.webhook.registration.api_services"
    (svc,) = [s for s in by_kind(render(""), "Service") if s["metadata"]["name"] == "turnstile-webhook"]
    assert any(p["port"] == 443 for p in svc["spec"]["ports"])
    cert_manager = by_kind(render("overlays/cert-manager"), "APIService")
    assert all(o["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] for o in cert_manager)
