"""DRA's objects as the cluster has them: what a job's device claims charge.

A pod claims devices through a ResourceClaimTemplate in its namespace; the core charges each
device as the resource its DeviceClass maps to (``queues.dra``, the mappings from
``TURNSTILE_DEVICE_CLASS_MAPPINGS``), or, for a mapping charged by a counter or by capacity, what
the matching devices of the ResourceSlices consume or give (their DeviceClass's selectors say
which match); a request's own selectors are checked against those devices too (Kueue's). Every
replica watches the templates, DeviceClasses and ResourceSlices (served from Kubernetes 1.34 on: on
an older cluster they are absent, and a job claiming devices waits, never admitted uncounted); the
leader's scheduler gets each change at once, and a new term gets them all when it starts. A
template that comes, changes or goes marks the jobs that claim through it (a DeviceClass or a
ResourceSlice, every job that claims devices) whose workload does not hold quota, so the next
step makes their waiting workloads again: one waiting Misconfigured for a missing template is
charged once it exists. Where DRA is mapped, the Nodes' labels are watched too: they say which
nodes each flavor has, and so what a prioritized list (``firstAvailable``) is charged on it
(``queues.dra.alternatives``). As in Kueue, a workload admitted keeps the charge it was admitted with,
so its job is not looked at again for it (a driver republishing its slices under 10,000 running
jobs costs a step nothing).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from admission.controller.watch.changes import Changes
from admission.controller.watch.jobcache import JobCache
from admission.kube.client import Kube, Obj, ResourceRef
from admission.kube.informer import Informer
from queues import errors
from queues.cycle.scheduler import Scheduler
from queues.dra import charges, slices
from queues.dra.mappings import Mappings
from queues.podsets.transformations import NONE as NO_TRANSFORMATIONS
from queues.podsets.transformations import Transformations

log = logging.getLogger(__name__)

RESOURCE_CLAIM_TEMPLATES = ResourceRef(charges.API_VERSION, "ResourceClaimTemplate", "resourceclaimtemplates")
DEVICE_CLASSES = ResourceRef(charges.API_VERSION, "DeviceClass", "deviceclasses", namespaced=False)
RESOURCE_SLICES = ResourceRef(charges.API_VERSION, "ResourceSlice", "resourceslices", namespaced=False)
NODES = ResourceRef("v1", "Node", "nodes", namespaced=False)


class DeviceCatalog:
    def __init__(
        self,
        kube: Kube,
        jobs: JobCache,
        changes: Changes,
        mappings: Mappings,
        scheduler: Callable[[], Scheduler | None],
        transformations: Transformations = NO_TRANSFORMATIONS,
    ) -> None:
        self.jobs = jobs
        self.transformations = transformations  # Kueue's resources.transformations (applied before the claims)
        self.changes = changes
        self.mappings = mappings
        self.scheduler = scheduler  # the leader's, while this replica leads
        self.templates: dict[tuple[str, str], charges.ClaimTemplate] = {}
        self.classes: dict[str, tuple[str, ...]] = {}  # DeviceClass -> its selectors
        self.slices: dict[str, slices.Slice] = {}
        self._devices: charges.Devices | None = None  # built when asked for, after a change
        self.informer = Informer(kube, RESOURCE_CLAIM_TEMPLATES, self._on, optional=True)
        self.informers = [
            self.informer,
            Informer(kube, DEVICE_CLASSES, self._on_class, optional=True),
            Informer(kube, RESOURCE_SLICES, self._on_slice, optional=True),
        ]
        # the Nodes' labels say each flavor's nodes, which is what a prioritized list is charged on
        # it (``queues.dra.alternatives``); watched only where DRA is mapped (a term starts once listed)
        self.node_labels: dict[str, dict[str, str]] = {}
        self.nodes: Informer | None = None
        if mappings.reads_slices():
            self.nodes = Informer(kube, NODES, self._on_node)
            self.informers.append(self.nodes)

    def _on_node(self, kind: str, obj: Obj) -> None:
        """Keep ``node_labels`` (which the charges read as they are); a node that comes or goes, or
        whose labels a flavor names change, marks the jobs with claims (a label no flavor names,
        such as a GPU feature discovery timestamp, marks nothing)."""
        name = str((obj.get("metadata") or {}).get("name"))
        labels = {str(k): str(v) for k, v in ((obj.get("metadata") or {}).get("labels") or {}).items()}
        before = self.node_labels.pop(name, None) if kind == "DELETED" else self.node_labels.get(name)
        if kind != "DELETED":
            self.node_labels[name] = labels
        scheduler = self.scheduler()
        if before == labels or scheduler is None:
            return
        if before is not None and kind != "DELETED":
            keys = {k for f in scheduler.snapshot.flavors.values() for k in f.node_labels}
            if all(before.get(k) == labels.get(k) for k in keys):
                return
        self._changed(None)

    def _on_class(self, kind: str, obj: Obj) -> None:
        name = str((obj.get("metadata") or {}).get("name"))
        if kind == "DELETED":
            self.classes.pop(name, None)
        else:
            self.classes[name] = slices.class_selectors(obj)
        self._changed(None)

    def _on_slice(self, kind: str, obj: Obj) -> None:
        if not self.mappings.reads_slices():
            return  # (without mappings, no claim is charged: the devices are not read)
        name = str((obj.get("metadata") or {}).get("name"))
        if kind == "DELETED":
            self.slices.pop(name, None)
        else:
            try:
                self.slices[name] = slices.Slice.from_object(obj)
            except errors.Invalid as exc:
                log.warning("ResourceSlice %s cannot be read: %s", name, exc)
                self.slices.pop(name, None)
        self._changed(None)

    def _on(self, kind: str, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name")))
        if kind == "DELETED":
            self.templates.pop(key, None)
        else:
            try:
                self.templates[key] = charges.ClaimTemplate.from_object(obj)
            except errors.Invalid as exc:  # (the API server validates them: a defect, said and left out)
                log.warning("ResourceClaimTemplate %s/%s cannot be read: %s", *key, exc)
                self.templates.pop(key, None)
        self._changed(key)

    def _changed(self, template: tuple[str, str] | None) -> None:
        """Charge from what the cluster has now; the jobs it may change the charge of are marked
        (those claiming through ``template``; every job with claims when it is None)."""
        self._devices = None
        scheduler = self.scheduler()
        if scheduler is None:
            return  # (a term begins by looking at every job again)
        self.apply(scheduler)
        if template is None:  # (the devices changed: what they say of GPU-hours may too, ``CardShares``)
            self.changes.wake.set()
        for uid, view in self.jobs.views.items():
            info = view.info
            if info is None or (template is not None and info.namespace != template[0]):
                continue
            held = scheduler.workloads.get(info.key)
            if held is not None and held.admission is not None:
                continue  # (a workload holding quota keeps the charge it was admitted with)
            if any(template is None or c.template == template[1] for ps in info.pod_sets for c in ps.claims):
                self.changes.job(uid)  # made again with the cluster's DRA objects as they are now

    @property
    def devices(self) -> charges.Devices:
        """What charges claims, from the DRA objects as they are now (built once per change that is
        asked about: the first list of thousands of templates does not rebuild it thousands of times)."""
        if self._devices is None:
            listed = self.nodes is not None and self.nodes.synced.is_set()
            self._devices = charges.Devices.of(
                self.mappings,
                self.templates.values(),
                self.classes,
                self.slices.values(),
                self.transformations,
                self.node_labels if listed else None,
            )
        return self._devices

    def apply(self, scheduler: Scheduler) -> None:
        """The scheduler charges new workloads' claims, and places pods by topology, with the DRA
        objects as they are now (the waiting ones are made again by the step: their jobs were marked)."""
        scheduler.intake.use_devices(self.devices)
