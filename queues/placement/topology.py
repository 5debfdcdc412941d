"""Topology-aware placement: which nodes a pod set's pods get, domain by domain (Kueue's TAS).

A Topology lists node labels from the widest domain to the narrowest (``block -> rack ->
kubernetes.io/hostname``); a ResourceFlavor with ``spec.topologyName`` is a *TAS flavor*, and a
pod set admitted on it gets a placement, ``{node: pods}``, decided here when it is admitted, so
its pods run close together and a gang is placed whole or not at all.

What a pod set asks for, from its pod template's annotations (Kueue's):

- ``podset-required-topology: <level>``: all pods within one domain of that level, or wait;
- ``podset-preferred-topology: <level>``: one domain of that level if any can hold it, else one
  domain of the level above, and so on; else as few top-level domains as hold it;
- ``podset-unconstrained-topology: "true"``: anywhere, filling the fullest domains first;
- ``podset-slice-required-topology: <level>`` with ``podset-slice-size: <n>``: besides, every
  n consecutive pods (a slice) within one domain of that level.

A pod set on a TAS flavor with none of these (Kueue assumes TAS when every flavor of the
ClusterQueue is a TAS flavor) is placed per the *packing*:

- ``Kueue``: as Kueue does, unconstrained; and among equally tight domains, the first by name;
- ``Compact`` (Turnstile's default): as ``preferred`` at the lowest level, so an 8-GPU job gets
  a whole node whenever one is free and a 32-GPU job one rack whenever one can hold it; and
  among equally tight domains, the one in the fullest rack (the fullest parent, then its
  parent...), so work gathers where racks are already in use and whole racks stay free.

How domains are chosen (Kueue's ``BestFit``, Kueue's default for required and preferred): the
freest domains first, as few as hold the pods, the last one the tightest that still holds what
is left, at every level down to the nodes; a single domain is the tightest that holds it all.
So small jobs fill partly used nodes and whole free nodes stay whole for the big ones.
Unconstrained pod sets take the least free domains first (Kueue's ``LeastFreeCapacity``).
Capacity counts in pods (in slices at and above the slice level): how many of the pod set's
pods each node's free capacity holds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from queues import quantity
from queues.placement.nodes import Free, NodeInfo, PodNeeds, eligible
from queues.podsets.topology_requests import Request

HOSTNAME = "kubernetes.io/hostname"
COMPACT = "Compact"
KUEUE = "Kueue"
PACKINGS = (COMPACT, KUEUE)


@dataclass(slots=True)
class _Domain:
    name: str  # the label value at its level
    level: int
    parent: _Domain | None = None
    children: list[_Domain] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)  # at the lowest level: the nodes in it
    pods: int = 0  # pods of the pod set it can hold
    slices: int = 0  # slices it can hold (at and above the slice level)


@dataclass(frozen=True, slots=True)
class Placed:
    """Where the pods go, node by node in domain order (rank order), or why nowhere."""

    nodes: dict[str, int]
    message: str = ""

    @property
    def ok(self) -> bool:
        return not self.message


def _unit(domain: _Domain, sliced: bool) -> int:
    return domain.slices if sliced else domain.pods


def _level_name(label: str) -> str:
    """``cloud.provider.com/topology-rack`` -> ``rack``: how a message names a level."""
    tail = label.rsplit("/", 1)[-1]
    return "node" if label == HOSTNAME else tail.removeprefix("topology-")


def place(
    request: Request | None,
    levels: Sequence[str],
    pod: PodNeeds,
    count: int,
    nodes: Sequence[NodeInfo],
    free: Free,
    packing: str = COMPACT,
) -> Placed:
    """Place ``count`` pods like ``pod`` on ``nodes`` (their free capacity in ``free``, not
    changed) as ``request`` asks, within the topology ``levels``, with the given packing."""
    if request is None or request.mode == "implicit":
        base = request or Request("implicit")
        mode = "preferred" if packing == COMPACT else "unconstrained"
        request = Request(mode, levels[-1] if mode == "preferred" else None, base.slice_level, base.slice_size)
    for label in (request.level, request.slice_level):
        if label is not None and label not in levels:
            return Placed({}, f"level {label} is not one of the topology's levels ({', '.join(levels)})")
    top = request.level if request.level is not None else levels[0]
    if request.slice_level is not None and levels.index(request.slice_level) < levels.index(top):
        return Placed({}, f"the slice level {request.slice_level} is above the pod set's level {top}")
    slice_at = levels.index(request.slice_level) if request.slice_level else len(levels) - 1
    size = request.slice_size
    roots, per_node = _tree(levels, pod, nodes, free, count, slice_at, size)
    need = count // size
    least_free = request.mode == "unconstrained"
    chosen: list[tuple[_Domain, int]] = []  # domains of one level and how many units each gets
    if least_free:
        chosen = _spread(roots, need, True, least_free=True)
    else:
        at = levels.index(request.level or levels[-1])
        for lv in range(at, -1, -1) if request.mode == "preferred" else (at,):
            fitting = [d for d in _at_level(roots, lv) if _unit(d, lv <= slice_at) >= need]
            if fitting:
                chosen = [(min(fitting, key=_tightest(lv <= slice_at, packing == COMPACT)), need)]
                break
        if not chosen and request.mode == "preferred":
            chosen = _spread(roots, need, True, least_free=False)
        if not chosen and request.mode == "required":
            freest = max((_unit(d, at <= slice_at) for d in _at_level(roots, at)), default=0)
            level = _level_name(levels[at])
            return Placed(
                {}, f"needs {_units(need, size, pod)} in one {level}; the freest {level} has room for {freest}"
            )
    if not chosen:
        total = sum(d.slices for d in roots)
        return Placed({}, f"needs {_units(need, size, pod)} on the topology's nodes; they have room for {total}")
    out: dict[str, int] = {}
    for domain, units in chosen:
        _descend(domain, units, slice_at, size, per_node, out, least_free)
    return Placed(out)


def _tightest(sliced: bool, by_parents: bool) -> Callable[[_Domain], tuple[Any, ...]]:
    """The order in which one domain is chosen to hold a whole pod set: the least room first;
    on a tie, with ``by_parents``, the one whose parent (then grandparent...) has the least room."""

    def key(d: _Domain) -> tuple[Any, ...]:
        parents = []
        up = d.parent
        while by_parents and up is not None:
            parents.append(up.pods)
            up = up.parent
        return (_unit(d, sliced), d.pods, *parents, d.name)

    return key


def _units(n: int, size: int, pod: PodNeeds) -> str:
    """``8 pods (64 nvidia.com/gpu)``: what a message says a pod set needs."""
    asked = ", ".join(
        f"{quantity.format_milli(v * n * size)} {r}" for r, v in sorted(pod.requests.items()) if "gpu" in r
    )
    what = f"{n} slices of {size} pods" if size > 1 else f"{n} pods"
    return f"{what} ({asked})" if asked else what


def _tree(
    levels: Sequence[str],
    pod: PodNeeds,
    nodes: Sequence[NodeInfo],
    free: Free,
    count: int,
    slice_at: int,
    size: int,
) -> tuple[list[_Domain], dict[str, int]]:
    """The domains with room for at least one pod, each with the pods (and slices) it holds, in
    name order at every level; and the pods each node holds."""
    roots: dict[str, _Domain] = {}
    index: dict[tuple[str, ...], _Domain] = {}
    per_node: dict[str, int] = {}
    asked = [(r, v) for r, v in pod.requests.items() if v > 0]
    for node in nodes:
        held = _pods_held(asked, free.get(node.name, {}), count)
        if not held or any(lv not in node.labels for lv in levels) or not eligible(pod, node):
            continue  # (no room; or not in the topology, or its labels or taints keep the pod off)
        values = tuple(node.labels[lv] for lv in levels)
        per_node[node.name] = held
        parent: _Domain | None = None
        for lv in range(len(values)):
            key = values[: lv + 1]
            domain = index.get(key)
            if domain is None:
                domain = index[key] = _Domain(values[lv], lv, parent)
                if parent is None:
                    roots[values[lv]] = domain
                else:
                    parent.children.append(domain)
            domain.pods += held
            parent = domain
        assert parent is not None
        parent.nodes.append(node.name)
    for domain in index.values():
        domain.children.sort(key=lambda d: d.name)
    ordered = sorted(roots.values(), key=lambda d: d.name)
    for root in ordered:
        _count_slices(root, slice_at, size)
    return ordered, per_node


def _pods_held(asked: list[tuple[str, int]], free: Mapping[str, int], count: int) -> int:
    """How many pods asking ``asked`` (resource, milli-units) fit in ``free`` (at most ``count``
    when they ask for nothing)."""
    if not asked:
        return count
    return max(0, min(free.get(r, 0) // v for r, v in asked))


def _count_slices(domain: _Domain, slice_at: int, size: int) -> int:
    """Slices each domain at or above the slice level holds (a slice stays within one domain of
    the slice level)."""
    if domain.level == slice_at:
        domain.slices = domain.pods // size
    elif domain.level < slice_at:
        domain.slices = sum(_count_slices(c, slice_at, size) for c in domain.children)
    return domain.slices


def _at_level(roots: list[_Domain], level: int) -> list[_Domain]:
    out = roots
    for _ in range(level):
        out = [c for d in out for c in d.children]
    return out


def _spread(domains: list[_Domain], need: int, sliced: bool, least_free: bool) -> list[tuple[_Domain, int]]:
    """``need`` units from domains of one level; [] if together they cannot hold it.

    BestFit: one domain if one holds it all (the tightest); else the freest first, the last one
    the tightest of the rest that holds what is left. LeastFreeCapacity: the least free first."""

    def unit(d: _Domain) -> int:
        return _unit(d, sliced)

    tightest = _tightest(sliced, by_parents=False)
    usable = [d for d in domains if unit(d) > 0]
    if sum(unit(d) for d in usable) < need:
        return []
    if least_free:
        order = sorted(usable, key=tightest)
    else:
        fitting = [d for d in usable if unit(d) >= need]
        if fitting:
            return [(min(fitting, key=tightest), need)]
        order = sorted(usable, key=lambda d: (-unit(d), d.pods, d.name))
    out: list[tuple[_Domain, int]] = []
    left = need
    taken: set[int] = set()
    for d in order:
        if left <= 0:
            break
        if id(d) in taken:
            continue
        if not least_free and unit(d) >= left:
            d = min((x for x in order if id(x) not in taken and unit(x) >= left), key=tightest)
        take = min(unit(d), left)
        taken.add(id(d))
        out.append((d, take))
        left -= take
    return out


def _descend(
    domain: _Domain,
    units: int,
    slice_at: int,
    size: int,
    per_node: dict[str, int],
    out: dict[str, int],
    least_free: bool,
) -> None:
    """Spread ``units`` (slices at and above the slice level, pods below) over ``domain``'s
    children, and so on down to its nodes."""
    if domain.level == slice_at:
        units *= size  # (from here down, pods)
    if not domain.children:
        left = units
        order = sorted(domain.nodes, key=lambda n: (per_node[n], n) if least_free else (-per_node[n], n))
        for name in order:
            take = min(per_node[name], left)
            if take:
                out[name] = out.get(name, 0) + take
                left -= take
        return
    sliced = domain.children[0].level <= slice_at
    for child, got in _spread(domain.children, units, sliced, least_free):
        _descend(child, got, slice_at, size, per_node, out, least_free)
