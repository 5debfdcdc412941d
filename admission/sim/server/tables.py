"""Server-side ``Table`` output, so ``kubectl get`` prints the columns it prints on a real cluster.

kubectl asks for ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io`` and prints whatever
columns the server sends. The columns and cells here follow Kubernetes' own printers
(``pkg/printers/internalversion``) for the kinds people look at: Jobs (NAME, STATUS,
COMPLETIONS, DURATION, AGE), Pods, Nodes, Events, Namespaces, Deployments and CRDs. A custom
resource gets its CRD's ``additionalPrinterColumns`` (a simple JSONPath: ``.spec.cohort``,
``.status.conditions[0].status``, ``.status.conditions[?(@.type=="Active")].status``), else
NAME and AGE, as the real server; every other kind NAME and AGE.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from typing import Any

from aiohttp import web

from admission.kube import table as kube_table
from admission.kube.table import human_duration, wants_table
from admission.sim.server.objects import Obj, Resource

__all__ = ["human_duration", "printer_for", "table", "wants_table"]

Column = dict[str, Any]
Printer = tuple[list[Column], Callable[[Obj], list[Any]]]


def _time(value: Any) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return dt.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        return None


def _since(value: Any) -> str:
    when = _time(value)
    return "<unknown>" if when is None else human_duration((dt.datetime.now(dt.UTC) - when).total_seconds())


def _age(obj: Obj) -> str:
    return _since((obj.get("metadata") or {}).get("creationTimestamp"))


_col = kube_table.column


NAME = _col("Name", fmt="name")
AGE = _col("Age")


def _conditions(obj: Obj) -> dict[str, str]:
    return {
        str(c.get("type")): str(c.get("status"))
        for c in (obj.get("status") or {}).get("conditions") or []
        if isinstance(c, dict)
    }


def _job(obj: Obj) -> list[Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    succeeded = int(status.get("succeeded") or 0)
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{spec['completions']}"
    elif int(spec.get("parallelism") or 0) > 1:
        completions = f"{succeeded}/1 of {spec['parallelism']}"
    else:
        completions = f"{succeeded}/1"
    start, end = _time(status.get("startTime")), _time(status.get("completionTime"))
    duration = ""
    if start is not None:
        duration = human_duration(((end or dt.datetime.now(dt.UTC)) - start).total_seconds())
    conditions = _conditions(obj)
    if conditions.get("Complete") == "True":
        state = "Complete"
    elif conditions.get("Failed") == "True":
        state = "Failed"
    elif (obj.get("metadata") or {}).get("deletionTimestamp"):
        state = "Terminating"
    elif conditions.get("Suspended") == "True":
        state = "Suspended"
    elif conditions.get("FailureTarget") == "True":
        state = "FailureTarget"
    elif conditions.get("SuccessCriteriaMet") == "True":
        state = "SuccessCriteriaMet"
    else:
        state = "Running"
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    selector = ",".join(f"{k}={v}" for k, v in ((spec.get("selector") or {}).get("matchLabels") or {}).items())
    return [
        obj["metadata"]["name"],
        state,
        completions,
        duration,
        _age(obj),
        ",".join(str(c.get("name")) for c in containers),
        ",".join(str(c.get("image")) for c in containers),
        selector or "<none>",
    ]


def _pod(obj: Obj) -> list[Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    containers = spec.get("containers") or []
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready"))
    phase = str(status.get("phase") or "Pending")
    reason = phase
    if phase == "Succeeded":
        reason = "Completed"
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        reason = "Terminating"
    elif phase == "Pending" and spec.get("schedulingGates"):
        reason = "SchedulingGated"
    elif phase == "Running" and not statuses:
        ready = len(containers)  # the simulated kubelet reports no container statuses: all up
    restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
    gates = spec.get("readinessGates") or []
    return [
        obj["metadata"]["name"],
        f"{ready}/{len(containers)}",
        reason,
        str(restarts),
        _age(obj),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        f"{len(gates)}/{len(gates)}" if gates else "<none>",
    ]


def _node(obj: Obj) -> list[Any]:
    conditions = _conditions(obj)
    state = "Ready" if conditions.get("Ready", "True") == "True" else "NotReady"
    if (obj.get("spec") or {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    labels = (obj.get("metadata") or {}).get("labels") or {}
    roles = sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/"))
    info = (obj.get("status") or {}).get("nodeInfo") or {}
    return [obj["metadata"]["name"], state, ",".join(roles) or "<none>", _age(obj), info.get("kubeletVersion") or ""]


def _event(obj: Obj) -> list[Any]:
    involved = obj.get("involvedObject") or obj.get("regarding") or {}
    last = obj.get("lastTimestamp") or obj.get("eventTime") or (obj.get("metadata") or {}).get("creationTimestamp")
    return [
        _since(last),
        obj.get("type") or "",
        obj.get("reason") or "",
        f"{str(involved.get('kind') or '').lower()}/{involved.get('name') or ''}",
        obj.get("note") or obj.get("message") or "",
    ]


def _namespace(obj: Obj) -> list[Any]:
    return [obj["metadata"]["name"], (obj.get("status") or {}).get("phase") or "Active", _age(obj)]


def _deployment(obj: Obj) -> list[Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    wanted = int(spec.get("replicas", 1) or 0)
    return [
        obj["metadata"]["name"],
        f"{int(status.get('readyReplicas') or 0)}/{wanted}",
        int(status.get("updatedReplicas") or 0),
        int(status.get("availableReplicas") or 0),
        _age(obj),
    ]


def _crd(obj: Obj) -> list[Any]:
    return [obj["metadata"]["name"], (obj.get("metadata") or {}).get("creationTimestamp") or ""]


PRINTERS: dict[tuple[str, str], Printer] = {
    ("batch", "Job"): (
        [NAME, _col("Status"), _col("Completions"), _col("Duration"), AGE]
        + [_col(n, priority=1) for n in ("Containers", "Images", "Selector")],
        _job,
    ),
    ("", "Pod"): (
        [NAME, _col("Ready"), _col("Status"), _col("Restarts", "string"), AGE]
        + [_col(n, priority=1) for n in ("IP", "Node", "Nominated Node", "Readiness Gates")],
        _pod,
    ),
    ("", "Node"): ([NAME, _col("Status"), _col("Roles"), AGE, _col("Version")], _node),
    ("", "Event"): ([_col("Last Seen"), _col("Type"), _col("Reason"), _col("Object"), _col("Message")], _event),
    ("events.k8s.io", "Event"): (
        [_col("Last Seen"), _col("Type"), _col("Reason"), _col("Object"), _col("Message")],
        _event,
    ),
    ("", "Namespace"): ([NAME, _col("Status"), AGE], _namespace),
    ("apps", "Deployment"): (
        [NAME, _col("Ready"), _col("Up-to-date", "integer"), _col("Available", "integer"), AGE],
        _deployment,
    ),
    ("apiextensions.k8s.io", "CustomResourceDefinition"): ([NAME, _col("Created At", "date")], _crd),
}


def jsonpath(obj: Any, path: str) -> Any:
    """The subset of JSONPath CRD printer columns use: ``.a.b``, ``.a[0]``, ``.a[?(@.k=="v")].b``."""
    current: Any = obj
    for part in re.findall(r"\[\?\(@\.[^)]*\)\]|\[\d+\]|[^.\[\]]+", path.strip().lstrip("$")):
        if current is None:
            return None
        if part.startswith("[?("):
            match = re.match(r'\[\?\(@\.([\w.-]+)\s*==\s*["\']([^"\']*)["\']\)\]', part)
            if match is None or not isinstance(current, list):
                return None
            key, value = match.groups()
            current = next((i for i in current if isinstance(i, dict) and str(i.get(key)) == value), None)
        elif part.startswith("["):
            index = int(part[1:-1])
            current = current[index] if isinstance(current, list) and index < len(current) else None
        else:
            current = current.get(part) if isinstance(current, dict) else None
    return current


def custom_printer(columns: list[dict[str, Any]]) -> Printer:
    """A CRD's ``additionalPrinterColumns`` (the real server defaults them to an Age column)."""
    columns = columns or [{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]
    defs = [NAME] + [
        _col(str(c.get("name")), str(c.get("type") or "string"), priority=int(c.get("priority") or 0)) for c in columns
    ]

    def cells(obj: Obj) -> list[Any]:
        out: list[Any] = [obj["metadata"]["name"]]
        for c in columns:
            value = jsonpath(obj, str(c.get("jsonPath") or ""))
            if c.get("type") == "date":
                value = _since(value) if value else "<unknown>"
            elif value is None:
                value = "<none>" if c.get("type") == "string" else None
            out.append(value)
        return out

    return defs, cells


def table(printer: Printer | None, objects: list[Obj], *, include: str, resource_version: str) -> Obj:
    """A ``meta.k8s.io/v1`` Table of ``objects``; ``include``: None, Metadata (default) or Object."""
    columns, cells = printer or ([NAME, AGE], lambda o: [o["metadata"]["name"], _age(o)])
    return kube_table.table(columns, cells, objects, include=include, metadata={"resourceVersion": resource_version})


def printer_for(res: Resource, crd_columns: dict[Resource, list[dict[str, Any]]]) -> Printer | None:
    if res in crd_columns:
        return custom_printer(crd_columns[res])
    return PRINTERS.get((res.group, res.kind))


def for_request(
    request: web.Request,
    columns: dict[Resource, list[dict[str, Any]]],
    res: Resource,
    objects: list[Obj],
    meta: dict[str, Any],
) -> Obj:
    """``objects`` as the Table a request with ``Accept: ...;as=Table`` asks for (``includeObject``
    honoured; ``columns``: the CRDs' additionalPrinterColumns)."""
    printer = printer_for(res, columns)
    include = request.query.get("includeObject") or "Metadata"
    if include == "Object":  # (a row's object is whole, kind and apiVersion too: kubectl --sort-by decodes it)
        objects = [{"apiVersion": res.api_version, "kind": res.kind, **o} for o in objects]
    out = table(printer, objects, include=include, resource_version=str(meta.get("resourceVersion") or ""))
    if meta.get("continue"):
        out["metadata"]["continue"] = meta["continue"]
    return out
