"""A scenario's ``nodes``: listed one by one, or generated racks of identical GPU nodes.

scenario.md lists nodes as ``{name, labels, capacity, taints}``; a big cluster is easier to write
as a generator entry, expanded here into the same shapes::

    nodes:
      - generate: {racks: 8, nodesPerRack: 8, gpusPerNode: 8}
        # optional: blocks (racks per block when given: racks), namePrefix, labels, capacity,
        # rackLabel (default cloud.provider.com/topology-rack), blockLabel (…/topology-block)

Each generated node is named ``<prefix>b<block>-r<rack>-n<node>`` (``r<rack>-n<node>`` without
blocks), labelled with its rack (and block) and ``kubernetes.io/hostname`` (its name, as a
kubelet labels its node), with ``nvidia.com/gpu: gpusPerNode`` besides ``capacity``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from queues import errors, quantity
from queues.dra import slices
from queues.errors import FieldError
from queues.placement.nodes import HOSTNAME

RACK_LABEL = "cloud.provider.com/topology-rack"
BLOCK_LABEL = "cloud.provider.com/topology-block"
GPU = "nvidia.com/gpu"
MAX_NODES = 100_000
_GENERATOR_FIELDS = {
    "racks", "nodesPerRack", "gpusPerNode", "blocks", "namePrefix", "labels", "capacity", "rackLabel", "blockLabel",
}  # fmt: skip


def parse(raw: Any, problems: list[FieldError]) -> list[Mapping[str, Any]]:
    """The scenario's nodes as ``{name, labels, capacity, taints}`` shapes; problems appended."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        problems.append(FieldError("nodes", "must be a list of nodes"))
        return []
    out: list[Mapping[str, Any]] = []
    for i, entry in enumerate(raw):
        path = f"nodes[{i}]"
        if not isinstance(entry, Mapping):
            problems.append(FieldError(path, "must be a node {name, labels, capacity} or {generate: {...}}"))
        elif "generate" in entry:
            out += _generate(entry["generate"], f"{path}.generate", problems)
        else:
            node = _node(entry, path, problems)
            if node is not None:
                out.append(node)
        if len(out) > MAX_NODES:
            problems.append(FieldError(path, f"more than {MAX_NODES:,} nodes; simulate a smaller cluster"))
            return []
    seen: set[str] = set()
    for shape in out:
        if shape["name"] in seen:
            problems.append(FieldError("nodes", f"node {shape['name']!r} is listed twice"))
        seen.add(shape["name"])
    return out


NODE_FIELDS = ("name", "labels", "capacity", "taints", "unschedulable", "resourceSlices")


def _node(entry: Mapping[str, Any], path: str, problems: list[FieldError]) -> dict[str, Any] | None:
    name = entry.get("name")
    before = len(problems)
    for key in entry:
        if key not in NODE_FIELDS:
            problems.append(FieldError(f"{path}.{key}", f"unknown field; a node has {', '.join(NODE_FIELDS)}"))
    if not isinstance(name, str) or not name:
        problems.append(FieldError(f"{path}.name", "required: the node's name"))
    labels = _strings(entry.get("labels"), f"{path}.labels", problems)
    capacity = _quantities(entry.get("capacity"), f"{path}.capacity", problems)
    taints = entry.get("taints") or []
    if not isinstance(taints, list) or not all(isinstance(t, Mapping) for t in taints):
        problems.append(FieldError(f"{path}.taints", "must be a list of {key, value, effect}"))
    published = None
    if entry.get("resourceSlices") is not None:
        published = _slices(str(name), entry["resourceSlices"], f"{path}.resourceSlices", problems)
    if len(problems) > before:
        return None
    node = {"name": name, "labels": {HOSTNAME: name, **labels}, "capacity": capacity, "taints": list(taints)}
    if entry.get("unschedulable"):
        node["unschedulable"] = True
    if published is not None:
        node["resourceSlices"] = published
    return node


def _slices(node: str, raw: Any, path: str, problems: list[FieldError]) -> list[dict[str, Any]]:
    """The ResourceSlices a DRA driver publishes for ``node`` (scenario.md: each a ResourceSlice's
    spec), as objects: named ``<node>-<i>``, ``nodeName`` the node's, one pool per node unless said."""
    if not isinstance(raw, list) or not all(isinstance(s, Mapping) for s in raw):
        problems.append(FieldError(path, "must be a list of ResourceSlice specs {driver, pool, devices}"))
        return []
    out = []
    for i, spec in enumerate(raw):
        pool = {"name": node, "generation": 1, "resourceSliceCount": len(raw), **dict(spec.get("pool") or {})}
        obj = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{i}"},
            "spec": {**dict(spec), "nodeName": node, "pool": pool},
        }
        try:
            slices.Slice.from_object(obj)
        except errors.Invalid as exc:
            problems.extend(FieldError(f"{path}[{i}].{e.path.removeprefix('spec.')}", e.message) for e in exc.errors)
            continue
        out.append(obj)
    return out


def _generate(spec: Any, path: str, problems: list[FieldError]) -> list[dict[str, Any]]:
    if not isinstance(spec, Mapping):
        problems.append(FieldError(path, "must be {racks, nodesPerRack, gpusPerNode}"))
        return []
    unknown = sorted(set(spec) - _GENERATOR_FIELDS)
    if unknown:
        problems.append(
            FieldError(f"{path}.{unknown[0]}", f"unknown field (known: {', '.join(sorted(_GENERATOR_FIELDS))})")
        )
    counts: dict[str, int] = {}
    for key, low in (("racks", 1), ("nodesPerRack", 1), ("gpusPerNode", 0), ("blocks", 1)):
        value = spec.get(key, 1 if key == "blocks" else None)
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            problems.append(FieldError(f"{path}.{key}", f"required: a whole number >= {low}, not {value!r}"))
            return []
        counts[key] = value
    if counts["racks"] % counts["blocks"]:
        problems.append(
            FieldError(f"{path}.blocks", f"{counts['blocks']} blocks do not divide {counts['racks']} racks")
        )
        return []
    if counts["racks"] * counts["nodesPerRack"] > MAX_NODES:
        problems.append(FieldError(path, f"more than {MAX_NODES:,} nodes; simulate a smaller cluster"))
        return []
    labels = _strings(spec.get("labels"), f"{path}.labels", problems)
    capacity = _quantities(spec.get("capacity"), f"{path}.capacity", problems)
    prefix = str(spec.get("namePrefix") or "")
    rack_label = str(spec.get("rackLabel") or RACK_LABEL)
    block_label = str(spec.get("blockLabel") or BLOCK_LABEL)
    per_block = counts["racks"] // counts["blocks"]
    out = []
    for rack in range(counts["racks"]):
        block = rack // per_block
        for n in range(counts["nodesPerRack"]):
            where = f"b{block}-r{rack}" if counts["blocks"] > 1 else f"r{rack}"
            name = f"{prefix}{where}-n{n}"
            node_labels = {**labels, rack_label: f"{prefix}{where}", HOSTNAME: name}
            if counts["blocks"] > 1:
                node_labels[block_label] = f"{prefix}b{block}"
            out.append(
                {
                    "name": name,
                    "labels": node_labels,
                    "capacity": {**capacity, GPU: str(counts["gpusPerNode"])},
                    "taints": [],
                }
            )
    return out


def _strings(raw: Any, path: str, problems: list[FieldError]) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        problems.append(FieldError(path, "must map label keys to string values"))
        return {}
    return dict(raw)


def _quantities(raw: Any, path: str, problems: list[FieldError]) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        problems.append(FieldError(path, "must map resource names to quantities"))
        return {}
    out = {}
    for key, value in raw.items():
        try:
            quantity.parse_milli(str(value))
        except ValueError:
            problems.append(FieldError(f"{path}.{key}", f"{value!r} is not a quantity (such as 8, 96, 1Ti)"))
            continue
        out[str(key)] = str(value)
    return out
