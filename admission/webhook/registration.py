"""Turnstile's webhook configurations: what the API server sends to Turnstile, and keeping it so.

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

Pods owned by a job kind Turnstile integrates (the Job controller's, the operators') are never sent
(``matchConditions``): their job is what is queued, and an outage must not stop a Job from making
or finishing its pods. A pod UPDATE is sent only when it changes the pod's scheduling gates or
labels (what Turnstile checks), so the Job controller's removal of its tracking finalizer never is.

The webhooks' selectors are fixed; the namespaces are chosen by the ``turnstile.dev/webhook`` label,
which the leading replica keeps on each namespace (``Registration.scope``). So re-applying the
manifests (an upgrade, GitOps) resets nothing: the scope lives on the namespaces. A job created in
the moment before its namespace is labelled runs unqueued only until the controller sees it: its
informer queues it, and the enactor suspends it for its turn.

**CA bundle.** Every replica makes sure the published ``caBundle`` trusts the certificate it
serves: the bundle is the union of the CAs already published (expired ones dropped) and this
replica's, so replicas that each issued their own CA (``--cert-dir`` without a shared Secret)
never lock each other out, and a replica that exits leaves the others trusted. Readiness
includes it (``trusted``): a replica the API server would not trust is not ready.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization

from admission.jobs.base import Integration
from admission.kube import client as kube_client
from admission.kube.client import Kube, KubeError, Obj
from admission.policy import Policy
from queues import managed
from queues.kueue import api, crds, workload_crd
from queues.model import Config
from queues.podsets import jobs
from queues.selectors import LabelSelector

log = logging.getLogger(__name__)

MUTATE, VALIDATE = "turnstile-mutate", "turnstile-validate"
PLURALS = {MUTATE: "mutatingwebhookconfigurations", VALIDATE: "validatingwebhookconfigurations"}
# The APIServices served on the webhook's port (``admission.aggregated``): their caBundle is kept too.
API_SERVICES = ("v1alpha1.turnstile.dev", "v1beta2.visibility.kueue.x-k8s.io", "v1beta1.visibility.kueue.x-k8s.io")
NAME_LABEL = "kubernetes.io/metadata.name"
SCOPE_LABEL = "turnstile.dev/webhook"  # on a namespace (the leader's): which unlabelled objects are sent
ALL, EXTENDED, ADVISED = "all", "extended", "advised"  # its values
MAX_CAS = 8  # CAs kept in a bundle (the newest), so replicas coming and going never grow it without end
SYNC_SECONDS = 60.0  # the published configurations are checked (and repaired) this often

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


def _job_owned() -> str:
    owners = ", ".join(f"'{k.api_version}/{k.kind}'" for k in jobs.KINDS.values())
    return (
        "has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(o, "
        f"has(o.controller) && o.controller && (o.apiVersion + '/' + o.kind) in [{owners}])"
    )


def match_conditions(scope: str) -> list[dict[str, str]]:
    """The CEL conditions a hook's object must meet to be sent (see the module docstring)."""
    pods = "request.resource.group == '' && request.resource.resource == 'pods'"
    gates = "has(object.spec.schedulingGates) ? object.spec.schedulingGates : []"
    old_gates = "has(oldObject.spec.schedulingGates) ? oldObject.spec.schedulingGates : []"
    labels = "has(object.metadata.labels) ? object.metadata.labels : {}"
    old_labels = "has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}"
    out = [
        {"name": "not-a-jobs-pod", "expression": f"!({pods}) || !({_job_owned()})"},
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
                hook["matchConditions"] = match_conditions(kind)
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
# Turnstile's webhook configurations, as admission.webhook.registration.configurations writes them
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


def merged_bundle(published: str | None, ours: bytes, now: dt.datetime | None = None) -> bytes:
    """Our CAs plus the published ones still valid, newest first, at most ``MAX_CAS``, each once."""
    now = now or dt.datetime.now(dt.UTC)
    found: dict[bytes, x509.Certificate] = {}
    for pem in (ours, base64.b64decode(published) if published else b""):
        try:
            certs = x509.load_pem_x509_certificates(pem) if pem.strip() else []
        except ValueError:
            continue  # a damaged bundle: ours replaces it
        for cert in certs:
            if cert.not_valid_after_utc > now:
                found.setdefault(cert.fingerprint(hashes.SHA256()), cert)
    mine = {c.fingerprint(hashes.SHA256()) for c in x509.load_pem_x509_certificates(ours)}
    ordered = sorted(found.items(), key=lambda kv: (kv[0] not in mine, -kv[1].not_valid_before_utc.timestamp()))
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for _, c in ordered[:MAX_CAS])


def trusts(published: str | None, ours: bytes) -> bool:
    """Whether a published ``caBundle`` holds every CA of ``ours`` (the first signs our certificate)."""
    if not published:
        return False
    try:
        have = {c.tbs_certificate_bytes for c in x509.load_pem_x509_certificates(base64.b64decode(published))}
        first = x509.load_pem_x509_certificates(ours)[0]
    except ValueError:
        return False
    return first.tbs_certificate_bytes in have


class Registration:
    """Keeps both configurations' CA bundle and selectors (every replica) and the namespaces'
    ``turnstile.dev/webhook`` labels (the leader) as they should be."""

    def __init__(self, kube: Kube, *, own_namespace: str = "turnstile-system") -> None:
        self.kube = kube
        self.own_namespace = own_namespace
        self.ca: bytes | None = None  # the CA bundle this replica serves under
        self.scope: Scope | None = None  # set while leading: the scope to keep
        self.registered: bool | None = None  # None: not looked yet; False: no configuration exists
        self.trusted_by: set[str] = set()  # configurations whose bundle trusts our CA
        self.missing_said: set[str] = set()
        self.poke = asyncio.Event()

    def serve_with(self, ca: bytes) -> None:
        self.ca = ca
        self.trusted_by.clear()
        self.poke.set()

    def keep_scope(self, scope: Scope | None) -> None:
        if scope != self.scope:
            self.scope = scope
            self.poke.set()

    def trusted(self) -> str | None:
        """Readiness: None when the API server would trust this replica (or calls no webhook here)."""
        if self.registered is False:
            return None  # no configurations in the cluster: nothing calls us
        if self.registered is None:
            return "webhook configurations not checked yet"
        untrusted = sorted(set(PLURALS) - self.trusted_by)
        return (
            f"the published caBundle of {', '.join(untrusted)} does not trust this replica's CA" if untrusted else None
        )

    async def keep(self, every: float = SYNC_SECONDS) -> None:
        backoff = 1.0
        while True:
            try:
                await self.sync()
                backoff = 1.0
                wait = every
            except KubeError as exc:
                log.warning("webhook configurations: %s; trying again in %.0fs", exc, backoff)
                wait, backoff = backoff, min(every, backoff * 2)
            self.poke.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self.poke.wait()

    async def sync(self) -> None:
        """Read both configurations and patch what differs from what they should be."""
        found = 0
        for name, plural in PLURALS.items():
            path = f"/apis/admissionregistration.k8s.io/v1/{plural}/{name}"
            try:
                current = await self.kube.request("GET", path)
            except KubeError as exc:
                if exc.status == 404:
                    self.trusted_by.discard(name)
                    continue
                raise
            found += 1
            patch = self._patch(name, current)
            if patch:
                current = await self.kube.request("PATCH", path, body=patch, content_type=kube_client.JSON_PATCH)
            hooks = current.get("webhooks") or []
            if (
                self.ca is not None
                and hooks
                and all(trusts((h.get("clientConfig") or {}).get("caBundle"), self.ca) for h in hooks)
            ):
                self.trusted_by.add(name)
            else:
                self.trusted_by.discard(name)
        self.registered = found > 0
        await self._api_services()
        if self.scope is not None:
            await self._label_namespaces(self.scope)

    async def _label_namespaces(self, scope: Scope) -> None:
        """Give each namespace the ``turnstile.dev/webhook`` label its scope asks for (or none).
        A merge patch of that one label: other labels, and anything GitOps applies, stay."""
        async for page in self.kube.list_pages(kube_client.NAMESPACES):
            for ns in page.get("items") or []:
                meta = ns.get("metadata") or {}
                name, labels = str(meta.get("name")), dict(meta.get("labels") or {})
                wanted = scope.label(name, labels, self.own_namespace)
                if labels.get(SCOPE_LABEL) == wanted:
                    continue
                log.info(
                    "namespace %s: %s=%s (which of its unlabelled objects the webhooks see)", name, SCOPE_LABEL, wanted
                )
                patch = {"metadata": {"labels": {SCOPE_LABEL: wanted}}}
                try:
                    await self.kube.patch(kube_client.NAMESPACES, None, name, patch)  # (a merge patch)
                except KubeError as exc:
                    if exc.status != 404:  # (deleted meanwhile)
                        raise

    async def _api_services(self) -> None:
        """The APIServices that route to this port trust our CA too (absent ones are left alone)."""
        if self.ca is None:
            return
        for name in API_SERVICES:
            path = f"/apis/apiregistration.k8s.io/v1/apiservices/{name}"
            try:
                current = await self.kube.request("GET", path)
            except KubeError as exc:
                if exc.status in (403, 404):
                    continue
                raise
            published = (current.get("spec") or {}).get("caBundle")
            if not trusts(published, self.ca):
                bundle = base64.b64encode(merged_bundle(published, self.ca)).decode()
                log.info("updating the caBundle of APIService %s", name)
                patch = {"spec": {"caBundle": bundle}}
                await self.kube.request("PATCH", path, body=patch, content_type=kube_client.MERGE_PATCH)

    def _patch(self, name: str, current: Obj) -> list[Obj]:
        """JSON patch ops that make ``current`` carry our CA and the fixed selectors. Each
        change is guarded by a ``test`` of the webhook's name at its index, so a configuration
        edited meanwhile is refused (422) rather than patched in the wrong place."""
        ops: list[Obj] = []
        hooks = current.get("webhooks") or []
        present = set()
        for i, hook in enumerate(hooks):
            hook_name = str(hook.get("name"))
            present.add(hook_name)
            changes: list[Obj] = []
            if self.ca is not None:
                published = (hook.get("clientConfig") or {}).get("caBundle")
                if not trusts(published, self.ca):
                    bundle = base64.b64encode(merged_bundle(published, self.ca)).decode()
                    changes.append({"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle})
            spec = HOOKS.get(hook_name)
            if spec is not None and spec[2] not in QUEUE_OBJECT_SCOPES:  # (an older install's, or edited by hand)
                for field, value in (
                    ("namespaceSelector", namespace_selector(spec[2], self.own_namespace)),
                    ("matchConditions", match_conditions(spec[2])),
                ):
                    if hook.get(field) != value:
                        changes.append({"op": "add", "path": f"/webhooks/{i}/{field}", "value": value})
            if changes:
                ops.append({"op": "test", "path": f"/webhooks/{i}/name", "value": hook_name})
                ops.extend(changes)
        expected = {n for n, spec in HOOKS.items() if spec[0] == name}
        missing = sorted(expected - present - self.missing_said)
        if missing:
            log.warning(
                "webhook configuration %s has no webhook %s: apply the current manifests (kubectl apply -k manifests/)",
                name,
                ", ".join(missing),
            )
            self.missing_said.update(missing)
        if ops:
            log.info("updating webhook configuration %s (CA bundle or selectors)", name)
        return ops
