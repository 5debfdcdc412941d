"""The kinds the simulated API server serves: built-ins, and the CRDs of the integrated job operators.

As on a real cluster, the operators' kinds exist only through their CustomResourceDefinitions:
the simulated server installs one per kind in ``OPERATORS`` when it starts (``crd_for``), so
``kubectl get crd`` lists them, a test can start a cluster without some of them, and deleting a
CRD stops serving its kind (and deletes its objects) as the real server does.
"""

from __future__ import annotations

from admission.sim.server import rbac
from admission.sim.server.objects import Resource

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False, short_names=("ns",))
CRDS = Resource(
    "apiextensions.k8s.io",
    "v1",
    "customresourcedefinitions",
    "CustomResourceDefinition",
    namespaced=False,
    short_names=("crd",),
)

API_SERVICES = Resource("apiregistration.k8s.io", "v1", "apiservices", "APIService", namespaced=False)
SUBJECT_ACCESS_REVIEWS = Resource(
    "authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", namespaced=False, has_status=False
)

PRIORITY_CLASSES = Resource(
    "scheduling.k8s.io",
    "v1",
    "priorityclasses",
    "PriorityClass",
    namespaced=False,
    has_status=False,
    short_names=("pc",),
)
SYSTEM_PRIORITY_CLASSES = {"system-cluster-critical": 2000000000, "system-node-critical": 2000001000}

BUILT_IN = (
    NAMESPACES,
    Resource("", "v1", "nodes", "Node", namespaced=False, short_names=("no",)),
    Resource("", "v1", "pods", "Pod", short_names=("po",)),
    Resource("", "v1", "podtemplates", "PodTemplate", has_status=False),
    Resource("", "v1", "events", "Event", has_status=False, short_names=("ev",)),
    Resource("", "v1", "secrets", "Secret", has_status=False),
    Resource("", "v1", "configmaps", "ConfigMap", has_status=False, short_names=("cm",)),
    Resource("events.k8s.io", "v1", "events", "Event", has_status=False),
    Resource("coordination.k8s.io", "v1", "leases", "Lease", has_status=False),
    Resource("batch", "v1", "jobs", "Job"),
    Resource("batch", "v1", "cronjobs", "CronJob", short_names=("cj",)),
    Resource("apps", "v1", "deployments", "Deployment", short_names=("deploy",)),
    Resource("apps", "v1", "replicasets", "ReplicaSet", short_names=("rs",)),
    Resource("apps", "v1", "statefulsets", "StatefulSet", short_names=("sts",)),
    PRIORITY_CLASSES,
    # Dynamic Resource Allocation (GA in 1.34): served, validated, stored; no claim controller or
    # device allocation yet (docs/simulated-cluster.md)
    Resource("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", namespaced=False, has_status=False),
    Resource("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", has_status=False),
    Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim"),
    Resource("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", namespaced=False, has_status=False),
    Resource(
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration",
        namespaced=False,
        has_status=False,
    ),
    Resource(
        "admissionregistration.k8s.io",
        "v1",
        "validatingwebhookconfigurations",
        "ValidatingWebhookConfiguration",
        namespaced=False,
        has_status=False,
    ),
    CRDS,
    API_SERVICES,
    # answered from RBAC's objects (``rbac.subject_access_review``), never stored
    SUBJECT_ACCESS_REVIEWS,
    *rbac.KINDS,
)

# Custom resources of the operators a GPU cluster runs (their CRDs installed at start by default).
OPERATORS = (
    Resource("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob"),
    Resource("kubeflow.org", "v1", "tfjobs", "TFJob"),
    Resource("kubeflow.org", "v2beta1", "mpijobs", "MPIJob"),
    Resource("kubeflow.org", "v1", "jaxjobs", "JAXJob"),
    Resource("kubeflow.org", "v1", "xgboostjobs", "XGBoostJob"),
    Resource("kubeflow.org", "v1", "paddlejobs", "PaddleJob"),
    Resource("ray.io", "v1", "rayjobs", "RayJob"),
    Resource("ray.io", "v1", "rayclusters", "RayCluster"),
    Resource("ray.io", "v1", "rayservices", "RayService"),
    Resource("trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob"),
    Resource("trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes", "ClusterTrainingRuntime", namespaced=False),
    Resource("trainer.kubeflow.org", "v1alpha1", "trainingruntimes", "TrainingRuntime"),
    Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"),
    Resource("sparkoperator.k8s.io", "v1beta2", "sparkapplications", "SparkApplication", short_names=("sparkapp",)),
    Resource("workload.codeflare.dev", "v1beta2", "appwrappers", "AppWrapper", short_names=("aw",)),
    Resource("autoscaling.x-k8s.io", "v1", "provisioningrequests", "ProvisioningRequest"),
    # serving operators (``admission.sim.operators.serving``)
    Resource("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet", short_names=("lws",)),
    Resource("serving.kserve.io", "v1beta1", "inferenceservices", "InferenceService", short_names=("isvc",)),
)

CUSTOM = OPERATORS
ALL = BUILT_IN + OPERATORS  # every kind the simulated cluster's controllers know


def crd_for(res: Resource) -> dict[str, object]:
    """The CustomResourceDefinition that serves ``res`` (a structural schema that keeps every field:
    the operators' own schemas are large, and validating them is their webhooks' business)."""
    open_object = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    version: dict[str, object] = {
        "name": res.version,
        "served": True,
        "storage": True,
        "schema": {
            "openAPIV3Schema": {
                "type": "object",
                "properties": {"spec": open_object, "status": open_object},
            }
        },
    }
    if res.has_status:
        version["subresources"] = {"status": {}}
    names: dict[str, object] = {
        "plural": res.plural,
        "singular": res.kind.lower(),
        "kind": res.kind,
        "listKind": f"{res.kind}List",
    }
    if res.short_names:
        names["shortNames"] = list(res.short_names)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{res.plural}.{res.group}"},
        "spec": {
            "group": res.group,
            "names": names,
            "scope": "Namespaced" if res.namespaced else "Cluster",
            "versions": [version],
        },
    }


def printer_columns(crd: dict[str, object]) -> dict[str, list[dict[str, object]]]:
    """Per served version of a CRD, its ``additionalPrinterColumns`` (for ``kubectl get``)."""
    spec = crd.get("spec")
    out: dict[str, list[dict[str, object]]] = {}
    for version in (spec.get("versions") or []) if isinstance(spec, dict) else []:
        if isinstance(version, dict):
            out[str(version.get("name"))] = list(version.get("additionalPrinterColumns") or [])
    return out


def from_crd(crd: dict[str, object]) -> list[tuple[Resource, dict[str, object] | None]]:
    """The resources a CustomResourceDefinition serves: one per served version, with its schema."""
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        return []
    names = spec.get("names") or {}
    assert isinstance(names, dict)
    out: list[tuple[Resource, dict[str, object] | None]] = []
    for version in spec.get("versions") or []:
        if not isinstance(version, dict) or not version.get("served", True):
            continue
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        has_status = "status" in ((version.get("subresources") or {}) or {})
        res = Resource(
            str(spec.get("group")),
            str(version.get("name")),
            str(names.get("plural")),
            str(names.get("kind")),
            namespaced=spec.get("scope", "Namespaced") == "Namespaced",
            has_status=has_status,
            short_names=tuple(names.get("shortNames") or ()),
        )
        out.append((res, schema if isinstance(schema, dict) else None))
    return out
