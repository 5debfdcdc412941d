"""DRA's ResourceClaimTemplates as the cluster has them: what a job's device claims charge.

A pod claims devices through a ResourceClaimTemplate in its namespace; the core charges each
device as the resource its DeviceClass maps to (``queues.dra``, the mappings from
``TURNSTILE_DEVICE_CLASS_MAPPINGS``). Every replica watches the templates (the kind is served from
Kubernetes 1.34 on: on an older cluster it is absent, and a job claiming devices waits, never
admitted uncounted); the leader's scheduler gets each change at once, and a new term gets them all
when it starts. A template that comes, changes or goes marks the jobs that claim through it, so
the next step makes their workloads again: one waiting Misconfigured for a missing template is
charged once it exists. As in Kueue, a workload admitted keeps the charge it was admitted with.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from admission.controller.changes import Changes
from admission.controller.jobcache import JobCache
from admission.kube.client import Kube, Obj, ResourceRef
from admission.kube.informer import Informer
from queues import errors
from queues.cycle.scheduler import Scheduler
from queues.dra import charges
from queues.dra.mappings import Mappings

log = logging.getLogger(__name__)

RESOURCE_CLAIM_TEMPLATES = ResourceRef(charges.API_VERSION, "ResourceClaimTemplate", "resourceclaimtemplates")


class ClaimTemplates:
    def __init__(
        self,
        kube: Kube,
        jobs: JobCache,
        changes: Changes,
        mappings: Mappings,
        scheduler: Callable[[], Scheduler | None],
    ) -> None:
        self.jobs = jobs
        self.changes = changes
        self.mappings = mappings
        self.scheduler = scheduler  # the leader's, while this replica leads
        self.templates: dict[tuple[str, str], charges.ClaimTemplate] = {}
        self.devices = charges.Devices(mappings)
        self.informer = Informer(kube, RESOURCE_CLAIM_TEMPLATES, self._on, optional=True)

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
        self.devices = charges.Devices(self.mappings, dict(self.templates))
        scheduler = self.scheduler()
        if scheduler is None:
            return  # (a term begins by looking at every job again)
        self.apply(scheduler)
        namespace, name = key
        for uid, view in self.jobs.views.items():
            info = view.info
            claims = (
                info is not None
                and info.namespace == namespace
                and any(c.template == name for ps in info.pod_sets for c in ps.claims)
            )
            if claims:
                self.changes.job(uid)  # made again with the template as it is now

    def apply(self, scheduler: Scheduler) -> None:
        """The scheduler charges new workloads' claims with the templates as they are now (the
        waiting ones are made again by the step: their jobs were marked)."""
        scheduler.devices = self.devices
