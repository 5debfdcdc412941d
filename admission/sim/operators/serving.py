"""The serving controllers of the simulated cluster: StatefulSet, LeaderWorkerSet and KServe (raw
deployment mode), run in the ReplicaSet controller's reconcile loop (``admission.sim.operators.replicas``).

They make what the real controllers make, through the API server (so Turnstile's webhooks see it):

- **StatefulSet**: pods ``<name>-<ordinal>``; with ``podManagementPolicy: OrderedReady`` (the
  default) pod *i* is created only once pods 0..i-1 are Running and Ready, ``Parallel`` creates all
  at once; scale-in deletes the highest ordinals (one at a time when ordered); a deleted pod is
  re-created under its name.

The other two are CRDs here as on a real cluster (``resources.OPERATORS``):

- **LeaderWorkerSet** (``leaderworkerset.x-k8s.io/v1``): per group *i* of ``spec.replicas``, a
  leader pod ``<name>-<i>`` (``leaderWorkerTemplate.leaderTemplate``, else the worker template)
  and ``size - 1`` workers ``<name>-<i>-<j>``, labelled as the real controller labels them
  (``leaderworkerset.sigs.k8s.io/name``, ``group-index``, ``worker-index``, ``group-key``) and
  annotated with the group's ``size``. A deleted pod is made again; groups beyond ``replicas`` are
  deleted. The real controller makes a leader StatefulSet and one worker StatefulSet per group;
  the pods, names and labels are the same (a difference written down in docs/simulated-cluster.md).
- **KServe InferenceService** (``serving.kserve.io/v1beta1``, raw deployment mode): a Deployment
  ``<name>-predictor`` whose pod template is the predictor's (``spec.predictor.containers``, or
  ``spec.predictor.model`` as the ``kserve-container``), with ``minReplicas`` replicas (default
  1), the InferenceService's labels and annotations, and ``serving.kserve.io/inferenceservice``;
  its status gets ``Ready`` when the Deployment's replicas are.
- **KubeRay RayService** (``ray.io/v1``): one RayCluster ``<name>-raycluster`` owned by it, made
  through the API server with its ``spec.rayClusterConfig`` (suspend included) and its labels; a
  change of that config is written into the RayCluster in place (KubeRay prepares a new cluster and
  switches traffic to it once Ready: a difference written down in docs/simulated-cluster.md); the
  cluster's state is the service's ``status.activeServiceStatus.rayClusterStatus``, and its
  ``Ready`` condition is True while that state is ``ready``. With ``enableInTreeAutoscaling`` the
  cluster's worker ``replicas`` are the Ray autoscaler's (a client patching the RayCluster stands
  for it): the service's own are not written over them, as KubeRay leaves them out of its
  comparison. The RayCluster's pods are run by the
  cluster's KubeRay model (``admission.sim.operators.cluster``).
"""

from __future__ import annotations

import contextlib
import hashlib
from typing import Any

from admission.sim.operators.replicas import (
    DEPLOYMENTS,
    PODS,
    STATEFULSETS,
    USERS,
    Replicas,
    alive,
    owner_reference,
    ready,
    replicas_of,
    template_hash,
)
from admission.sim.server import resources
from admission.sim.server.objects import ApiError, Obj, Resource, clone
from queues.podsets import serving as queues_serving

LWS = next(r for r in resources.OPERATORS if r.kind == "LeaderWorkerSet")
RAYSERVICES = next(r for r in resources.OPERATORS if r.kind == "RayService")
RAYCLUSTERS = next(r for r in resources.OPERATORS if r.kind == "RayCluster")
KUBERAY_USER = {"username": "system:serviceaccount:kuberay:kuberay-operator", "groups": ["system:serviceaccounts"]}
ISVC = next(r for r in resources.OPERATORS if r.kind == "InferenceService")
LWS_PREFIX = "leaderworkerset.sigs.k8s.io/"
NAME, GROUP_INDEX, WORKER_INDEX, GROUP_KEY, SIZE = (
    f"{LWS_PREFIX}name",
    f"{LWS_PREFIX}group-index",
    f"{LWS_PREFIX}worker-index",
    f"{LWS_PREFIX}group-key",
    f"{LWS_PREFIX}size",
)
ISVC_LABEL = queues_serving.ISVC_LABEL
POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
STS_USER = USERS["StatefulSet"]
LWS_USER = {"username": "system:serviceaccount:lws-system:lws-controller-manager", "groups": ["system:serviceaccounts"]}
KSERVE_USER = {
    "username": "system:serviceaccount:kserve:kserve-controller-manager",
    "groups": ["system:serviceaccounts"],
}


def install(replicas: Replicas) -> None:
    """Run the StatefulSet controller and both operators in ``replicas``' reconcile loop."""
    replicas.register(STATEFULSETS, lambda obj: _statefulset(replicas, obj))
    replicas.register(LWS, lambda obj: _leader_worker_set(replicas, obj))
    replicas.register(ISVC, lambda obj: _inference_service(replicas, obj))
    replicas.register(RAYSERVICES, lambda obj: _ray_service(replicas, obj))
    replicas.register(RAYCLUSTERS, _nothing)  # (its pods are the cluster operator's; its changes wake its service)


async def _nothing(_obj: Obj) -> None:
    return None


async def _ray_service(rc: Replicas, svc: Obj) -> None:
    ns, name = svc["metadata"]["namespace"], svc["metadata"]["name"]
    config = clone((svc.get("spec") or {}).get("rayClusterConfig") or {})
    cluster_name = f"{name}-raycluster"
    try:
        cluster = rc.store.get(RAYCLUSTERS, ns, cluster_name)
    except ApiError:
        body = {
            "metadata": {
                "name": cluster_name,
                "labels": {**(svc["metadata"].get("labels") or {}), "ray.io/originated-from-cr-name": name},
                "annotations": dict(svc["metadata"].get("annotations") or {}),
                "ownerReferences": [owner_reference(svc)],
            },
            "spec": config,
        }
        cluster, _ = await rc.api.create(RAYCLUSTERS, ns, body, user=KUBERAY_USER)
        rc.children.setdefault(svc["metadata"]["uid"], set()).add((ns, cluster_name))
    if config.get("enableInTreeAutoscaling") is True:
        config = _autoscaled(config, cluster.get("spec") or {})
    if cluster.get("spec") != config:
        cluster["spec"] = config
        cluster = rc.store.replace(RAYCLUSTERS, ns, cluster_name, cluster)
    state = str((cluster.get("status") or {}).get("state") or "")
    fields = {"activeServiceStatus": {"rayClusterName": cluster_name, "rayClusterStatus": {"state": state}}}
    _set_status(rc, RAYSERVICES, svc, fields, state == "ready" and not config.get("suspend"), "")


def _autoscaled(config: Obj, current: Obj) -> Obj:
    """An autoscaling service's config with its cluster's worker ``replicas`` as they are: the Ray
    autoscaler owns them, and KubeRay leaves them out when it compares a service with its cluster."""
    replicas = {g.get("groupName"): g["replicas"] for g in current.get("workerGroupSpecs") or [] if "replicas" in g}
    groups = [
        {**g, "replicas": replicas[g.get("groupName")]} if g.get("groupName") in replicas else g
        for g in config.get("workerGroupSpecs") or []
    ]
    return {**config, "workerGroupSpecs": groups} if groups else config


async def _statefulset(rc: Replicas, sts: Obj) -> None:
    ns, name = sts["metadata"]["namespace"], sts["metadata"]["name"]
    spec = sts.get("spec") or {}
    template = spec.get("template") or {}
    want = replicas_of(sts)
    ordered = spec.get("podManagementPolicy", "OrderedReady") != "Parallel"
    revision = f"{name}-{template_hash(template)}"
    by_name = {p["metadata"]["name"]: p for p in rc.owned(PODS, sts)}
    for i in range(want):
        pod_name = f"{name}-{i}"
        pod = by_name.get(pod_name)
        if pod is not None:
            if ordered and not (alive(pod) and ready(pod)):
                break  # OrderedReady: the next ordinal waits for this one
            continue
        labels = {
            **((template.get("metadata") or {}).get("labels") or {}),
            POD_NAME_LABEL: pod_name,
            POD_INDEX_LABEL: str(i),
            "controller-revision-hash": revision,
        }
        body = {
            "metadata": {
                "name": pod_name,
                "labels": labels,
                "annotations": dict((template.get("metadata") or {}).get("annotations") or {}),
                "ownerReferences": [owner_reference(sts)],
            },
            "spec": {**clone(template.get("spec") or {}), "hostname": pod_name},
        }
        created, _ = await rc.api.create(PODS, ns, body, user=STS_USER)
        by_name[pod_name] = created
        rc.children.setdefault(sts["metadata"]["uid"], set()).add((ns, pod_name))
        if ordered:
            break
    for pod_name, pod in sorted(by_name.items(), key=lambda kv: -_ordinal(kv[0])):
        if _ordinal(pod_name) >= want and not pod["metadata"].get("deletionTimestamp"):
            with contextlib.suppress(ApiError):
                rc.store.delete(PODS, ns, pod_name)
            if ordered:
                break  # OrderedReady scales in one pod at a time, highest first
    living = [p for p in by_name.values() if alive(p) and _ordinal(p["metadata"]["name"]) < want]
    n_ready = sum(1 for p in living if ready(p))
    rc.set_status(
        STATEFULSETS,
        sts,
        {
            "replicas": len(living),
            "readyReplicas": n_ready,
            "availableReplicas": n_ready,
            "currentReplicas": len(living),
            "updatedReplicas": len(living),
            "currentRevision": revision,
            "updateRevision": revision,
        },
    )


def _ordinal(pod_name: str) -> int:
    tail = pod_name.rpartition("-")[2]
    return int(tail) if tail.isdigit() else -1


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default


async def _leader_worker_set(rc: Replicas, lws: Obj) -> None:
    ns, name = lws["metadata"]["namespace"], lws["metadata"]["name"]
    spec = lws.get("spec") or {}
    lwt = spec.get("leaderWorkerTemplate") or {}
    size = max(1, _int(lwt.get("size"), 1))
    groups = _int(spec.get("replicas"), 1)
    worker = lwt.get("workerTemplate") or {}
    leader = lwt.get("leaderTemplate") or worker
    pods = {p["metadata"]["name"]: p for p in rc.owned(PODS, lws) if alive(p)}
    for i in range(groups):
        key = hashlib.sha1(f"{ns}/{name}-{i}".encode()).hexdigest()
        for j in range(size):
            pod_name = f"{name}-{i}" if j == 0 else f"{name}-{i}-{j}"
            if pod_name in pods:
                continue
            template = leader if j == 0 else worker
            meta = template.get("metadata") or {}
            labels = {
                **(meta.get("labels") or {}),
                NAME: name,
                GROUP_INDEX: str(i),
                WORKER_INDEX: str(j),
                GROUP_KEY: key,
            }
            body = {
                "metadata": {
                    "name": pod_name,
                    "labels": labels,
                    "annotations": {**(meta.get("annotations") or {}), SIZE: str(size)},
                    "ownerReferences": [owner_reference(lws)],
                },
                "spec": clone(template.get("spec") or {}),
            }
            created, _ = await rc.api.create(PODS, ns, body, user=LWS_USER)
            rc.children.setdefault(lws["metadata"]["uid"], set()).add((ns, created["metadata"]["name"]))
    for pod_name, pod in pods.items():
        index = (pod["metadata"].get("labels") or {}).get(GROUP_INDEX, "0")
        if int(index) >= groups:
            try:
                rc.store.delete(PODS, ns, pod_name)
            except ApiError:
                continue
    members = [p for p in rc.owned(PODS, lws) if alive(p)]
    ready_groups = sum(
        1
        for i in range(groups)
        if sum(1 for p in members if p["metadata"]["labels"].get(GROUP_INDEX) == str(i) and ready(p)) == size
    )
    status = {"replicas": groups, "readyReplicas": ready_groups, "updatedReplicas": groups}
    _set_status(rc, LWS, lws, status, ready_groups == groups, "AllGroupsReady")


async def _inference_service(rc: Replicas, isvc: Obj) -> None:
    ns, name = isvc["metadata"]["namespace"], isvc["metadata"]["name"]
    predictor = queues_serving.predictor(isvc)  # what the scenario reader reads too
    predictor["metadata"]["ownerReferences"] = [owner_reference(isvc)]
    want = replicas_of(predictor)
    try:
        deployment = rc.store.get(DEPLOYMENTS, ns, f"{name}-predictor")
    except ApiError:
        deployment, _ = await rc.api.create(DEPLOYMENTS, ns, predictor, user=KSERVE_USER)
        rc.children.setdefault(isvc["metadata"]["uid"], set()).add((ns, deployment["metadata"]["name"]))
    status = deployment.get("status") or {}
    ok = int(status.get("readyReplicas") or 0) >= max(1, want)
    _set_status(rc, ISVC, isvc, {"components": {"predictor": {"latestReadyRevision": f"{name}-predictor"}}}, ok, "")


def _set_status(rc: Replicas, res: Resource, obj: Obj, fields: dict[str, Any], is_ready: bool, reason: str) -> None:
    kind = "Ready" if res in (ISVC, RAYSERVICES) else "Available"
    conditions = [{"type": kind, "status": "True" if is_ready else "False"}]
    if reason:
        conditions[0]["reason"] = reason
    status = {**(obj.get("status") or {}), **fields, "conditions": conditions}
    if status != obj.get("status"):
        obj["status"] = status
        rc.store.replace(res, obj["metadata"]["namespace"], obj["metadata"]["name"], obj, subresource="status")
