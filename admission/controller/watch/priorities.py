"""Kubernetes PriorityClasses as the cluster has them: a job's priority when it names no WorkloadPriorityClass.

Kueue's order (``queues.cycle.scheduler.Scheduler.priority_of``): a workload's WorkloadPriorityClass
label, else its pod template's ``priorityClassName`` (a ``scheduling.k8s.io/v1`` PriorityClass),
else the PriorityClass marked ``globalDefault``, else 0. Every replica watches them (a built-in
kind: always served); the leader's scheduler gets each change at once, and a new term gets them
all when it starts. As in Kueue, a workload keeps the priority it was created with.
"""

from __future__ import annotations

from collections.abc import Callable

from admission.kube.client import Kube, Obj, ResourceRef
from admission.kube.informer import Informer
from queues.cycle.scheduler import Scheduler

PRIORITY_CLASSES = ResourceRef("scheduling.k8s.io/v1", "PriorityClass", "priorityclasses", namespaced=False)


class PriorityClasses:
    def __init__(self, kube: Kube, scheduler: Callable[[], Scheduler | None]) -> None:
        self.classes: dict[str, tuple[int, bool]] = {}  # name -> (value, globalDefault)
        self.scheduler = scheduler  # the leader's, while this replica leads
        self.informer = Informer(kube, PRIORITY_CLASSES, self._on)

    def _on(self, kind: str, obj: Obj) -> None:
        name = str((obj.get("metadata") or {}).get("name"))
        if kind == "DELETED":
            self.classes.pop(name, None)
        else:
            self.classes[name] = (int(obj.get("value") or 0), bool(obj.get("globalDefault")))
        scheduler = self.scheduler()
        if scheduler is not None:
            self.apply(scheduler)

    def apply(self, scheduler: Scheduler) -> None:
        scheduler.intake.set_pod_priorities(self.classes)
