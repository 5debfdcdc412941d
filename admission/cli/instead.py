"""The kubectl command a refused CLI edit names, when Kubernetes declares the install's queues.

In an install whose source is ``kubernetes`` (``admission.store.source``) the objects in the
cluster are the truth, so ``turnstile apply/quota set/stop/resume/delete`` do not write
PostgreSQL behind the API server's back (the next reconciliation would undo it). They refuse
and print the command that makes the same change through the API server, where it is
validated by the webhook and audited with the user's own name. Each command here is meant to
be copied and run as printed.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from queues import quantity
from queues.kueue import api


def _target(kind: str, key: str) -> str:
    if kind == "LocalQueue" and "/" in key:
        namespace, _, name = key.partition("/")
        return f"localqueue {shlex.quote(name)} -n {shlex.quote(namespace)}"
    return f"{kind.lower()} {shlex.quote(key)}"


def apply(path: str, objects: list[api.KueueObject]) -> str:
    if any(o.version != "v1beta2" for o in objects):
        # the cluster serves v1beta2 only, as Kueue v0.20: convert first
        return f"turnstile convert -f {shlex.quote(path)} | kubectl apply -f -"
    return f"kubectl apply -f {shlex.quote(path)}"


def delete(kind: str, key: str) -> str:
    return f"kubectl delete {_target(kind, key)}"


def stop_policy(kind: str, key: str, policy: str) -> str:
    body = json.dumps({"spec": {"stopPolicy": policy}}, separators=(",", ":"))
    return f"kubectl patch {_target(kind, key)} --type merge -p {shlex.quote(body)}"


def quota(
    name: str,
    manifest: dict[str, Any],
    *,
    flavor: str,
    resource: str,
    values: dict[str, int | None],
) -> str:
    """A JSON patch of the quota's own fields (``values``: nominalQuota, borrowingLimit,
    lendingLimit in milli-units; None leaves one as it is), guarded by ``test`` ops so it
    lands on the flavor and resource it names even if the list was reordered meanwhile."""
    for i, group in enumerate((manifest.get("spec") or {}).get("resourceGroups") or []):
        for j, fq in enumerate(group.get("flavors") or []):
            for k, rq in enumerate(fq.get("resources") or []):
                if fq.get("name") != flavor or rq.get("name") != resource:
                    continue
                base = f"/spec/resourceGroups/{i}/flavors/{j}"
                ops: list[dict[str, Any]] = [
                    {"op": "test", "path": f"{base}/name", "value": flavor},
                    {"op": "test", "path": f"{base}/resources/{k}/name", "value": resource},
                ]
                for field, value in values.items():
                    if value is not None:
                        path = f"{base}/resources/{k}/{field}"
                        ops.append({"op": "add", "path": path, "value": quantity.format_milli(value)})
                body = json.dumps(ops, separators=(",", ":"))
                return f"kubectl patch clusterqueue {shlex.quote(name)} --type json -p {shlex.quote(body)}"
    return f"kubectl edit clusterqueue {shlex.quote(name)}"


def mode_line(source: str) -> str:
    if source == "kubernetes":
        return (
            "configuration source: kubernetes (kueue.x-k8s.io/v1beta2 objects; edit with kubectl, "
            "reconciled into PostgreSQL and audited)"
        )
    return "configuration source: database (edit with turnstile apply/quota/stop/resume/delete)"
