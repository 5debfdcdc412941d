"""Pods -> pod workloads: the controller's memory of the pods Turnstile holds.

The pod informer (pods labelled ``kueue.x-k8s.io/managed=true``: the webhook labels every pod it
gates) feeds ``observe``; each event rebuilds the view of the workload the pod belongs to (itself,
or its group) in the ``JobCache``, so the steps, the core and the enactor see pod workloads as they
see jobs (``admission.jobs.pods``).

A group's identity. A group is one workload from its first complete sighting until its last pod is
gone; its owner re-creating the pods after that (a StatefulSet after an eviction) makes a new
workload, queued afresh, as Kueue's pod-group Workload is garbage-collected with its pods. The
workload's uid is ``podgroup:`` plus the uid of the group's oldest pod when first seen complete,
kept in memory while any pod of the group lives. After a controller restart it is taken again from
the oldest pod: the same, unless that very pod was replaced while the group ran (then the running
group is seen as a new workload: written down in docs/pods.md).

A group not complete yet (fewer pods than its total count, without fast admission) is no workload;
once it was one, it stays one with its last known pod sets while its pods come and go.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from admission.controller.watch.jobcache import JobCache
from admission.jobs import pods as pod_integration
from admission.kube.client import Obj
from queues import errors
from queues.kueue import workload_crd
from queues.podsets import jobs, pods

log = logging.getLogger(__name__)


def _created(pod: Obj) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return (str(meta.get("creationTimestamp") or ""), str(meta.get("name")))


@dataclass(slots=True)
class _Group:
    uid: str | None = None  # the workload's uid once it is one
    members: dict[str, Obj] = field(default_factory=dict)  # pod uid -> pod
    info: jobs.JobInfo | None = None  # the last good reading


@dataclass(slots=True)
class PodGroups:
    jobs: JobCache
    changed: Callable[[str], None]  # a workload's view changed (its uid)
    groups: dict[str, _Group] = field(default_factory=dict)  # namespace/group -> its pods
    group_of: dict[str, str] = field(default_factory=dict)  # pod uid -> namespace/group

    def totals(self, namespace: str, group: str) -> set[int]:
        """The total counts the group's known pods carry (the webhook refuses a pod that disagrees)."""
        found = self.groups.get(f"{namespace}/{group}")
        out: set[int] = set()
        for pod in found.members.values() if found is not None else ():
            try:
                out.add(pods.total_count(pod))
            except errors.Invalid:
                continue
        return out

    def observe(self, kind: str, pod: Obj) -> None:
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid"))
        namespace = str(meta.get("namespace") or "default")
        name = pods.group_name(pod)
        was = self.group_of.get(uid)
        if was is not None and (kind == "DELETED" or was != f"{namespace}/{name}"):
            del self.group_of[uid]
            self._regroup(was, drop=uid)
        if name is None:
            if kind == "DELETED":
                if self.jobs.drop(uid) is not None:
                    self.changed(uid)
                return
            self.jobs.put(uid, pod_integration.single(pod))
            self.changed(uid)
            return
        if kind == "DELETED":
            return
        key = f"{namespace}/{name}"
        self.group_of[uid] = key
        self.groups.setdefault(key, _Group()).members[uid] = pod
        self._regroup(key)

    def _regroup(self, key: str, drop: str | None = None) -> None:
        group = self.groups.get(key)
        if group is None:
            return
        if drop is not None:
            group.members.pop(drop, None)
        namespace, _, name = key.partition("/")
        members = sorted(group.members.values(), key=_created)
        if not members:
            del self.groups[key]
            if group.uid is not None and self.jobs.drop(group.uid) is not None:
                self.changed(group.uid)
            return
        whole = pods.Group(namespace, name, tuple(members))
        problems: list[str] = []
        if group.uid is None:
            if not pods.complete(whole) and not pods.group_problems(whole):
                return  # not a workload until all its pods exist
            group.uid = workload_crd.POD_GROUP_UID + str((members[0].get("metadata") or {}).get("uid"))
        try:
            group.info = pods.group_info(whole)
        except errors.Invalid as exc:
            problems = [str(e) for e in exc.errors]  # a group that was well-formed keeps its last reading
        total = max(self.totals(namespace, name) or {1})
        view = pod_integration.view(
            group.uid, namespace, name, members, group.info, problems if group.info is None else (),
            grouped=True, total=total, serving=whole.serving,
        )  # fmt: skip
        if problems and group.info is not None:
            log.warning("pod group %s: %s", key, "; ".join(problems))
        self.jobs.put(group.uid, view)
        self.changed(group.uid)
