"""The JSON patch operations that make one pod set carry exactly a ``PodSetInfo``: its node selector,
tolerations, Turnstile's pod annotations and topology gate, written where its kind keeps them
(``queues.podsets.layouts.Directives``: a pod template's fields, or a SparkApplication's Spark pod
spec). Only what differs from the job as last seen (its ``JobView``) is written, and only Turnstile's
annotations and gate are touched among others a user or an operator put there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from admission.jobs.job_fields import POD_ANNOTATIONS
from admission.kube.client import Obj
from queues.placement.pinning import TOPOLOGY_GATE
from queues.podsets import jobs
from queues.podsets.layouts import Directives


@dataclass(frozen=True, slots=True)
class PodSetInfo:
    """What a pod set's template must carry: node selector, tolerations, the annotations of
    admission checks and topology placement (Kueue's PodSetInfo; ``POD_ANNOTATIONS`` are
    Turnstile's to set and remove) and whether its pods wait for pinning (``TOPOLOGY_GATE``)."""

    name: str
    node_selector: Mapping[str, str]
    tolerations: Sequence[Mapping[str, Any]]
    annotations: Mapping[str, str] = field(default_factory=dict)
    topology_gate: bool = False  # placed by topology: its pods are pinned to their nodes (``queues.placement.pinning``)


@dataclass(frozen=True, slots=True)
class Written:
    """What a pod set carries now, as its job's view read it (``JobView``'s entries for it)."""

    node_selector: Mapping[str, str] | None
    tolerations: Sequence[Obj] | None
    meta: tuple[bool, Mapping[str, str]] | None  # (its annotations map exists, Turnstile's among them); None: no holder
    gates: Sequence[str]


def pod_set_ops(now: Written, info: PodSetInfo, pointer: str, where: Directives) -> list[Obj]:
    """The operations for the pod set at ``pointer`` (its ``JobInfo.template_paths`` entry)."""
    ops: list[Obj] = []
    for path, value, present in (
        (where.node_selector, dict(info.node_selector), now.node_selector is not None),
        (where.tolerations, [dict(t) for t in info.tolerations], now.tolerations is not None),
    ):
        if value:
            ops.append({"op": "add", "path": pointer + path, "value": value})
        elif present:
            ops.append({"op": "remove", "path": pointer + path})
    ops.extend(_annotation_ops(now, info, pointer + where.annotations_holder))
    if where.gates is not None:
        ops.extend(_gate_ops(now, info, pointer + where.gates))
    return ops


def _gate_ops(now: Written, info: PodSetInfo, gates: str) -> list[Obj]:
    """JSON patch operations that add or remove ``TOPOLOGY_GATE`` on a template (``gates``: its
    schedulingGates' pointer); gates of others are left as they are."""
    current = list(now.gates)
    if info.topology_gate and TOPOLOGY_GATE not in current:
        if current:
            return [{"op": "add", "path": f"{gates}/-", "value": {"name": TOPOLOGY_GATE}}]
        return [{"op": "add", "path": gates, "value": [{"name": TOPOLOGY_GATE}]}]
    if not info.topology_gate and TOPOLOGY_GATE in current:
        index = current.index(TOPOLOGY_GATE)
        if len(current) == 1:
            return [{"op": "remove", "path": gates}]
        return [
            {"op": "test", "path": f"{gates}/{index}/name", "value": TOPOLOGY_GATE},
            {"op": "remove", "path": f"{gates}/{index}"},
        ]
    return []


def _annotation_ops(now: Written, info: PodSetInfo, holder: str) -> list[Obj]:
    """JSON patch operations that make the POD_ANNOTATIONS of the pod set's annotations (held by
    ``holder``: a template's metadata) exactly ``info.annotations``."""
    meta = now.meta
    has_meta, has_notes, current = (meta is not None, meta[0], meta[1]) if meta is not None else (False, False, {})
    wanted = dict(info.annotations)
    if wanted == current:
        return []
    if not has_meta:
        return [{"op": "add", "path": holder, "value": {"annotations": wanted}}] if wanted else []
    if not has_notes:
        return [{"op": "add", "path": f"{holder}/annotations", "value": wanted}] if wanted else []
    ops: list[Obj] = []
    base = f"{holder}/annotations/"
    for key in POD_ANNOTATIONS:
        if key in wanted and current.get(key) != wanted[key]:
            ops.append({"op": "add", "path": base + jobs.pointer_token(key), "value": wanted[key]})
        elif key not in wanted and key in current:
            ops.append({"op": "remove", "path": base + jobs.pointer_token(key)})
    return ops
