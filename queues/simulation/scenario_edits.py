"""The admin actions of a scenario's timeline (``edits:``), and the readers the scenario file shares.

An edit applies or deletes a Kueue object, cancels a job (the user deletes it), scales a Deployment
(its replicas) or a batch Job (its parallelism: an elastic one is resized in place, ``queues.cycle.elastic``),
or cordons, uncordons or deletes a node (``delete: {kind: Node, name}``), or makes a node's GPUs
report an Xid (``{node, gpuXid: 79}``; 0 clears it: ``queues.gpus.gpu_health``), at a time in scenario
seconds; ``edits`` reads the list, reporting every problem at its path (``edits[2].apply.spec``),
and ``apply_edit`` applies an ``apply`` or ``delete`` of a Kueue object to a configuration.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from queues import errors
from queues.errors import FieldError
from queues.kueue import api, codec
from queues.model import Config
from queues.podsets import kuberay

MAX_SECONDS = 1_000_000_000  # ~31 years: times and their sums stay exact and finite
ACTIONS = ("apply", "delete", "cancel", "scale", "cordon", "uncordon", "gpuXid")


@dataclass(frozen=True, slots=True)
class Edit:
    index: int
    at: float
    action: str  # apply | delete | cancel | scale | cordon | uncordon | gpuXid
    obj: api.KueueObject | None = None
    kind: str = ""
    name: str = ""  # "ns/name" for LocalQueue, cancel and scale
    replicas: int = 0  # scale: the Deployment's replicas (a Job's parallelism) from then on
    group: str = ""  # scale of a RayCluster: the worker group whose replicas (its autoscaler's)
    xid: int = 0  # gpuXid: the Xid the node's GPUs report from then on (0: none)


def seconds(value: Any, path: str, problems: list[FieldError], *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        problems.append(FieldError(path, f"must be a number of seconds, not {value!r}"))
        return 0.0
    if value < 0 or (positive and value == 0) or value > MAX_SECONDS:
        bound = "> 0" if positive else ">= 0"
        problems.append(FieldError(path, f"must be {bound} and at most {MAX_SECONDS:,} seconds, not {value!r}"))
        return 0.0
    return float(value)


def manifest(raw: Any, path: str, problems: list[FieldError]) -> api.KueueObject | None:
    try:
        return codec.parse(raw)
    except errors.Invalid as exc:
        problems.extend(e.under(path) for e in exc.errors)
        return None


def edits(raw: Any, problems: list[FieldError], priority_classes: set[str]) -> list[Edit]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        problems.append(FieldError("edits", "must be a list of edits"))
        return []
    out: list[Edit] = []
    for i, item in enumerate(raw):
        path = f"edits[{i}]"
        if not isinstance(item, Mapping):
            problems.append(FieldError(path, "must be a mapping with at and one of apply, delete, cancel"))
            continue
        at = seconds(item.get("at"), f"{path}.at", problems)
        actions = [a for a in ACTIONS if a in item]
        unknown = [k for k in item if k not in ("at", *ACTIONS, "replicas", "node", "workerGroup")]
        for key in unknown:
            problems.append(
                FieldError(f"{path}.{key}", f"unknown field; an edit has at and one of {', '.join(ACTIONS)}")
            )
        if len(actions) != 1:
            problems.append(FieldError(path, f"needs exactly one of {', '.join(ACTIONS)}"))
            continue
        if ("replicas" in item) != (actions[0] == "scale") or ("workerGroup" in item and actions[0] != "scale"):
            problems.append(FieldError(f"{path}.replicas", "scale (and only scale) takes replicas (and workerGroup)"))
            continue
        if ("node" in item) != (actions[0] == "gpuXid"):
            problems.append(
                FieldError(f"{path}.node", "gpuXid (and only gpuXid) takes node: the node whose GPUs report it")
            )
            continue
        action = actions[0]
        if action == "apply":
            obj = manifest(item["apply"], f"{path}.apply", problems)
            if obj is not None:
                if isinstance(obj, api.WorkloadPriorityClass):
                    priority_classes.add(obj.name)
                out.append(Edit(i, at, "apply", obj=obj, kind=obj.kind, name=obj.key))
        elif action == "gpuXid":
            xid, node = item["gpuXid"], item["node"]
            if isinstance(xid, bool) or not isinstance(xid, int) or xid < 0:
                problems.append(FieldError(f"{path}.gpuXid", f"must be an Xid number (79), or 0 to clear, not {xid!r}"))
            elif not isinstance(node, str) or not node:
                problems.append(FieldError(f"{path}.node", "must name a node of the scenario's nodes"))
            else:
                out.append(Edit(i, at, "gpuXid", kind="Node", name=node, xid=xid))
        elif action in ("cordon", "uncordon"):
            if not isinstance(item[action], str) or not item[action]:
                problems.append(FieldError(f"{path}.{action}", "must name a node of the scenario's nodes"))
            else:
                out.append(Edit(i, at, action, kind="Node", name=item[action]))
        elif action == "delete":
            target = item["delete"]
            kinds = (*api.KINDS, "Node")
            if (
                not isinstance(target, Mapping)
                or target.get("kind") not in kinds
                or not isinstance(target.get("name"), str)
            ):
                problems.append(
                    FieldError(f"{path}.delete", f"must be {{kind, name}} with kind one of {', '.join(kinds)}")
                )
                continue
            name = target["name"]
            if target["kind"] == "LocalQueue":
                name = f"{target.get('namespace') or 'default'}/{name}"
            out.append(Edit(i, at, "delete", kind=str(target["kind"]), name=name))
        elif action == "scale":
            key, replicas = item["scale"], item["replicas"]
            if not isinstance(key, str) or "/" not in key:
                problems.append(FieldError(f"{path}.scale", "must name a Deployment or a Job as namespace/name"))
            elif isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
                problems.append(FieldError(f"{path}.replicas", f"must be a whole number >= 0, not {replicas!r}"))
            elif not isinstance(group := item.get("workerGroup", ""), str):
                problems.append(
                    FieldError(f"{path}.workerGroup", f"must name a RayCluster's worker group, not {group!r}")
                )
            else:
                out.append(Edit(i, at, "scale", name=key, replicas=replicas, group=group))
        else:
            key = item["cancel"]
            if not isinstance(key, str) or "/" not in key:
                problems.append(FieldError(f"{path}.cancel", "must name a job as namespace/name"))
                continue
            out.append(Edit(i, at, "cancel", name=key))
    return out


def apply_edit(config: Config, edit: Edit) -> None:
    """An ``apply`` or ``delete`` edit of a scenario on a configuration (a deleted ClusterQueue
    terminates: it is removed once its admitted work is gone)."""
    if edit.action == "apply":
        assert edit.obj is not None
        config.put(edit.obj)
        return
    table: Mapping[str, api.KueueObject] = config.table(edit.kind)
    if edit.kind == "ClusterQueue" and edit.name in table:
        config.terminating.add(edit.name)
    else:
        config.table(edit.kind).pop(edit.name, None)


def scaled(obj: Mapping[str, Any], edit: Edit) -> dict[str, Any]:
    """A job as a ``scale`` edit leaves it: a batch Job's ``parallelism``, or a RayCluster's (a
    RayJob's or RayService's cluster spec's) worker group's ``replicas`` (what its autoscaler sets),
    is ``edit.replicas`` (engine core reads it, engine cluster patches it in: into the cluster KubeRay
    made for an autoscaling RayJob or RayService, where its autoscaler writes)."""
    spec = dict(obj.get("spec") or {})
    held = kuberay.CLUSTER_SPEC.get(str(obj.get("kind")))
    if edit.group and held is not None:
        config = {"kind": "RayCluster", "spec": spec.get(held) or {}}
        spec[held] = scaled(config, edit)["spec"]
    elif edit.group:
        spec["workerGroupSpecs"] = [
            {**g, "replicas": edit.replicas} if isinstance(g, Mapping) and g.get("groupName") == edit.group else g
            for g in spec.get("workerGroupSpecs") or []
        ]
    else:
        spec["parallelism"] = edit.replicas
    return {**obj, "spec": spec}
