"""What the webhook answers for Kueue's queue objects (``kueue.x-k8s.io``) created or edited in the cluster.

- **Validating**: the object is checked with the very code ``turnstile apply`` uses
  (``queues.kueue.codec.parse``), so ``kubectl apply`` of an invalid ClusterQueue is refused with every
  problem and its field path, and nothing is stored. An update that changes nothing an admin
  declared (status, finalizers, the edit annotations) is not judged again, so an object stored
  under older rules can still be finalized and deleted. A LocalQueue's ClusterQueue cannot change,
  as Kueue's CEL rule says (its CRD carries the rule too).
- **Mutating**: ``turnstile.dev/edited-by`` is set to the requesting user (the review's
  ``userInfo.username``) whenever the declared content changes, and kept as it was otherwise
  (a finalizer or status write by the controller is not an edit). The controller reconciling the
  object into PostgreSQL audits the change under that name.

Neither needs the database or a loaded configuration: a database outage never blocks an
admin's edit; the object is reconciled once the database is back.
"""

from __future__ import annotations

from typing import Any

from admission.webhook.review import Answer
from queues import errors
from queues.kueue import api, codec, validation
from queues.podsets import jobs

Obj = dict[str, Any]

EDITED_BY = "turnstile.dev/edited-by"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
NOT_DECLARED = frozenset({EDITED_BY, LAST_APPLIED})  # annotations about an edit, not part of the object


def is_queue_object(request_kind: Any) -> bool:
    return isinstance(request_kind, dict) and request_kind.get("group") == api.GROUP


def declared(obj: Obj) -> dict[str, Any]:
    """What an admin declared: the object without status, server-owned metadata, finalizers and
    the annotations about who edited it; what is validated and stored."""
    meta = obj.get("metadata") or {}
    kept: dict[str, Any] = {"name": meta.get("name")}
    if meta.get("namespace"):
        kept["namespace"] = meta["namespace"]
    if meta.get("labels"):
        kept["labels"] = dict(meta["labels"])
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in NOT_DECLARED}
    if annotations:
        kept["annotations"] = annotations
    body = {k: v for k, v in obj.items() if k not in ("metadata", "status")}
    return {**body, "metadata": kept}


def editor(obj: Obj | None) -> str | None:
    value = (((obj or {}).get("metadata") or {}).get("annotations") or {}).get(EDITED_BY)
    return str(value) if value else None


def mutate(operation: str, obj: Obj, old: Obj | None, user: Any) -> Answer:
    answer = Answer()
    changed = operation == "CREATE" or old is None or declared(obj) != declared(old)
    username = str((user or {}).get("username") or "") if isinstance(user, dict) else ""
    want = (username or None) if changed else editor(old)
    have = editor(obj)
    if want == have:
        return answer
    annotations = (obj.get("metadata") or {}).get("annotations")
    pointer = f"/metadata/annotations/{jobs.pointer_token(EDITED_BY)}"
    if want is None:
        answer.patch.append({"op": "remove", "path": pointer})
    elif not isinstance(annotations, dict):
        answer.patch.append({"op": "add", "path": "/metadata/annotations", "value": {EDITED_BY: want}})
    else:
        answer.patch.append({"op": "add", "path": pointer, "value": want})
    return answer


def validate(operation: str, obj: Obj, old: Obj | None, *, admission_fair_sharing: bool = False) -> Answer:
    answer = Answer()
    if operation not in ("CREATE", "UPDATE"):
        return answer  # deletion is guarded by the finalizer kueue.x-k8s.io/resource-in-use
    if operation == "UPDATE" and old is not None and declared(obj) == declared(old):
        return answer
    if operation == "UPDATE" and old is not None and obj.get("kind") == "LocalQueue":
        before, after = ((o.get("spec") or {}).get("clusterQueue") for o in (old, obj))
        if before != after:  # as Kueue's CEL rule: move the jobs by a new LocalQueue instead
            answer.allowed = False
            answer.message = (
                f"LocalQueue {(obj.get('metadata') or {}).get('namespace')}/{(obj.get('metadata') or {}).get('name')} "
                f"is invalid: spec.clusterQueue: field is immutable ({before!r}); create another LocalQueue instead"
            )
            return answer
    body = declared(obj)
    name = (body.get("metadata") or {}).get("name")
    namespace = (body.get("metadata") or {}).get("namespace")
    subject = f"{body.get('kind')} {namespace + '/' if namespace else ''}{name}"
    try:
        parsed = codec.parse(body)  # (a Topology too: the API server stores it, Turnstile checks and warns)
        unused = validation.unused_fields(parsed, admission_fair_sharing=admission_fair_sharing)
        answer.warnings.extend(f"{subject}: {e}" for e in unused)
    except errors.Invalid as exc:
        answer.allowed = False
        answer.message = f"{subject} is invalid: " + "; ".join(str(e) for e in exc.errors)
    return answer
