"""The three patch formats of the Kubernetes API: JSON merge, JSON patch (RFC 6902), strategic merge.

Strategic merge follows the kind's own patch metadata, as the real server does: the
``x-kubernetes-patch-strategy`` and ``x-kubernetes-patch-merge-key`` of each field in the
kind's OpenAPI schema (``schema`` is the kind's resolved schema, ``resolve`` follows ``$ref``):
lists with a merge key merge item by item, lists of primitives with the merge strategy are
unions, other lists are replaced, maps merge. kubectl's directives are understood:
``$patch`` (replace, delete, merge) on maps and list items, ``$retainKeys``,
``$setElementOrder/<list>`` and ``$deleteFromPrimitiveList/<list>``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from admission.sim.server.objects import ApiError, clone

Schema = dict[str, Any]
Resolve = Callable[[Any], Schema]

ORDER = "$setElementOrder/"
DELETE_FROM = "$deleteFromPrimitiveList/"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: maps merge recursively, null deletes, everything else (lists too) replaces."""
    if not isinstance(patch, dict):
        return clone(patch)
    out = clone(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _no_schema(_node: Any) -> Schema:
    return {}


def strategic_merge_patch(target: Any, patch: Any, schema: Schema | None = None, resolve: Resolve = _no_schema) -> Any:
    """A strategic merge patch of ``target`` by ``patch`` (see the module docstring)."""
    return _merge_value(target, patch, schema or {}, resolve)


def _merge_value(target: Any, patch: Any, schema: Schema, resolve: Resolve) -> Any:
    if isinstance(patch, dict):
        return _merge_map(target if isinstance(target, dict) else {}, patch, schema, resolve)
    return clone(patch)


def _property(schema: Schema, key: str, resolve: Resolve) -> Schema:
    props = schema.get("properties")
    if isinstance(props, dict) and key in props:
        return resolve(props[key])
    extra = schema.get("additionalProperties")
    return resolve(extra) if isinstance(extra, dict) else {}


def _merge_map(target: dict[str, Any], patch: dict[str, Any], schema: Schema, resolve: Resolve) -> Any:
    directive = patch.get("$patch")
    plain = {k: v for k, v in patch.items() if not k.startswith("$")}
    if directive == "delete":
        return None
    if directive == "replace":
        return clone(plain)
    out = clone(target)
    for key, value in plain.items():
        if value is None:
            out.pop(key, None)
            continue
        field = _property(schema, key, resolve)
        if isinstance(value, list):
            merged = _merge_list(out.get(key), value, field, resolve)
            out[key] = merged
        else:
            merged = _merge_value(out.get(key), value, field, resolve)
            if merged is None:
                out.pop(key, None)
            else:
                out[key] = merged
    for key, value in patch.items():
        if key.startswith(DELETE_FROM) and isinstance(out.get(key[len(DELETE_FROM) :]), list):
            name = key[len(DELETE_FROM) :]
            out[name] = [v for v in out[name] if v not in (value or [])]
    for key, value in patch.items():
        if key.startswith(ORDER) and isinstance(out.get(key[len(ORDER) :]), list):
            name = key[len(ORDER) :]
            out[name] = _ordered(out[name], value or [], _property(schema, name, resolve))
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        out = {k: v for k, v in out.items() if k in retain}
    return out


def _merge_list(target: Any, patch: list[Any], schema: Schema, resolve: Resolve) -> list[Any]:
    strategy = str(schema.get("x-kubernetes-patch-strategy") or "")
    key = schema.get("x-kubernetes-patch-merge-key")
    current = clone(target) if isinstance(target, list) else []
    if "merge" not in strategy.split(","):
        return [clone(v) for v in patch if not (isinstance(v, dict) and v.get("$patch"))]
    if not key:  # a set of primitives
        return current + [clone(v) for v in patch if v not in current]
    items = resolve(schema.get("items") or {})
    index = {item.get(key): i for i, item in enumerate(current) if isinstance(item, dict)}
    merged: list[Any] = list(current)
    for item in patch:
        if not isinstance(item, dict):
            continue
        if item.get("$patch") == "replace" and len(item) == 1:
            return [clone(v) for v in patch if v is not item]
        at = index.get(item.get(key))
        if at is not None:
            merged[at] = None if item.get("$patch") == "delete" else _merge_map(merged[at], item, items, resolve)
        elif item.get("$patch") != "delete":
            merged.append(_merge_map({}, item, items, resolve))
    return [i for i in merged if i is not None]


def _ordered(items: list[Any], order: list[Any], schema: Schema) -> list[Any]:
    """``$setElementOrder``: the listed items in the given order, then the rest as they were."""
    key = schema.get("x-kubernetes-patch-merge-key")

    def ident(v: Any) -> Any:
        return v.get(key) if key and isinstance(v, dict) else v

    wanted = [ident(o) for o in order]
    rank = {w: i for i, w in enumerate(wanted)}
    listed = sorted((i for i in items if ident(i) in rank), key=lambda i: rank[ident(i)])
    return listed + [i for i in items if ident(i) not in rank]


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


def apply(
    content_type: str, body: Any, current: Any, *, strategic: bool, schema: Schema | None, resolve: Resolve
) -> Any:
    """``current`` after the patch ``body`` of ``content_type``: a JSON merge patch, a JSON patch, or
    (``strategic``: a built-in kind, with its ``schema``) a strategic merge patch. A custom
    resource's strategic patch is refused 415, as the real server refuses it."""
    if content_type == "application/merge-patch+json":
        return dict(merge_patch(current, body))
    if content_type == "application/json-patch+json":
        return dict(json_patch(current, body))
    if content_type == "application/strategic-merge-patch+json":
        if not strategic:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: "
                "application/json-patch+json, application/merge-patch+json",
            )
        return dict(strategic_merge_patch(current, body, schema, resolve))
    raise ApiError(415, "UnsupportedMediaType", f"unsupported patch type {content_type!r}")
