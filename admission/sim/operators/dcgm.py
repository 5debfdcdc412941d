"""A simulated dcgm-exporter: the GPU utilisation series of the simulated cluster's running pods.

NVIDIA's dcgm-exporter runs on every GPU node and exposes, per GPU (or MIG instance) a
container holds, gauges labelled with the pod that uses it. The simulated cluster has no GPUs,
so it makes the same series up: each running pod with GPU requests gets, per GPU it requests,
``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (a fraction) and ``DCGM_FI_DEV_GPU_UTIL`` (a percentage), its
value from the annotation ``turnstile.dev/sim-gpu-utilization`` ("0.12") on the pod, or else on
the objects that own it (a Job's pods, a JobSet's through its Jobs: ownerReferences); or a trace, a JSON list of
steps ``[{"at": 0, "value": 0.1}, {"at": 900, "value": 0.9}]`` whose ``at`` are seconds since
the pod started, times the cluster's time scale (as ``turnstile.dev/sim-runtime``: a scenario's
``utilization`` list as engine cluster plays it). A pod with neither has no series (as a GPU
whose metrics are missing: unknown, never idle). MIG slices carry
``GPU_I_PROFILE`` and ``GPU_I_ID``, as dcgm-exporter's do. Labels are dcgm-exporter's:
``gpu``, ``UUID``, ``device``, ``modelName``, ``Hostname``, ``container``, ``namespace``, ``pod``.

GPU memory: a pod (or an owner) annotated ``turnstile.dev/sim-gpu-memory-used: 9Gi`` (a quantity,
or a trace of ``{"at", "value"}`` steps as above) gets ``DCGM_FI_DEV_FB_USED`` and
``DCGM_FI_DEV_FB_FREE`` per GPU, in MiB as dcgm-exporter reports them: used as said (at most the
GPU's memory), free the rest. A whole GPU's memory is its node's ``nvidia.com/gpu.memory`` label
(MiB, as NVIDIA's GPU feature discovery labels it), else 81920 (the A100-80GB ``modelName`` says;
a node's ``nvidia.com/gpu.product`` label names the model instead); a MIG slice's is its
profile's (``queues.gpus.mig_profiles.usable_gib``).

GPU health: a Node annotated ``turnstile.dev/sim-gpu-xid: "79"`` gets ``DCGM_FI_DEV_XID_ERRORS``
(the last Xid, as dcgm-exporter's gauge) for each of its GPUs (``nvidia.com/gpu`` capacity, at
least one), labelled ``gpu``, ``UUID``, ``device``, ``modelName``, ``Hostname``; removing the
annotation clears it (a real GPU keeps its last Xid until it is reset: the operator's reset is
the annotation's removal). Nodes without it have no such series (a real exporter reports 0).

Served at ``/dcgm/metrics`` on the simulated API server (Prometheus's text format); the
controller's GPU-efficiency work reads them through Prometheus (``docs/gpu-efficiency.md``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from aiohttp import web

from admission.sim.server.object_store import ObjectStore
from admission.sim.server.objects import ApiError, Resource
from queues import errors, quantity
from queues.gpus import rightsizing
from queues.gpus.gpu_health import XID_ERRORS, simulated_uuid

ANNOTATION = "turnstile.dev/sim-gpu-utilization"
MEMORY_ANNOTATION = "turnstile.dev/sim-gpu-memory-used"
XID_ANNOTATION = "turnstile.dev/sim-gpu-xid"  # on a Node: the Xid its GPUs report
PATH = "/dcgm/metrics"
_HELP = {
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("Ratio of time the graphics engine is active.", 1.0),
    "DCGM_FI_DEV_GPU_UTIL": ("GPU utilization (in %).", 100.0),
}
_MEMORY_HELP = {
    "DCGM_FI_DEV_FB_USED": "Framebuffer memory used (in MiB).",
    "DCGM_FI_DEV_FB_FREE": "Framebuffer memory free (in MiB).",
}
GPU_MEMORY_LABEL = rightsizing.GPU_MEMORY_LABEL  # MiB of one GPU (NVIDIA's GPU feature discovery)
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
DEFAULT_MEMORY_MIB = rightsizing.DEFAULT_MEMORY_MIB
DEFAULT_MODEL = "NVIDIA A100-SXM4-80GB"

Owner = Callable[[Mapping[str, Any]], Mapping[str, Any] | None]


def handler(
    store: ObjectStore, served: Callable[[], list[Resource]], time_scale: Callable[[], float] = lambda: 1.0
) -> Callable[[web.Request], Awaitable[web.Response]]:
    """The aiohttp handler of ``PATH`` over the simulated API server's objects (``time_scale``: wall
    seconds per second of a trace's ``at``)."""

    async def serve(_request: web.Request) -> web.Response:
        resources = served()
        pods = next(r for r in resources if r.plural == "pods" and not r.group)
        by_kind = {(r.api_version, r.kind): r for r in resources}

        def owner(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
            meta = obj.get("metadata") or {}
            for ref in meta.get("ownerReferences") or []:
                res = by_kind.get((str(ref.get("apiVersion")), str(ref.get("kind"))))
                if res is not None:
                    with contextlib.suppress(ApiError):
                        return store.get(res, str(meta.get("namespace") or ""), str(ref.get("name")))
            return None

        nodes = next(r for r in resources if r.plural == "nodes" and not r.group)
        listed = store.list(nodes, None)[0]
        labels = {str(n["metadata"]["name"]): dict(n["metadata"].get("labels") or {}) for n in listed}
        text = exposition(
            store.list(pods, None)[0],
            owner,
            now=time.time(),
            time_scale=time_scale(),
            node_labels=labels,
            xids=reported_xids(listed),
        )
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    return serve


def reported_xids(nodes: Iterable[Mapping[str, Any]]) -> dict[str, tuple[int, int]]:
    """Node name -> (the Xid its annotation says, its GPUs) for nodes annotated with a number."""
    out: dict[str, tuple[int, int]] = {}
    for node in nodes:
        meta = node.get("metadata") or {}
        raw = str((meta.get("annotations") or {}).get(XID_ANNOTATION, "")).strip()
        if not raw.isdigit():
            continue
        capacity = (node.get("status") or {}).get("capacity") or {}
        try:
            gpus = quantity.parse_milli(str(capacity.get("nvidia.com/gpu", "1"))) // 1000
        except quantity.QuantityError:
            gpus = 1
        out[str(meta.get("name"))] = (int(raw), max(1, gpus))
    return out


def utilization(pod: Mapping[str, Any], owner: Owner, *, now: float = 0.0, time_scale: float = 1.0) -> float | None:
    """The pod's made-up utilisation (0..1) at wall time ``now``, or None when nothing says it: the
    annotation on the pod or on its owners up the chain (a Job's; a JobSet's through its Job; a
    Deployment's through its ReplicaSet)."""
    value = _annotated(pod, owner, ANNOTATION, float, now=now, time_scale=time_scale)
    return min(1.0, max(0.0, value)) if value is not None and value == value else None


def memory_used_mib(pod: Mapping[str, Any], owner: Owner, *, now: float = 0.0, time_scale: float = 1.0) -> float | None:
    """The pod's made-up GPU memory used per GPU (MiB) at wall time ``now``, or None when nothing says it."""
    value = _annotated(
        pod, owner, MEMORY_ANNOTATION, lambda raw: quantity.parse_milli(str(raw)) / 1000 / 2**20, now=now,
        time_scale=time_scale,
    )  # fmt: skip
    return max(0.0, value) if value is not None and value == value else None


def _annotated(
    pod: Mapping[str, Any],
    owner: Owner,
    annotation: str,
    parse: Callable[[Any], float],
    *,
    now: float,
    time_scale: float,
) -> float | None:
    """An annotation's value (a constant or a trace) on the pod or its owners up the chain."""
    chain: list[Mapping[str, Any] | None] = [pod]
    while len(chain) < 4 and chain[-1] is not None:
        chain.append(owner(chain[-1]))
    for obj in chain:
        raw = ((obj or {}).get("metadata") or {}).get("annotations", {}).get(annotation) if obj else None
        if raw is None:
            continue
        raw = str(raw).strip()
        try:
            if raw.startswith("["):
                return _step(json.loads(raw), _seconds_since_start(pod, now) / time_scale, parse)
            return parse(raw)
        except (ValueError, TypeError, KeyError, AttributeError, errors.Invalid):
            return None  # (unreadable: no series, as a GPU whose metrics are missing)
    return None


def _step(steps: list[Mapping[str, Any]], elapsed: float, parse: Callable[[Any], float] = float) -> float:
    """A trace's value ``elapsed`` seconds into the run: the last step at or before it."""
    ordered = sorted(((float(s["at"]), parse(s["value"])) for s in steps), key=lambda s: s[0])
    value = ordered[0][1]
    for at, v in ordered:
        if at <= elapsed:
            value = v
    return value


def _seconds_since_start(pod: Mapping[str, Any], now: float) -> float:
    started = str((pod.get("status") or {}).get("startTime") or "")
    if not started:
        return 0.0
    return max(0.0, now - dt.datetime.fromisoformat(started.replace("Z", "+00:00")).timestamp())


def exposition(
    pods: Iterable[Mapping[str, Any]],
    owner: Callable[[Mapping[str, Any]], Mapping[str, Any] | None],
    *,
    now: float = 0.0,
    time_scale: float = 1.0,
    node_labels: Mapping[str, Mapping[str, str]] | None = None,
    xids: Mapping[str, tuple[int, int]] | None = None,
) -> str:
    """The series of every running pod that requests GPUs, and the Xids of nodes that report one
    (``reported_xids``), in Prometheus's text format."""
    rows: dict[str, list[str]] = {name: [] for name in (*_HELP, *_MEMORY_HELP)}
    next_gpu: dict[str, int] = {}  # node -> the next GPU index handed out
    for pod in sorted(pods, key=lambda p: (str((p.get("spec") or {}).get("nodeName")), str(p["metadata"]["name"]))):
        spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
        node = spec.get("nodeName")
        if (pod.get("status") or {}).get("phase") != "Running" or not node:
            continue
        value = utilization(pod, owner, now=now, time_scale=time_scale)
        used = memory_used_mib(pod, owner, now=now, time_scale=time_scale)
        if value is None and used is None:
            continue
        on_node = (node_labels or {}).get(str(node), {})
        for container in spec.get("containers") or []:
            limits = (container.get("resources") or {}).get("limits") or {}
            requests = (container.get("resources") or {}).get("requests") or {}
            for resource, raw in {**limits, **requests}.items():
                if not (resource == "nvidia.com/gpu" or resource.startswith("nvidia.com/mig-")):
                    continue
                for _ in range(quantity.parse_milli(str(raw)) // 1000):
                    index = next_gpu.get(node, 0)
                    next_gpu[node] = index + 1
                    model = on_node.get(GPU_PRODUCT_LABEL, DEFAULT_MODEL)
                    labels = _labels(str(node), index, resource, str(container.get("name")), meta, model)
                    if value is not None:
                        for name, (_, scale) in _HELP.items():
                            rows[name].append(f"{name}{{{labels}}} {value * scale:g}")
                    if used is not None:
                        total = rightsizing.card_memory_mib(resource, on_node)
                        rows["DCGM_FI_DEV_FB_USED"].append(f"DCGM_FI_DEV_FB_USED{{{labels}}} {min(used, total):.0f}")
                        rows["DCGM_FI_DEV_FB_FREE"].append(
                            f"DCGM_FI_DEV_FB_FREE{{{labels}}} {max(0.0, total - used):.0f}"
                        )
    out = []
    for name, (text, _) in _HELP.items():
        out += [f"# HELP {name} {text}", f"# TYPE {name} gauge", *rows[name]]
    for name, text in _MEMORY_HELP.items():
        out += [f"# HELP {name} {text}", f"# TYPE {name} gauge", *rows[name]]
    out += [f"# HELP {XID_ERRORS} Value of the last XID error encountered.", f"# TYPE {XID_ERRORS} gauge"]
    for node, (xid, gpus) in sorted((xids or {}).items()):
        model = (node_labels or {}).get(node, {}).get(GPU_PRODUCT_LABEL, DEFAULT_MODEL)
        for index in range(gpus):
            out.append(f"{XID_ERRORS}{{{_gpu_labels(node, index, model)}}} {xid}")
    return "\n".join(out) + "\n"


def _labels(node: str, index: int, resource: str, container: str, meta: Mapping[str, Any], model: str) -> str:
    pairs: list[tuple[str, str]] = []
    if resource.startswith("nvidia.com/mig-"):
        pairs += [("GPU_I_PROFILE", resource.removeprefix("nvidia.com/mig-")), ("GPU_I_ID", str(index))]
    pairs += [("container", container), ("namespace", str(meta.get("namespace"))), ("pod", str(meta.get("name")))]
    return ",".join([_gpu_labels(node, index, model), *(f'{k}="{v}"' for k, v in pairs)])


def _gpu_labels(node: str, index: int, model: str) -> str:
    """A GPU's own labels as dcgm-exporter sets them (its UUID made up from node and index)."""
    pairs = [
        ("gpu", str(index)),
        ("UUID", simulated_uuid(node, index)),
        ("device", f"nvidia{index}"),
        ("modelName", model),
        ("Hostname", node),
    ]
    return ",".join(f'{k}="{v}"' for k, v in pairs)
