"""Kueue manifests to models and back.

``parse`` turns a manifest dict into a model of ``queues.kueue.api`` or raises
``errors.Invalid`` listing every problem with its field path: first the shape (pydantic), then
Kueue's webhook rules (``queues.kueue.validation``). ``to_manifest`` renders a model back in
Kueue's own shape and the API version asked for, for ``turnstile get -o yaml`` and ``convert``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from queues import errors
from queues.kueue import validation
from queues.kueue.api import GROUP, KINDS, MAX_OBJECT_BYTES, VERSIONS, ClusterQueue, Cohort, KueueObject, model_of


def _pydantic_errors(exc: ValidationError) -> list[errors.FieldError]:
    out = []
    for err in exc.errors():
        msg = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field; check the spelling against Kueue's API"
        elif err["type"] == "missing":
            msg = "required field is missing"
        elif err["type"] == "literal_error":
            msg = msg.replace("Input should be", "must be")
        out.append(errors.FieldError(errors.loc_to_path(err["loc"]), msg))
    return out


def parse(doc: Any) -> KueueObject:
    """A manifest dict as a validated Kueue object, or ``errors.Invalid`` with every problem."""
    if not isinstance(doc, Mapping):
        raise errors.Invalid([errors.FieldError("", f"must be a mapping (a Kubernetes object), not {_typename(doc)}")])
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if api_version == f"{GROUP}/v1alpha1" and kind == "Topology":
        # Kueue served Topology at v1alpha1 before v1beta1, in the same shape (spec.levels[].nodeLabel):
        # read as v1beta1, so ``turnstile convert`` prints it as v1beta2
        doc = {**doc, "apiVersion": f"{GROUP}/v1beta1"}
        api_version = doc["apiVersion"]
    problems: list[errors.FieldError] = []
    if (
        not isinstance(api_version, str)
        or api_version.rpartition("/")[0] != GROUP
        or (api_version.rpartition("/")[2] not in VERSIONS)
    ):
        problems.append(
            errors.FieldError("apiVersion", f"{api_version!r} is not supported; use {GROUP}/v1beta1 or {GROUP}/v1beta2")
        )
    if kind not in KINDS:
        problems.append(
            errors.FieldError("kind", f"{kind!r} is not a Kueue kind Turnstile reads; one of {', '.join(KINDS)}")
        )
    if problems:
        raise errors.Invalid(problems)
    size = len(json.dumps(doc, default=str))
    if size > MAX_OBJECT_BYTES:
        raise errors.Invalid(
            [errors.FieldError("", f"the object is {size:,} bytes; Kubernetes stores at most {MAX_OBJECT_BYTES:,}")]
        )
    model = model_of(str(kind))
    try:
        obj = model.model_validate(dict(doc))
    except ValidationError as exc:
        found = _pydantic_errors(exc)
        raise errors.Invalid(found + [e for e in _beyond(model, doc, exc) if e not in found]) from None
    found = validation.validate(obj)  # type: ignore[arg-type]
    if found:
        raise errors.Invalid(found)
    return obj  # type: ignore[return-value]


def _beyond(model: type[BaseModel], doc: Mapping[str, Any], exc: ValidationError) -> list[errors.FieldError]:
    """The rest of an object's problems, so a user sees every one in a single run: the fields the
    schema refused are taken out (a few rounds at most) and, once what is left reads, the rules
    that need a whole object are checked too. Nothing when a refused field cannot simply be left
    out (a required one, a list item): then the schema's problems are all that can be said."""
    pruned: Any = copy.deepcopy(dict(doc))
    for _ in range(5):
        for err in exc.errors():
            if not _drop(pruned, err["loc"]):
                return []
        try:
            return validation.validate(model.model_validate(pruned))  # type: ignore[arg-type]
        except ValidationError as again:
            exc = again
    return []


def _drop(doc: Any, loc: tuple[int | str, ...]) -> bool:
    """Delete the mapping key at ``loc`` in ``doc``; False if there is none to delete."""
    node = doc
    for part in loc[:-1]:
        in_list = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if not in_list and not (isinstance(node, Mapping) and part in node):
            return False
        node = node[part]
    if not loc or not isinstance(node, dict) or loc[-1] not in node:
        return False
    del node[loc[-1]]
    return True


def _typename(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def to_manifest(obj: KueueObject, *, version: str = "v1beta1") -> dict[str, Any]:
    """The object in Kueue's own shape and the requested API version."""
    body = obj.model_dump(by_alias=True, exclude_none=True, exclude_defaults=False, exclude={"status"})
    body["apiVersion"] = f"{GROUP}/{version}"
    meta = {k: v for k, v in body["metadata"].items() if v not in ({}, None, "")}
    body["metadata"] = meta
    spec = body.get("spec")
    if isinstance(obj, ClusterQueue) and isinstance(spec, dict):
        cohort = spec.pop("cohort", None) or spec.pop("cohortName", None)
        spec.pop("cohortName", None)
        if cohort:
            spec["cohortName" if version == "v1beta2" else "cohort"] = cohort
        if version == "v1beta2":
            checks = spec.pop("admissionChecks", [])
            if checks and "admissionChecksStrategy" not in spec:
                spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
        fung = spec.get("flavorFungibility", {})
        if version == "v1beta1" and fung.get("whenCanBorrow") == "MayStopSearch":
            fung["whenCanBorrow"] = "Borrow"
        if version == "v1beta1" and fung.get("whenCanPreempt") == "MayStopSearch":
            fung["whenCanPreempt"] = "Preempt"
        for key in ("admissionChecks",):
            if not spec.get(key):
                spec.pop(key, None)
    if isinstance(obj, Cohort) and isinstance(spec, dict):
        parent = spec.pop("parent", None) or spec.pop("parentName", None)
        spec.pop("parentName", None)
        if parent:
            spec["parentName"] = parent
    ordered: dict[str, Any] = {k: body[k] for k in ("apiVersion", "kind", "metadata") if k in body}
    ordered.update({k: v for k, v in body.items() if k not in ordered})
    pruned: dict[str, Any] = _prune(ordered)
    return pruned


_KEEP_EMPTY = frozenset({"namespaceSelector", "spec", "metadata"})


def _prune(value: Any, key: str = "") -> Any:
    """Drop empty lists and maps (noise), except where empty means something (``namespaceSelector: {}``)."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            v = _prune(v, k)
            if v in ([], {}) and k not in _KEEP_EMPTY:
                continue
            out[k] = v
        return out
    if isinstance(value, list):
        return [_prune(v) for v in value]
    return value
