"""Kubernetes' ``Table`` output (``meta.k8s.io/v1``), for every server here that answers kubectl.

kubectl asks for ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io`` and prints whatever
columns the server sends; ``kubectl get -A`` adds the NAMESPACE column from each row's object
metadata. Both the simulated API server (``admission.sim.server.tables``) and the controller's
aggregated API (``admission.aggregated``) answer with these.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Obj = dict[str, Any]
Column = dict[str, Any]


def wants_table(accept: str) -> bool:
    return "as=Table" in accept and "g=meta.k8s.io" in accept


def human_duration(seconds: float) -> str:
    """Kubernetes' ``duration.HumanDuration``: 5s, 2m30s, 95m, 3h10m, 2d4h, 1y30d."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def column(name: str, kind: str = "string", *, priority: int = 0, fmt: str = "") -> Column:
    return {"name": name, "type": kind, "format": fmt, "description": "", "priority": priority}


def table(
    columns: list[Column],
    cells: Callable[[Obj], list[Any]],
    objects: list[Obj],
    *,
    include: str,
    metadata: Obj,
) -> Obj:
    """A Table of ``objects``; ``include`` (the request's ``includeObject``): None, Metadata
    (kubectl's default) or Object; ``metadata``: the list's (resourceVersion, continue)."""
    rows = []
    for obj in objects:
        row: Obj = {"cells": cells(obj)}
        if include == "Object":
            row["object"] = obj
        elif include != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata") or {},
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": columns,
        "rows": rows,
    }
