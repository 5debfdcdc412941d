"""Two small values of the integrations' protocol (``admission.jobs.base``): where pods are.

Why apart: each is a plain value a view holds or an integration module builds, without the
protocol itself:

- ``PodRef``: one pod of a plain-pod workload, as the enactor ungates or deletes it;
- ``PodsOf``: how an elastic kind's pods are found and which pod set each is of.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from admission.kube.client import Obj


@dataclass(frozen=True, slots=True)
class PodRef:
    """One pod of a pod workload, as the enactor needs it."""

    name: str
    uid: str
    pod_set: str  # ``main``, or the pod's role in its group
    gated: bool  # held by Turnstile's scheduling gate
    live: bool  # neither finished nor being deleted
    obj: Obj  # the pod as last seen (an ungating patch is computed from it)

    @property
    def running(self) -> bool:
        """Ungated and alive: it runs (or is being scheduled) under some admission."""
        return self.live and not self.gated


@dataclass(frozen=True, slots=True)
class PodsOf:
    """How an elastic kind's pods are found (``admission.controller.elastic_pods``): the label
    selector of a job's pods (from the job: its uid, its name, or the RayCluster its status names;
    None while it has none), and the pod set a pod is of."""

    selector: Callable[[Obj], str | None]
    pod_set: Callable[[Obj], str]
