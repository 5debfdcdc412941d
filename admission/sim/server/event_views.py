"""``events.k8s.io/v1`` Events as a view of the core ``v1`` Events, as the real API server serves them.

A real kube-apiserver keeps one storage of Events and serves it through two APIs: core ``v1``
(``involvedObject``, ``message``, ``source``, ``firstTimestamp``...) and ``events.k8s.io/v1``
(``regarding``, ``note``, ``deprecatedSource``, ``deprecatedFirstTimestamp``...), converting
field by field (Kubernetes' ``pkg/apis/events/v1`` conversion). So an Event posted through one
is listed, watched and read through the other: ``kubectl get events.v1.events.k8s.io`` shows the
Events Turnstile posts through core ``v1``. The simulated server stores core Events only and
converts at the edge with the two functions here; the API server routes the newer API's requests
to the core storage through them.
"""

from __future__ import annotations

from typing import Any

from admission.sim.server.objects import Obj

GROUP_VERSION = "events.k8s.io/v1"

# core v1 field -> events.k8s.io/v1 field (the rest keep their names: reason, type, action,
# reportingInstance, related, eventTime, series, metadata)
_RENAMED = {
    "involvedObject": "regarding",
    "message": "note",
    "source": "deprecatedSource",
    "firstTimestamp": "deprecatedFirstTimestamp",
    "lastTimestamp": "deprecatedLastTimestamp",
    "count": "deprecatedCount",
    "reportingComponent": "reportingController",
}
_BACK = {new: old for old, new in _RENAMED.items()}


def to_events_v1(core: Obj) -> Obj:
    """A core ``v1`` Event as ``events.k8s.io/v1`` shows it."""
    out: dict[str, Any] = {"apiVersion": GROUP_VERSION, "kind": "Event"}
    for key, value in core.items():
        if key in ("apiVersion", "kind"):
            continue
        if value in (None, "", 0) and key in ("count", "message", "reportingComponent"):
            continue  # (omitempty, as the real conversion leaves them out)
        out[_RENAMED.get(key, key)] = value
    return out


def to_core(event: Obj) -> Obj:
    """An ``events.k8s.io/v1`` Event as the core ``v1`` Event it is stored as."""
    out: dict[str, Any] = {"apiVersion": "v1", "kind": "Event"}
    for key, value in event.items():
        if key not in ("apiVersion", "kind"):
            out[_BACK.get(key, key)] = value
    return out
