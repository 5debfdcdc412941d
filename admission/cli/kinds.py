"""Kind names as users type them (``cq``, ``clusterqueues``, ``ClusterQueue``...) and as Kueue and
kubectl spell them (``workloads.kueue.x-k8s.io``)."""

from __future__ import annotations

KINDS: dict[str, str] = {}
_ALIASES = {
    "ClusterQueue": ("clusterqueue", "clusterqueues", "cq"),
    "LocalQueue": ("localqueue", "localqueues", "lq"),
    "ResourceFlavor": ("resourceflavor", "resourceflavors", "rf", "flavor", "flavors"),
    "Cohort": ("cohort", "cohorts"),
    "WorkloadPriorityClass": ("workloadpriorityclass", "workloadpriorityclasses", "wpc"),
    "AdmissionCheck": ("admissioncheck", "admissionchecks", "ac"),
    "ProvisioningRequestConfig": ("provisioningrequestconfig", "provisioningrequestconfigs", "prc"),
    "Topology": ("topology", "topologies"),
    "Workload": ("workload", "workloads", "wl"),
}
for _kind, _names in _ALIASES.items():
    KINDS[_kind.lower()] = _kind
    for _n in _names:
        KINDS[_n] = _kind


class UnknownKind(ValueError):
    pass


GROUPS = ("kueue.x-k8s.io", "turnstile.dev")  # kubectl's fully qualified names: workloads.kueue.x-k8s.io


def resolve(name: str) -> str:
    base, _, group = name.lower().partition(".")
    kind = KINDS.get(base) if group in ("", *GROUPS) else None
    if kind is not None and group == "turnstile.dev" and kind != "Workload":
        kind = None  # (Turnstile serves only workloads under its own group)
    if kind is None:
        choices = ", ".join(sorted({n for names in _ALIASES.values() for n in names if len(n) > 3}))
        raise UnknownKind(f"unknown kind {name!r}; one of: {choices}")
    return kind


def singular(kind: str) -> str:
    return kind.lower()
