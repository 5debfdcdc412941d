"""A Workload object as the projection wants it (``desired``), and what it keeps of one (``Shown``).

Why apart from ``workload_projection``: the projection decides when to write; these say what an
object is made of and how two are compared without keeping 100,000 objects in memory (digests).
A pod group's object is owned by its pods (its job uid is no object's); an elastic job's carries
Kueue's ``kueue.x-k8s.io/elastic-job`` annotation, as Kueue's elastic Workloads do: its pod counts
are patched in place when the job is resized (the Workload webhook allows that change for them).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from admission.jobs.base import PodRef
from admission.kube.client import Obj
from admission.store.workload_shape import JOB_UID_LABEL
from queues.kueue import workload_crd
from queues.podsets import jobs

API_VERSION = f"{workload_crd.GROUP}/{workload_crd.VERSION}"
T = TypeVar("T")


def desired(obj: Obj, pods: Sequence[PodRef] | None = None, *, elastic: bool = False) -> Obj:
    """A workload as the store shows it (``workload_shape.to_object``), as the Workload object to keep.
    A pod group's (``pods``) is owned by every pod of the group, as Kueue's: its job uid is no
    object's, and the garbage collector removes it with the last of them. An ``elastic`` job's
    carries Kueue's annotation saying so."""
    meta = obj["metadata"]
    owners = list(meta["ownerReferences"])
    if pods and workload_crd.job_uid_of(meta["labels"][JOB_UID_LABEL]).startswith(workload_crd.POD_GROUP_UID):
        owners = [{"apiVersion": "v1", "kind": "Pod", "name": p.name, "uid": p.uid} for p in pods]
    return {
        "apiVersion": API_VERSION,
        "kind": workload_crd.KIND,
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": dict(meta["labels"]),
            **({"annotations": {jobs.ELASTIC_JOB: "true"}} if elastic else {}),
            "ownerReferences": owners,
        },
        "spec": obj["spec"],
        "status": obj["status"],
    }


@dataclass(frozen=True, slots=True)
class Shown:
    """What this replica keeps of one Workload object: enough to tell whether it matches the store
    (digests), never the object itself (100,000 of them would be most of the controller's memory)."""

    name: str
    namespace: str
    uid: str
    fixed: int  # digest of the spec but ``active`` (what only the job decides)
    active: bool
    status: int  # digest of the status
    status_keys: frozenset[str]  # (a merge patch sets the ones gone to null)
    conditions: tuple[tuple[str, str, str], ...]  # (type, status, reason): Events for their transitions
    # where it counts in ``kueue_finished_workloads`` (cluster_queue, namespace, queue name), if finished
    finished: tuple[str, str, str] | None = None
    owners: tuple[str, ...] = ()  # its owners' uids, sorted (a pod group's pods come and go)

    @classmethod
    def of(cls, obj: Obj) -> Shown:
        meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
        conditions = _shared(
            tuple(
                (str(c.get("type")), str(c.get("status")), str(c.get("reason")))
                for c in status.get("conditions") or []
                if isinstance(c, dict)
            )
        )
        namespace = str(meta.get("namespace") or "")
        finished = None
        if any(kind == "Finished" and value == "True" for kind, value, _ in conditions):
            cluster_queue = str((status.get("admission") or {}).get("clusterQueue") or "")
            finished = (cluster_queue, namespace, str(spec.get("queueName") or ""))
        return cls(
            str(meta.get("name") or ""),
            namespace,
            str(meta.get("uid") or ""),
            _digest(_fixed(spec)),
            spec.get("active", True) is not False,
            _digest(status),
            _shared(frozenset(status)),
            conditions,
            finished,
            tuple(sorted(str(o.get("uid")) for o in meta.get("ownerReferences") or [] if isinstance(o, dict))),
        )

    def same(self, other: Shown | None) -> bool:
        """The same content (whatever the object's uid)."""
        return other is not None and (self.fixed, self.active, self.status) == (other.fixed, other.active, other.status)


_SHARED: dict[Any, Any] = {}
_SHARED_MAX = 4096  # distinct values kept (conditions and status keys come in a few dozen combinations)


def _shared(value: T) -> T:
    """One instance of each equal ``value`` (a Shown's conditions, its status keys): a controller
    keeps a Shown per Workload object, 100,000 of them, mostly with the same few of each."""
    found = _SHARED.get(value)
    if found is not None:
        return cast(T, found)
    if len(_SHARED) < _SHARED_MAX:
        _SHARED[value] = value
    return value


def _fixed(spec: Obj) -> dict[str, Any]:
    """What of a Workload's spec only its job decides (all but ``active``)."""
    return {k: v for k, v in spec.items() if k != "active"}


def _digest(value: Any) -> int:
    return hash(json.dumps(value, sort_keys=True, separators=(",", ":")))
