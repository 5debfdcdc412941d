"""The three patch formats of the Kubernetes API: JSON merge, JSON patch (RFC 6902), strategic merge.

Strategic merge is implemented for what built-in kinds need here: lists of containers, init
containers, volumes, volume mounts, env and ports merge by their key; other lists are replaced.
"""

from __future__ import annotations

from typing import Any

from admission.sim.objects import ApiError, clone

MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "env": "name",
    "ports": "containerPort",
    "imagePullSecrets": "name",
}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: maps merge recursively, null deletes, everything else (lists too) replaces."""
    return _merge(target, patch, "", keyed=False)


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """A merge patch in which the lists of ``MERGE_KEYS`` merge item by item on their key."""
    return _merge(target, patch, "", keyed=True)


def _merge(target: Any, patch: Any, field: str, *, keyed: bool) -> Any:
    if keyed and isinstance(patch, list) and field in MERGE_KEYS and isinstance(target, list):
        key = MERGE_KEYS[field]
        merged = clone(target)
        index = {item.get(key): i for i, item in enumerate(merged) if isinstance(item, dict)}
        for item in patch:
            if isinstance(item, dict) and item.get(key) in index:
                if item.get("$patch") == "delete":
                    merged[index[item[key]]] = None
                else:
                    merged[index[item[key]]] = _merge(merged[index[item[key]]], item, "", keyed=True)
            elif not (isinstance(item, dict) and item.get("$patch") == "delete"):
                merged.append(clone(item))
        return [i for i in merged if i is not None]
    if not isinstance(patch, dict):
        return clone(patch)
    out = clone(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value, key, keyed=keyed)
    return out


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, "Invalid", f"json patch path {path!r} must start with /")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, parts: list[str]) -> Any:
    for p in parts:
        if isinstance(doc, list):
            doc = doc[int(p)]
        elif isinstance(doc, dict):
            doc = doc[p]
        else:
            raise KeyError(p)
    return doc


def json_patch(doc: Any, ops: Any) -> Any:
    """RFC 6902: add, remove, replace, move, copy, test; any failure is a 422 and changes nothing."""
    if not isinstance(ops, list):
        raise ApiError(400, "BadRequest", "a json patch must be a list of operations")
    out = clone(doc)
    for i, op in enumerate(ops):
        try:
            kind = op["op"]
            parts = _pointer(op["path"])
            if kind == "test":
                if _walk(out, parts) != op["value"]:
                    raise ApiError(422, "Invalid", f"json patch test operation {i} failed at {op['path']}")
                continue
            if kind in ("move", "copy"):
                value = clone(_walk(out, _pointer(op["from"])))
                if kind == "move":
                    out = _remove(out, _pointer(op["from"]))
                out = _add(out, parts, value)
            elif kind == "add":
                out = _add(out, parts, clone(op["value"]))
            elif kind == "remove":
                out = _remove(out, parts)
            elif kind == "replace":
                _walk(out, parts)  # must exist
                out = _add(_remove(out, parts), parts, clone(op["value"]))
            else:
                raise ApiError(422, "Invalid", f"json patch operation {i}: unknown op {kind!r}")
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise ApiError(422, "Invalid", f"json patch operation {i} ({op!r}) cannot be applied: {exc}") from None
    return out


def _add(doc: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    parent = _walk(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, list):
        parent.insert(len(parent) if last == "-" else int(last), value)
    else:
        parent[last] = value
    return doc


def _remove(doc: Any, parts: list[str]) -> Any:
    parent = _walk(doc, parts[:-1])
    if isinstance(parent, list):
        parent.pop(int(parts[-1]))
    else:
        del parent[parts[-1]]
    return doc
