"""What keeps replicas running in the simulated cluster: the Deployment and ReplicaSet controllers, and
the reconcile loop the other serving controllers (``admission.sim.operators.serving``) run in.

As in kube-controller-manager, pods are created *through the API server* (``ApiServer.create``), so
admission webhooks see them exactly as on a real cluster: Turnstile's webhook gates the pods of a
queued Deployment, and the ReplicaSet waits, as the real one does, for nothing but its pods to exist.

- Deployment: one ReplicaSet per pod template, named ``<deployment>-<pod-template-hash>``, with the
  Deployment's replicas; ReplicaSets of older templates are scaled to 0 at once (the real controller
  rolls gradually under ``maxSurge``/``maxUnavailable``: a difference written down in
  docs/simulated-cluster.md). Status counts its ReplicaSets' pods.
- ReplicaSet: pods named ``<replicaset>-<5 random>`` until ``replicas`` are alive (not finished,
  not being deleted), made in slow-start batches (1, 2, 4, ... at once) as the real controller
  makes them; a deleted or finished pod is replaced; on scale-in the pods deleted first are, as
  the real controller ranks them, unscheduled before scheduled, pending before running, then the
  newest.
Work is serialised: events mark an owner dirty and one task reconciles dirty owners in turn, so two
events never create the same pod twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from admission.sim.server import resources
from admission.sim.server.object_store import ObjectStore, Watcher
from admission.sim.server.objects import ApiError, Obj, Resource, clone
from queues.podsets import serving

if TYPE_CHECKING:
    from admission.sim.server.apiserver import ApiServer

log = logging.getLogger(__name__)


def _res(plural: str) -> Resource:
    return next(r for r in resources.BUILT_IN if r.plural == plural and r.group in ("apps", ""))


DEPLOYMENTS, REPLICASETS, STATEFULSETS, PODS = (
    _res("deployments"),
    _res("replicasets"),
    _res("statefulsets"),
    _res("pods"),
)
TEMPLATE_HASH = "pod-template-hash"
# who the controllers are, as the webhooks see them (kube-controller-manager's service accounts)
USERS = {
    "ReplicaSet": {
        "username": "system:serviceaccount:kube-system:replicaset-controller",
        "groups": ["system:serviceaccounts"],
    },
    "StatefulSet": {
        "username": "system:serviceaccount:kube-system:statefulset-controller",
        "groups": ["system:serviceaccounts"],
    },
    "Deployment": {
        "username": "system:serviceaccount:kube-system:deployment-controller",
        "groups": ["system:serviceaccounts"],
    },
}


def template_hash(template: Any) -> str:
    """A stable name for a pod template (the real controller hashes it with FNV; any stable hash serves)."""
    digest = hashlib.sha256(repr(_canonical(template)).encode()).hexdigest()
    return "".join(c for c in digest if c not in "aeiou")[:10]


def _canonical(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _canonical(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_canonical(v) for v in value)
    return value


def alive(pod: Obj) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and (pod.get("status") or {}).get("phase") not in (
        "Succeeded",
        "Failed",
    )


def ready(pod: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def owner_reference(obj: Obj, controller: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def _controller_uid(obj: Obj) -> str | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


replicas_of = serving.replicas  # (as the webhook and the scenario reader read it)


class Replicas:
    """The three controllers over one store; see the module docstring."""

    def __init__(self, store: ObjectStore, api: ApiServer) -> None:
        self.store = store
        self.api = api
        # kind -> its reconciler (``register`` adds the serving operators' kinds, ``admission.sim.operators.serving``)
        self.handlers: dict[Resource, Callable[[Obj], Awaitable[None]]] = {
            DEPLOYMENTS: self._deployment,
            REPLICASETS: self._replicaset,
        }
        self.watchers: list[Watcher] = []
        self.dirty: dict[tuple[Resource, str, str], None] = {}
        self.wake = asyncio.Event()
        self.children: dict[str, set[tuple[str, str]]] = {}  # owner uid -> (namespace, name) of what it owns
        self.made: dict[str, int] = {}  # pod uid -> the order the ReplicaSet controller made it
        self.tasks: list[asyncio.Task[None]] = []
        self.pod_labels: dict[str, Resource] = {}  # pod label -> the kind whose object it names (``register``)
        self.waking: list[Resource] = []  # kinds watched only to wake their owners (``wake_on``)

    def register(self, res: Resource, handler: Callable[[Obj], Awaitable[None]], label: str | None = None) -> None:
        """Reconcile objects of ``res`` (and hear of their pods' changes) with ``handler``; ``label``: a
        pod label naming the object of ``res`` (in the pod's namespace) that hears of the pod's changes
        too (an AppWrapper's, whose pods are its components')."""
        self.handlers[res] = handler
        if label is not None:
            self.pod_labels[label] = res

    def wake_on(self, res: Resource) -> None:
        """Watch ``res`` only so that its objects' owners (of registered kinds) hear of their changes,
        and go with them (a RayJob's submitter Job, which the Job controller runs)."""
        if res not in self.waking and res not in self.handlers:
            self.waking.append(res)

    def kind_of(self, kind: str, api_version: str) -> Resource | None:
        return next((r for r in self.handlers if r.kind == kind and r.api_version == api_version), None)

    async def start(self) -> None:
        self.watchers = [Watcher(r, None) for r in (*self.handlers, *self.waking, PODS)]
        for w in self.watchers:
            self.store.watchers.append(w)
            self.tasks.append(asyncio.create_task(self._consume(w)))
        self.tasks.append(asyncio.create_task(self._work()))

    async def stop(self) -> None:
        for w in self.watchers:
            with contextlib.suppress(ValueError):
                self.store.watchers.remove(w)
            w.queue.put_nowait(None)
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _consume(self, watcher: Watcher) -> None:
        while (event := await watcher.queue.get()) is not None:
            meta = event.obj["metadata"]
            key = (meta["namespace"], meta["name"])
            owner = _controller_uid(event.obj)
            if owner is not None:
                children = self.children.setdefault(owner, set())
                if event.type == "DELETED":
                    children.discard(key)
                else:
                    children.add(key)
            if event.resource is PODS and event.type == "DELETED":
                self.made.pop(str(meta.get("uid")), None)
            if event.resource in self.waking:
                pass  # (no controller of its own here: its owner's, below)
            elif event.resource is not PODS and event.type == "DELETED":
                self._collect(event.obj)
            elif event.resource is not PODS:
                self._mark(event.resource, *key)
            if event.resource is PODS:
                for label, res in self.pod_labels.items():
                    if (named := (meta.get("labels") or {}).get(label)) is not None:
                        self._mark(res, meta["namespace"], str(named))
            for ref in meta.get("ownerReferences") or []:  # an owner hears of its children's changes
                kind = self.kind_of(str(ref.get("kind")), str(ref.get("apiVersion")))
                if kind is not None and ref.get("controller"):
                    self._mark(kind, meta["namespace"], str(ref.get("name")))

    def _collect(self, owner: Obj) -> None:
        """The garbage collector's part: what a deleted owner controlled is deleted too (background)."""
        for namespace, name in sorted(self.children.pop(owner["metadata"]["uid"], ())):
            for res in (*self.handlers, *self.waking, PODS):
                with contextlib.suppress(ApiError):
                    child = self.store.get(res, namespace, name)
                    if _controller_uid(child) == owner["metadata"]["uid"]:
                        self.store.delete(res, namespace, name)

    def _mark(self, res: Resource, namespace: str, name: str) -> None:
        self.dirty[(res, namespace, name)] = None
        self.wake.set()

    mark = _mark  # (a controller's timer asks for a reconcile: a CronJob's next scheduled time)

    async def _work(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            while self.dirty:
                key = next(iter(self.dirty))
                del self.dirty[key]
                res, namespace, name = key
                try:
                    obj = self.store.get(res, namespace, name)
                except ApiError:
                    continue
                try:
                    await self.handlers[res](obj)
                except ApiError as exc:  # refused (a webhook, quota of names): as the real one, try again later
                    log.debug("%s %s/%s: %s", res.kind, namespace, name, exc)
                    asyncio.get_running_loop().call_later(0.5, self._mark, res, namespace, name)
                except Exception:  # a bug must not stop every controller of the cluster
                    log.exception("%s %s/%s failed", res.kind, namespace, name)

    def owned(self, res: Resource, owner: Obj) -> list[Obj]:
        return self._owned(res, owner)

    def _owned(self, res: Resource, owner: Obj) -> list[Obj]:
        out = []
        for namespace, name in sorted(self.children.get(owner["metadata"]["uid"], ())):
            with contextlib.suppress(ApiError):
                out.append(self.store.get(res, namespace, name))
        return out

    def set_status(self, res: Resource, obj: Obj, status: dict[str, Any]) -> None:
        status["observedGeneration"] = obj["metadata"].get("generation", 1)
        if {k: v for k, v in (obj.get("status") or {}).items() if k in status} != status:
            obj["status"] = {**(obj.get("status") or {}), **status}
            self.store.replace(res, obj["metadata"]["namespace"], obj["metadata"]["name"], obj, subresource="status")

    # ----- Deployment ----------------------------------------------------------------------------

    async def _deployment(self, deploy: Obj) -> None:
        ns, name = deploy["metadata"]["namespace"], deploy["metadata"]["name"]
        template = clone((deploy.get("spec") or {}).get("template") or {})
        digest = template_hash(template)
        template.setdefault("metadata", {}).setdefault("labels", {})[TEMPLATE_HASH] = digest
        selector = clone((deploy.get("spec") or {}).get("selector") or {})
        selector.setdefault("matchLabels", {})[TEMPLATE_HASH] = digest
        want = replicas_of(deploy)
        current = f"{name}-{digest}"
        found = False
        for rs in self._owned(REPLICASETS, deploy):
            if rs["metadata"]["name"] == current:
                found = True
                if replicas_of(rs) != want:
                    rs["spec"]["replicas"] = want
                    self.store.replace(REPLICASETS, ns, rs["metadata"]["name"], rs)
            elif replicas_of(rs):
                rs["spec"]["replicas"] = 0
                self.store.replace(REPLICASETS, ns, rs["metadata"]["name"], rs)
        if not found:
            body = {
                "metadata": {
                    "name": current,
                    "labels": dict(template["metadata"]["labels"]),
                    "ownerReferences": [owner_reference(deploy)],
                },
                "spec": {"replicas": want, "selector": selector, "template": template},
            }
            await self.api.create(REPLICASETS, ns, body, user=USERS["Deployment"])
        sets = self._owned(REPLICASETS, deploy)

        def total(key: str) -> int:
            return sum(int((rs.get("status") or {}).get(key) or 0) for rs in sets)

        updated = next((rs for rs in sets if rs["metadata"]["name"] == current), None)
        self.set_status(
            DEPLOYMENTS,
            deploy,
            {
                "replicas": total("replicas"),
                "readyReplicas": total("readyReplicas"),
                "availableReplicas": total("availableReplicas"),
                "updatedReplicas": int(((updated or {}).get("status") or {}).get("replicas") or 0),
                "unavailableReplicas": max(0, want - total("availableReplicas")),
            },
        )

    # ----- ReplicaSet ----------------------------------------------------------------------------

    async def _replicaset(self, rs: Obj) -> None:
        ns, name = rs["metadata"]["namespace"], rs["metadata"]["name"]
        pods = [p for p in self._owned(PODS, rs) if alive(p)]
        want = replicas_of(rs)
        template = (rs.get("spec") or {}).get("template") or {}

        async def make() -> Obj:
            body = {
                "metadata": {
                    "generateName": f"{name}-",
                    "labels": dict((template.get("metadata") or {}).get("labels") or {}),
                    "annotations": dict((template.get("metadata") or {}).get("annotations") or {}),
                    "ownerReferences": [owner_reference(rs)],
                },
                "spec": clone(template.get("spec") or {}),
            }
            created, _ = await self.api.create(PODS, ns, body, user=USERS["ReplicaSet"])
            self.made[created["metadata"]["uid"]] = len(self.made) + 1
            self.children.setdefault(rs["metadata"]["uid"], set()).add((ns, created["metadata"]["name"]))
            return created

        # As the real controller's ``slowStartBatch``: 1, 2, 4, ... creations at once, doubling while
        # they succeed (a webhook refusing the first pod costs one call, not a hundred).
        batch, missing = 1, want - len(pods)
        while missing > 0:
            pods.extend(await asyncio.gather(*(make() for _ in range(min(batch, missing)))))
            missing -= min(batch, missing)
            batch *= 2
        if len(pods) > want:
            ranked = sorted(pods, key=lambda p: _deletion_rank(p, self.made.get(p["metadata"]["uid"], 0)))
            for pod in ranked[: len(pods) - want]:
                with contextlib.suppress(ApiError):
                    self.store.delete(PODS, ns, pod["metadata"]["name"])
                pods.remove(pod)
        n_ready = sum(1 for p in pods if ready(p))
        self.set_status(
            REPLICASETS,
            rs,
            {
                "replicas": len(pods),
                "readyReplicas": n_ready,
                "availableReplicas": n_ready,
                "fullyLabeledReplicas": len(pods),
            },
        )


def _deletion_rank(pod: Obj, made: int) -> tuple[int, int, int, int]:
    """The real ReplicaSet's order for scale-in (``ActivePodsWithRanks``, simplified): unscheduled
    before scheduled, pending before running, not ready before ready, then the newest first. The
    real one compares creation timestamps (seconds), leaving pods made in the same second in no
    particular order; here ``made`` (the order this controller made them) decides, newest first."""
    status = pod.get("status") or {}
    phase_rank = {"Pending": 0, "Unknown": 1, "Running": 2}.get(str(status.get("phase")), 0)
    return (1 if pod["spec"].get("nodeName") else 0, phase_rank, 1 if ready(pod) else 0, -made)
