"""What ``describe workload`` says of one stored workload's pod sets, a line each: its pods (as
admitted and asked), where topology-aware placement put them, and what its DRA claims were charged.
Read from a row of ``admission.store.read_models.workload_rows``; ``admission.views`` prints them
(the CLI and the dashboard's workload page)."""

from __future__ import annotations

from typing import Any

from admission.store import workloads as store
from queues import quantity


def placement(r: dict[str, Any]) -> str:
    """Where topology-aware placement put each pod set's pods: ``main: r0-n1 x4, r0-n2 x2``."""
    placement = ((r.get("assigned_flavors") or {}) if r["state"] != "Pending" else {}).get("placement") or {}
    return "; ".join(
        f"{ps}: " + ", ".join(f"{node} x{pods}" for node, pods in sorted(nodes.items()))
        for ps, nodes in sorted(placement.items())
    )


def devices(r: dict[str, Any]) -> str:
    """What each pod set's DRA claims were charged, per pod: ``main: claim gpus (ResourceClaimTemplate
    two-gpus): whole-gpus 2``, and where a prioritized list costs less on a flavor, what it costs there
    (``, on flavor h100 whole-gpus 1``); a claim not charged says so (the Waiting line says why)."""
    parts = []
    for ps in store.pod_sets_from_json(r["pod_sets"]):
        if not ps.claims:
            continue
        named = ", ".join(
            f"{c.name} (ResourceClaimTemplate {c.template})" if c.template else f"{c.name} (ResourceClaim {c.claim})"
            for c in ps.claims
        )
        charged = ", ".join(f"{res} {quantity.format_milli(v)}" for res, v in sorted(ps.devices.items()))
        what = "not charged" if ps.unaccounted else f"{charged or 'nothing'} per pod"
        for flavor, narrowed in sorted(ps.by_flavor.items()):  # (a prioritized list, on a flavor serving some of it)
            less = {r: v for r, v in ps.devices_on(flavor).items() if r in narrowed}
            what += (
                f", on flavor {flavor} {', '.join(f'{r} {quantity.format_milli(v)}' for r, v in sorted(less.items()))}"
            )
        parts.append(f"{ps.name}: claim{'s' if len(ps.claims) > 1 else ''} {named}: {what}")
    return "; ".join(parts)


def pods(r: dict[str, Any]) -> str:
    """Each pod set's pods: as admitted (fewer where partially, Kueue's job-min-parallelism) and asked."""
    counts = ((r.get("assigned_flavors") or {}) if r["state"] != "Pending" else {}).get("counts") or {}
    parts = []
    for ps in store.pod_sets_from_json(r["pod_sets"]):
        admitted = counts.get(ps.name)
        text = f"{ps.name}: {ps.count}" if admitted is None else f"{ps.name}: {admitted} of {ps.count} (partial)"
        if ps.min_count is not None:
            text += f", at least {ps.min_count}"
        parts.append(text)
    return "; ".join(parts)
