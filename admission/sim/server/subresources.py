"""Subresources the simulated API server serves beside ``status``: ``scale`` of Deployments,
ReplicaSets and StatefulSets (``kubectl scale``, an HPA) and ``log`` of pods (``kubectl logs``:
the simulated kubelet's account, since no container really runs).
"""

from __future__ import annotations

from aiohttp import web

from admission.sim.server.objects import Obj


def scale_of(of: Obj) -> Obj:
    """The ``autoscaling/v1`` Scale of a Deployment, ReplicaSet or StatefulSet (``kubectl scale``)."""
    selector = ((of.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {
            k: of["metadata"][k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
        },
        "spec": {"replicas": (of.get("spec") or {}).get("replicas", 1)},
        "status": {
            "replicas": (of.get("status") or {}).get("replicas", 0),
            "selector": ",".join(f"{k}={v}" for k, v in sorted(selector.items())),
        },
    }


def pod_log(pod: Obj, namespace: str, name: str) -> web.Response:
    """``kubectl logs``: the simulated kubelet's account of the pod (no container really runs)."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    images = ", ".join(str(c.get("image")) for c in spec.get("containers") or [])
    lines = [f"[turnstile simulated kubelet] pod {namespace}/{name}: {images}"]
    if spec.get("nodeName"):
        lines.append(f"scheduled on node {spec['nodeName']}; phase {status.get('phase', 'Pending')}")
    else:
        lines.append(f"not scheduled yet; phase {status.get('phase', 'Pending')}")
    selector = spec.get("nodeSelector")
    if selector:
        lines.append("nodeSelector: " + ", ".join(f"{k}={v}" for k, v in sorted(selector.items())))
    return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")
