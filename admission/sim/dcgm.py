"""A simulated dcgm-exporter: the GPU utilisation series of the simulated cluster's running pods.

NVIDIA's dcgm-exporter runs on every GPU node and exposes, per GPU (or MIG instance) a
container holds, gauges labelled with the pod that uses it. The simulated cluster has no GPUs,
so it makes the same series up: each running pod with GPU requests gets, per GPU it requests,
``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (a fraction) and ``DCGM_FI_DEV_GPU_UTIL`` (a percentage), its
value from the annotation ``turnstile.dev/sim-gpu-utilization`` ("0.12") on the pod, or else on
the object that owns it (a Job's pods, through its ownerReferences). A pod with neither has no
series (as a GPU whose metrics are missing: unknown, never idle). MIG slices carry
``GPU_I_PROFILE`` and ``GPU_I_ID``, as dcgm-exporter's do. Labels are dcgm-exporter's:
``gpu``, ``UUID``, ``device``, ``modelName``, ``Hostname``, ``container``, ``namespace``, ``pod``.

Served at ``/dcgm/metrics`` on the simulated API server (Prometheus's text format); the
controller's GPU-efficiency work reads them through Prometheus (``docs/gpu-efficiency.md``).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from aiohttp import web

from admission.sim.objects import ApiError, ObjectStore, Resource
from queues import quantity

ANNOTATION = "turnstile.dev/sim-gpu-utilization"
PATH = "/dcgm/metrics"
_HELP = {
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("Ratio of time the graphics engine is active.", 1.0),
    "DCGM_FI_DEV_GPU_UTIL": ("GPU utilization (in %).", 100.0),
}

Owner = Callable[[Mapping[str, Any]], Mapping[str, Any] | None]


def handler(
    store: ObjectStore, served: Callable[[], list[Resource]]
) -> Callable[[web.Request], Awaitable[web.Response]]:
    """The aiohttp handler of ``PATH`` over the simulated API server's objects."""

    async def serve(_request: web.Request) -> web.Response:
        resources = served()
        pods = next(r for r in resources if r.plural == "pods" and not r.group)
        by_kind = {(r.api_version, r.kind): r for r in resources}

        def owner(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
            meta = pod.get("metadata") or {}
            for ref in meta.get("ownerReferences") or []:
                res = by_kind.get((str(ref.get("apiVersion")), str(ref.get("kind"))))
                if res is not None:
                    with contextlib.suppress(ApiError):
                        return store.get(res, str(meta.get("namespace") or ""), str(ref.get("name")))
            return None

        text = exposition(store.list(pods, None)[0], owner)
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    return serve


def utilization(pod: Mapping[str, Any], owner: Owner) -> float | None:
    """The pod's made-up utilisation (0..1), or None when nothing says it."""
    for obj in (pod, owner(pod)):
        raw = ((obj or {}).get("metadata") or {}).get("annotations", {}).get(ANNOTATION) if obj else None
        if raw is None:
            continue
        try:
            value = float(raw)
        except ValueError:
            return None
        return min(1.0, max(0.0, value))
    return None


def exposition(
    pods: Iterable[Mapping[str, Any]], owner: Callable[[Mapping[str, Any]], Mapping[str, Any] | None]
) -> str:
    """The series of every running pod that requests GPUs, in Prometheus's text format."""
    rows: dict[str, list[str]] = {name: [] for name in _HELP}
    next_gpu: dict[str, int] = {}  # node -> the next GPU index handed out
    for pod in sorted(pods, key=lambda p: (str((p.get("spec") or {}).get("nodeName")), str(p["metadata"]["name"]))):
        spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
        node = spec.get("nodeName")
        if (pod.get("status") or {}).get("phase") != "Running" or not node:
            continue
        value = utilization(pod, owner)
        if value is None:
            continue
        for container in spec.get("containers") or []:
            limits = (container.get("resources") or {}).get("limits") or {}
            requests = (container.get("resources") or {}).get("requests") or {}
            for resource, raw in {**limits, **requests}.items():
                if not (resource == "nvidia.com/gpu" or resource.startswith("nvidia.com/mig-")):
                    continue
                for _ in range(quantity.parse_milli(str(raw)) // 1000):
                    index = next_gpu.get(node, 0)
                    next_gpu[node] = index + 1
                    labels = _labels(str(node), index, resource, str(container.get("name")), meta)
                    for name, (_, scale) in _HELP.items():
                        rows[name].append(f"{name}{{{labels}}} {value * scale:g}")
    out = []
    for name, (text, _) in _HELP.items():
        out += [f"# HELP {name} {text}", f"# TYPE {name} gauge", *rows[name]]
    return "\n".join(out) + "\n"


def _labels(node: str, index: int, resource: str, container: str, meta: Mapping[str, Any]) -> str:
    uuid = "GPU-" + hashlib.sha1(f"{node}/{index}".encode()).hexdigest()[:32]
    pairs = [
        ("gpu", str(index)),
        ("UUID", uuid),
        ("device", f"nvidia{index}"),
        ("modelName", "NVIDIA A100-SXM4-80GB"),
        ("Hostname", node),
    ]
    if resource.startswith("nvidia.com/mig-"):
        pairs += [("GPU_I_PROFILE", resource.removeprefix("nvidia.com/mig-")), ("GPU_I_ID", str(index))]
    pairs += [("container", container), ("namespace", str(meta.get("namespace"))), ("pod", str(meta.get("name")))]
    return ",".join(f'{k}="{v}"' for k, v in pairs)
