"""CRD validation rules (``x-kubernetes-validations``), evaluated as the real API server does.

A custom resource's schema may carry CEL rules at any level; each is evaluated with ``self``
bound to the value at that level (a *transition rule*, one that names ``oldSelf``, only on an
update, with ``oldSelf`` the value before), and an object failing any rule is refused with the
rule's message and its field path: ``spec: Invalid value: "object": borrowingLimit must be nil
when cohort is empty``. Kueue's CRDs (and Turnstile's, ``queues.kueue.crds``) rely on them.

Evaluated with cel-python (a dependency of Turnstile: a plain ``pip install`` evaluates them, as
``turnstile demo`` and ``sim up`` must). Inside lists, transition rules are not evaluated (the real
server correlates old and new items only for map-typed lists).

The same evaluator serves admission webhooks' ``matchConditions`` (``condition``).
"""

from __future__ import annotations

import functools
from typing import Any

import celpy
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError

Obj = dict[str, Any]


@functools.lru_cache(maxsize=512)
def _program(rule: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(rule))


def _holds(rule: str, value: Any, old: Any) -> bool:
    activation = {"self": json_to_cel(value)}
    if old is not None:
        activation["oldSelf"] = json_to_cel(old)
    try:
        return bool(_program(rule).evaluate(activation))
    except CELEvalError:
        return False  # as the real server: a rule that cannot be evaluated does not pass


def compile_error(expression: str) -> str | None:
    """Why ``expression`` does not compile (None: it does). Compiling is what the real server does
    when a webhook configuration is written; the program is kept, so requests only evaluate it."""
    try:
        _program(expression)
    except Exception as exc:  # celpy's CELParseError and friends
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return None


def activation(variables: Obj) -> Obj:
    """Variables as CEL values, once for every condition evaluated over them."""
    return {name: json_to_cel(value) for name, value in variables.items()}


def condition(expression: str, bound: Obj) -> bool:
    """An admission webhook's ``matchConditions`` expression over ``object``, ``oldObject`` and
    ``request`` (``activation``; null where absent, as the real server binds them).
    ``CELEvalError`` (or a compile error, ``ValueError``) when it cannot be evaluated: the caller
    applies the failure policy."""
    try:
        program = _program(expression)
    except Exception as exc:  # celpy's CELParseError and friends: the expression does not compile
        raise ValueError(f"{expression!r} does not compile: {exc}") from exc
    result = program.evaluate(bound)
    if isinstance(result, CELEvalError):
        raise result
    return bool(result)


def violations(schema: Obj, value: Any, old: Any = None, path: str = "") -> list[tuple[str, str]]:
    """Every (field path, message) of a rule ``value`` breaks, walking ``schema`` beside it."""
    if value is None or not isinstance(schema, dict):
        return []
    out: list[tuple[str, str]] = []
    for rule in schema.get("x-kubernetes-validations") or []:
        text = str(rule.get("rule") or "")
        if "oldSelf" in text and old is None:
            continue  # a transition rule: only on an update that had the value before
        if not _holds(text, value, old):
            kind = "object" if isinstance(value, dict) else "array" if isinstance(value, list) else "string"
            message = rule.get("message") or f"failed rule: {text}"
            out.append((path or "<root>", f'Invalid value: "{kind}": {message}'))
    if isinstance(value, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key in value:
                before = old.get(key) if isinstance(old, dict) else None
                out += violations(sub, value[key], before, f"{path}.{key}" if path else key)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            out += violations(schema["items"], item, None, f"{path}[{i}]")
    return out
