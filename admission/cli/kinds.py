"""Kind names as users type them (``cq``, ``clusterqueues``, ``ClusterQueue``...) and as Kueue spells them."""

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


def resolve(name: str) -> str:
    kind = KINDS.get(name.lower())
    if kind is None:
        choices = ", ".join(sorted({n for names in _ALIASES.values() for n in names if len(n) > 3}))
        raise UnknownKind(f"unknown kind {name!r}; one of: {choices}")
    return kind


def singular(kind: str) -> str:
    return kind.lower()
