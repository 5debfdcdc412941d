"""Turnstile's webhook configurations as the API server reads them: which objects each webhook is
sent, with which failure policy, and the APIService objects of the aggregated APIs. Pure:
``admission.webhook.registration`` publishes them and keeps them so.

**Scope.** With ``failurePolicy: Fail``, every object a webhook is asked about is refused while
Turnstile cannot answer. So only what Turnstile must queue or hold goes through the failing
webhooks, and an outage refuses nothing else:

1. ``*.queued.turnstile.dev``: objects labelled ``kueue.x-k8s.io/queue-name``, in every namespace
   but ``kube-system`` and Turnstile's own (failurePolicy Fail);
2. ``*.defaulted.turnstile.dev``: unlabelled objects in namespaces labelled
   ``turnstile.dev/webhook: all``: those with a LocalQueue named ``default`` (their unlabelled jobs
   are queued there) and the managed namespaces when every covered resource is managed
   (``TURNSTILE_MANAGED_RESOURCES=all``) (failurePolicy Fail);
3. ``*.managed.turnstile.dev``: unlabelled objects that ask for an extended resource (a GPU, a MIG
   slice: any ``vendor/name`` but ``kubernetes.io/``), in namespaces labelled
   ``turnstile.dev/webhook: extended``: the managed ones (manageJobsWithoutQueueName), held there
   (failurePolicy Fail). A CPU-only Job, Deployment or ``kubectl run`` is not sent; the other kinds
   (operators' jobs) are, whatever they ask;
4. ``vjob.advised.turnstile.dev`` (validating only, failurePolicy Ignore): unlabelled objects in
   namespaces labelled ``turnstile.dev/webhook: advised`` (they have LocalQueues but manage nothing
   unlabelled), for the warning about a GPU job that is not queued;
5. ``*.config.turnstile.dev``: Kueue's queue objects (``kueue.x-k8s.io/v1beta2``), all of them
   (``admission.webhook.queue_objects``: validated as ``turnstile apply`` validates, the editor
   stamped for the audit). They need no database, so Fail never blocks an edit while it is away;
   ``vqueue.deletion.turnstile.dev`` (Ignore) hears their deletions, to audit who deleted.
6. ``vworkload.workloads.turnstile.dev``: Kueue's Workload objects (the leader's projection,
   ``admission.webhook.workload_objects``): a person may change only ``spec.active``, written as a
   stop/resume request (Fail: while the database is away that edit is refused, nothing else is).

Objects whose controller is a job kind Turnstile integrates (a Job's pods, the operators', a JobSet's
Jobs, an AppWrapper's components, a RayService's RayCluster) and the pods of a SparkApplication or
an AppWrapper (known by their operators' labels) are never sent (``matchConditions``): their parent
is what is queued, and an outage must not stop a Job from making or finishing its pods. A pod UPDATE
is sent only when it changes the pod's scheduling gates or labels (what Turnstile checks), so the Job
controller's removal of its tracking finalizer never is.

The webhooks' selectors are fixed; the namespaces are chosen by the ``turnstile.dev/webhook`` label,
which the leading replica keeps on each namespace (``admission.webhook.registration``). So re-applying the
manifests (an upgrade, GitOps) resets nothing: the scope lives on the namespaces. A job created in
the moment before its namespace is labelled runs unqueued only until the controller sees it: its
informer queues it, and the enactor suspends it for its turn.
"""

from __future__ import annotations

import base64
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from admission.jobs import owners_of
from admission.jobs.base import Integration
from admission.policy import Policy
from queues import managed
from queues.kueue import api, crds, workload_crd
from queues.model import Config
from queues.podsets import appwrappers, jobs, sparkapps
from queues.selectors import LabelSelector

MUTATE, VALIDATE = "turnstile-mutate", "turnstile-validate"


PLURALS = {MUTATE: "mutatingwebhookconfigurations", VALIDATE: "validatingwebhookconfigurations"}


# The APIServices served on the webhook's port (``admission.aggregated``): their caBundle is kept too.
API_SERVICES = ("v1alpha1.turnstile.dev", "v1beta2.visibility.kueue.x-k8s.io", "v1beta1.visibility.kueue.x-k8s.io")


NAME_LABEL = "kubernetes.io/metadata.name"


SCOPE_LABEL = "turnstile.dev/webhook"  # on a namespace (the leader's): which unlabelled objects are sent


ALL, EXTENDED, ADVISED = "all", "extended", "advised"  # its values


# webhook name -> (configuration, path, scope, failurePolicy)
HOOKS: dict[str, tuple[str, str, str, str]] = {
    "mjob.queued.turnstile.dev": (MUTATE, "/mutate", "queued", "Fail"),
    "mjob.defaulted.turnstile.dev": (MUTATE, "/mutate", ALL, "Fail"),
    "vjob.queued.turnstile.dev": (VALIDATE, "/validate", "queued", "Fail"),
    "vjob.defaulted.turnstile.dev": (VALIDATE, "/validate", ALL, "Fail"),
    "vjob.advised.turnstile.dev": (VALIDATE, "/validate", ADVISED, "Ignore"),
    # unlabelled objects asking for an extended resource in the managed namespaces
    "mjob.managed.turnstile.dev": (MUTATE, "/mutate", EXTENDED, "Fail"),
    "vjob.managed.turnstile.dev": (VALIDATE, "/validate", EXTENDED, "Fail"),
    # Kueue's queue objects (kueue.x-k8s.io) in every namespace: edits stamped and validated
    "mqueue.config.turnstile.dev": (MUTATE, "/mutate", "config", "Fail"),
    "vqueue.config.turnstile.dev": (VALIDATE, "/validate", "config", "Fail"),
    # their deletion, for the audit log's "who" (Ignore: an outage never blocks a deletion)
    "vqueue.deletion.turnstile.dev": (VALIDATE, "/validate", "deletion", "Ignore"),
    # Kueue's Workload objects (the leader's projection): only spec.active may change, and is recorded
    "vworkload.workloads.turnstile.dev": (VALIDATE, "/validate", "workloads", "Fail"),
}


# hooks for Kueue's objects: no namespace or object selector
QUEUE_OBJECT_SCOPES = ("config", "deletion", "workloads")


@dataclass(frozen=True, slots=True)
class Scope:
    """What decides each namespace's ``turnstile.dev/webhook`` label (``label``)."""

    default_queue: frozenset[str] = frozenset()  # namespaces with a LocalQueue named ``default``
    with_queues: frozenset[str] = frozenset()  # namespaces with any LocalQueue
    manage: bool = False  # manageJobsWithoutQueueName
    selector: LabelSelector | None = None  # managedJobsNamespaceSelector (None: the namespaces with queues)
    every_resource: bool = False  # TURNSTILE_MANAGED_RESOURCES=all: a CPU-only object is held too

    @classmethod
    def of(cls, config: Config, policy: Policy | None = None) -> Scope:
        policy = policy or Policy()
        with_queues: dict[str, set[str]] = {}
        for key in config.local_queues:
            namespace, _, name = key.partition("/")
            with_queues.setdefault(namespace, set()).add(name)
        return cls(
            frozenset(ns for ns, names in with_queues.items() if jobs.DEFAULT_QUEUE in names),
            frozenset(with_queues),
            policy.manage_without_queue,
            policy.namespace_selector,
            policy.managed_resources == managed.ALL,
        )

    def label(self, namespace: str, labels: Mapping[str, str], own_namespace: str) -> str | None:
        """The namespace's ``turnstile.dev/webhook`` label: ``all``, ``extended``, ``advised`` or none."""
        if namespace in (*managed.SYSTEM_NAMESPACES, own_namespace):
            return None
        if namespace in self.default_queue:
            return ALL
        chosen = self.selector.matches(labels) if self.selector is not None else namespace in self.with_queues
        if self.manage and chosen:
            return ALL if self.every_resource else EXTENDED
        return ADVISED if namespace in self.with_queues else None


def namespace_selector(scope: str, own_namespace: str) -> dict[str, Any]:
    """A hook's namespaceSelector: fixed, so a re-applied manifest never changes what is sent."""
    system = {"key": NAME_LABEL, "operator": "NotIn", "values": [*managed.SYSTEM_NAMESPACES, own_namespace]}
    if scope == "queued":
        return {"matchExpressions": [system]}
    return {"matchExpressions": [{"key": SCOPE_LABEL, "operator": "In", "values": [scope]}, system]}


def _asks_extended(spec: str) -> str:
    """CEL: a container (or init container) of the pod spec at ``spec`` asks for an extended resource."""
    resources = "c.resources.{0}.exists(r, r.contains('/') && !r.startsWith('kubernetes.io/'))"
    asks = " || ".join(f"(has(c.resources.{f}) && {resources.format(f)})" for f in ("limits", "requests"))
    containers = f"{spec}.containers + (has({spec}.initContainers) ? {spec}.initContainers : [])"
    return f"({containers}).exists(c, has(c.resources) && ({asks}))"


def _job_owned(owners: Collection[tuple[str, str]]) -> str:
    """CEL: the object is a queued parent's part (``admission.webhook.pods.owned_by_job``): its
    controller is an integrated kind queued here (``owners``), or it is a SparkApplication's pod or an
    AppWrapper's, where those kinds are queued."""
    kinds = ", ".join(f"'{api_version}/{kind}'" for api_version, kind in sorted(owners))
    spark = " && ".join(
        f"'{label}' in object.metadata.labels"
        for label in (sparkapps.LAUNCHED_LABEL, sparkapps.APP_NAME_LABEL, sparkapps.ROLE_LABEL)
    )
    spark += f" && object.metadata.labels['{sparkapps.LAUNCHED_LABEL}'] == 'true'"
    labelled = [f"({spark})"] if (sparkapps.API_VERSION, "SparkApplication") in owners else []
    if (appwrappers.API_VERSION, appwrappers.KIND) in owners:
        labelled.append(f"'{appwrappers.LABEL}' in object.metadata.labels")
    out = (
        "(has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(o, "
        f"has(o.controller) && o.controller && (o.apiVersion + '/' + o.kind) in [{kinds}]))"
    )
    return out + (f" || (has(object.metadata.labels) && ({' || '.join(labelled)}))" if labelled else "")


def match_conditions(scope: str, owners: Collection[tuple[str, str]] = frozenset(jobs.KINDS)) -> list[dict[str, str]]:
    """The CEL conditions a hook's object must meet to be sent (see the module docstring); ``owners``:
    the enabled integrations' kinds (``admission.jobs.owners_of``)."""
    pods = "request.resource.group == '' && request.resource.resource == 'pods'"
    gates = "has(object.spec.schedulingGates) ? object.spec.schedulingGates : []"
    old_gates = "has(oldObject.spec.schedulingGates) ? oldObject.spec.schedulingGates : []"
    labels = "has(object.metadata.labels) ? object.metadata.labels : {}"
    old_labels = "has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}"
    out = [
        # (a pod of a job, or a job, Deployment or pod an AppWrapper wraps: its parent's workload holds it)
        {"name": "not-a-jobs-pod", "expression": f"!({_job_owned(owners)})"},
        {
            "name": "pod-update-that-matters",
            "expression": f"!({pods}) || request.operation != 'UPDATE' || ({gates}) != ({old_gates}) "
            f"|| ({labels}) != ({old_labels})",
        },
    ]
    if scope == EXTENDED:
        templated = "request.resource.group in ['batch', 'apps'] && request.resource.resource in ['jobs', "
        templated += "'deployments', 'statefulsets']"
        out.append(
            {
                "name": "asks-for-an-extended-resource",
                "expression": f"({pods}) ? {_asks_extended('object.spec')} : ({templated}) ? "
                f"{_asks_extended('object.spec.template.spec')} : true",
            }
        )
    return out


def object_selector(scope: str) -> dict[str, Any]:
    operator = "Exists" if scope == "queued" else "DoesNotExist"
    return {"matchExpressions": [{"key": jobs.QUEUE_LABEL, "operator": operator}]}


def config_rules(operations: Sequence[str] = ("CREATE", "UPDATE")) -> list[dict[str, Any]]:
    """Kueue's queue kinds, as served by ``queues.kueue.crds`` (v1beta2), cluster-scoped and namespaced."""
    plurals = [plural for plural, _, _, _ in crds.KINDS.values()]
    return [
        {"apiGroups": [api.GROUP], "apiVersions": [crds.VERSION], "operations": list(operations),
         "resources": plurals, "scope": "*"}
    ]  # fmt: skip


# Kueue's Workload objects (``admission.webhook.workload_objects``)
WORKLOAD_RULES = [
    {"apiGroups": [workload_crd.GROUP], "apiVersions": [workload_crd.VERSION], "operations": ["CREATE", "UPDATE"],
     "resources": [workload_crd.PLURAL], "scope": "Namespaced"},
]  # fmt: skip


# Plain Pods and the serving kinds that make them (``admission.webhook.pods``)
POD_RULES = [
    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"],
     "scope": "Namespaced"},
    {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
     "resources": ["deployments", "statefulsets"], "scope": "Namespaced"},
    {"apiGroups": ["leaderworkerset.x-k8s.io"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
     "resources": ["leaderworkersets"], "scope": "Namespaced"},
]  # fmt: skip


def rules(integrations: Sequence[Integration]) -> list[dict[str, Any]]:
    out = [dict(r) for r in POD_RULES]
    for integration in integrations:
        group, _, version = integration.ref.api_version.rpartition("/")
        out.append(
            {
                "apiGroups": [group],
                "apiVersions": [version],
                "operations": ["CREATE", "UPDATE"],
                "resources": [integration.ref.plural],
                "scope": "Namespaced",
            }
        )
    return out


def configurations(
    client: dict[str, Any],
    ca_bundle: bytes | None,
    *,
    integrations: Sequence[Integration],
    namespace: str = "turnstile-system",
) -> list[dict[str, Any]]:
    """Both configurations. ``client`` is a clientConfig without its path: ``{"url": "https://h:p"}``
    (a simulated cluster) or ``{"service": {"name": ..., "namespace": ..., "port": 443}}``."""
    out = []
    for config_name in (MUTATE, VALIDATE):
        hooks = []
        for name, (owner, path, kind, policy) in HOOKS.items():
            if owner != config_name:
                continue
            if "url" in client:
                client_config: dict[str, Any] = {"url": str(client["url"]) + path}
            else:
                client_config = {"service": {**client["service"], "path": path}}
            if ca_bundle:
                client_config["caBundle"] = base64.b64encode(ca_bundle).decode()
            hook: dict[str, Any] = {
                "name": name,
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": policy,
                "timeoutSeconds": 10,
                "clientConfig": client_config,
            }
            if kind == "workloads":
                hook["rules"] = WORKLOAD_RULES
            elif kind in QUEUE_OBJECT_SCOPES:  # every queue object, wherever it lives
                hook["rules"] = config_rules() if kind == "config" else config_rules(["DELETE"])
            else:
                hook["rules"] = rules(integrations)
                hook["namespaceSelector"] = namespace_selector(kind, namespace)
                hook["objectSelector"] = object_selector(kind)
                hook["matchConditions"] = match_conditions(kind, owners_of(integrations))
            hooks.append(hook)
        kind = "MutatingWebhookConfiguration" if config_name == MUTATE else "ValidatingWebhookConfiguration"
        out.append(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": kind,
                "metadata": {"name": config_name},
                "webhooks": hooks,
            }
        )
    return out


MANIFEST_HEADER = """\
# Turnstile's webhook configurations, as admission.webhook.configurations.configurations writes them
# (make manifests; a test compares the two). Only what Turnstile must queue or hold goes through the
# failing webhooks, so a Turnstile outage refuses nothing else:
#   *.queued      objects labelled kueue.x-k8s.io/queue-name (not in kube-system or turnstile-system)
#   *.defaulted   unlabelled objects in namespaces labelled turnstile.dev/webhook=all (a LocalQueue named
#                 "default" queues them; or every covered resource is managed)
#   *.managed     unlabelled objects asking for an extended resource (GPUs, MIG slices) in namespaces
#                 labelled turnstile.dev/webhook=extended (manageJobsWithoutQueueName holds them)
#   vjob.advised  unlabelled objects in namespaces labelled turnstile.dev/webhook=advised (warnings; Ignore)
#   *.config      Kueue's queue objects (kueue.x-k8s.io/v1beta2), validated and their editor stamped;
#                 answered without the database, so Fail never blocks an admin's edit while it is away
#   *.deletion    their deletions (Ignore), for the audit log's "who deleted it"
#   *.workloads   Kueue's Workload objects (Turnstile's projection of its database): only spec.active may
#                 change, and is recorded as a stop/resume request; while that cannot be written, refused
# Jobs of every integrated kind, Pods, Deployments, StatefulSets, LeaderWorkerSets. Never sent (match-
# Conditions): pods whose controller is a job kind (their job is queued), and pod updates that change
# neither scheduling gates nor labels (the Job controller's finalizer removal), so an outage never
# stops a job's pods. The leading replica keeps the turnstile.dev/webhook label on each namespace;
# nothing here changes with the queues, so re-applying this file resets nothing. Every replica adds
# its CA to the caBundle (cert-manager injects it in overlays/cert-manager); with Argo CD or Flux,
# ignore differences in webhooks[].clientConfig.caBundle.
"""


def render_manifest(integrations: Sequence[Integration]) -> str:
    """``manifests/base/webhooks.yaml``: both configurations for the in-cluster Service."""
    import yaml

    client = {"service": {"name": "turnstile-webhook", "namespace": "turnstile-system", "port": 443}}
    docs = configurations(client, None, integrations=integrations)
    return MANIFEST_HEADER + "---\n".join(yaml.safe_dump(d, sort_keys=False) for d in docs)


def api_services(service: dict[str, Any], ca_bundle: bytes | None = None) -> list[dict[str, Any]]:
    """The APIServices of the aggregated API (``admission.aggregated``), served by ``service``
    (``{"name", "namespace", "port"}``: the webhook's Service; the API server calls
    ``NAME.NAMESPACE.svc``, which the serving certificate names)."""
    out = []
    for name in API_SERVICES:
        version, _, group = name.partition(".")
        spec: dict[str, Any] = {
            "group": group,
            "version": version,
            "service": dict(service),
            "groupPriorityMinimum": 100 if group.startswith("visibility.") else 1000,
            "versionPriority": 100 if group.startswith("visibility.") else 15,
        }
        if ca_bundle:
            spec["caBundle"] = base64.b64encode(ca_bundle).decode()
        out.append(
            {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": name}, "spec": spec}
        )
    return out
