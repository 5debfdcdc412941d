"""Kueue's resource transformations: what a pod's containers request, as quota counts it.

Kueue's configuration has a ``resources`` section that changes a pod set's requests before they
meet quota (``pkg/workload/workload.go``'s ``totalRequestsFromPodSets``):

- ``excludeResourcePrefixes``: requests whose name starts with one of these are not counted at all;
- ``transformations``: each names an ``input`` resource and the ``outputs`` one unit of it stands
  for (``nvidia.com/mig-1g.18gb: 1`` -> ``example.com/gpu-memory: 18Gi``), optionally multiplied by
  the amount of another requested resource (``multiplyBy``: HAMi's ``nvidia.com/gpumem`` is per
  vGPU, so ``multiplyBy: nvidia.com/gpu`` makes it a total); ``strategy`` ``Retain`` (the default)
  keeps the input beside its outputs, ``Replace`` drops it (with no outputs: the input is ignored).

As in Kueue: outputs of several inputs that name the same resource are summed; a negative output
factor writes an allowance, and a resource's generated total below zero counts as zero (it never
reduces a request that was not part of that arithmetic); the DRA charge (``queues.dra.charges``)
is added after. Amounts are exact: milli-units multiplied as integers, a fraction of a milli-unit
rounded up as Kubernetes' ``MilliValue`` does.

The same section's ``quotaCheckStrategy`` says what a request of a resource the ClusterQueue does
not cover means: ``BlockUndeclared`` (the default) keeps the workload out (``NoMatchingFlavor``),
``IgnoreUndeclared`` leaves that resource out of the quota check (the pod still asks a node for it)
and may not be combined with ``excludeResourcePrefixes`` (Kueue's validation); the flavor assigner
reads it (``queues.cycle.flavors``).

A pod set keeps what its containers asked in ``container_requests`` when anything changed, since a
node is asked for the real resources (a node has no ``nvidia.com/total-gpumem``), not for quota's.
Turnstile reads the setting ``TURNSTILE_RESOURCE_TRANSFORMATIONS`` (Kueue's list, JSON or YAML),
``TURNSTILE_EXCLUDE_RESOURCE_PREFIXES`` and ``TURNSTILE_QUOTA_CHECK_STRATEGY``; a scenario its
top-level ``resourceTransformations``, ``excludeResourcePrefixes`` and ``quotaCheckStrategy``
(docs/scenario-format.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from queues import errors, quantity
from queues.errors import FieldError
from queues.podsets.jobs import PodSet

RETAIN = "Retain"
REPLACE = "Replace"
STRATEGIES = (RETAIN, REPLACE)
FIELDS = ("input", "strategy", "multiplyBy", "outputs")
SETTING = "TURNSTILE_RESOURCE_TRANSFORMATIONS"
BLOCK_UNDECLARED = "BlockUndeclared"
IGNORE_UNDECLARED = "IgnoreUndeclared"
QUOTA_CHECK_STRATEGIES = (BLOCK_UNDECLARED, IGNORE_UNDECLARED)


@dataclass(frozen=True, slots=True)
class Transformation:
    """One entry of Kueue's ``resources.transformations``."""

    input: str
    outputs: tuple[tuple[str, int], ...] = ()  # resource -> milli-units per unit of input
    strategy: str = RETAIN
    multiply_by: str | None = None


@dataclass(frozen=True, slots=True)
class Transformations:
    """Kueue's ``resources.transformations``, ``excludeResourcePrefixes`` and ``quotaCheckStrategy``
    (module docstring)."""

    by_input: Mapping[str, Transformation] = field(default_factory=dict)
    exclude_prefixes: tuple[str, ...] = ()
    ignore_undeclared: bool = False  # quotaCheckStrategy IgnoreUndeclared

    def __bool__(self) -> bool:
        return bool(self.by_input or self.exclude_prefixes)

    def requests(self, requests: Mapping[str, int]) -> Mapping[str, int]:
        """``requests`` (one pod's, milli-units) as quota counts them."""
        kept = {r: v for r, v in requests.items() if not r.startswith(self.exclude_prefixes)}
        if not any(r in self.by_input for r in kept):
            return kept
        retained: dict[str, int] = {}
        generated: dict[str, int] = {}
        for name, value in kept.items():
            t = self.by_input.get(name)
            if t is None:
                retained[name] = value
                continue
            # the outputs are computed from the input times the multiplier's amount; Retain keeps
            # the input as it was requested (the multiplier does not reach it)
            scale = kept.get(t.multiply_by) if t.multiply_by else None
            for output, factor in t.outputs:
                if scale is None:
                    amount = _ceil_div(value * factor, quantity.MILLI)
                else:
                    amount = _ceil_div(value * scale * factor, quantity.MILLI * quantity.MILLI)
                generated[output] = generated.get(output, 0) + amount
            if t.strategy == RETAIN:
                retained[name] = value
        out = dict(retained)
        for name, amount in generated.items():
            out[name] = out.get(name, 0) + max(0, amount)
        return {r: max(0, v) for r, v in out.items()}

    def apply(self, pod_sets: tuple[PodSet, ...]) -> tuple[PodSet, ...]:
        """Each pod set with its requests as quota counts them (``container_requests``: what they were)."""
        if not self:
            return pod_sets
        out = []
        for ps in pod_sets:
            counted = self.requests(ps.requests)
            if counted != dict(ps.requests):
                ps = dataclasses.replace(ps, requests=counted, container_requests=ps.requests)
            out.append(ps)
        return tuple(out)


NONE = Transformations()


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def parse(raw: Any, exclude: Any = None, strategy: Any = None, *, path: str = "transformations",
          exclude_path: str = "excludeResourcePrefixes",
          strategy_path: str = "quotaCheckStrategy") -> Transformations:  # fmt: skip
    """Kueue's ``transformations`` list, ``excludeResourcePrefixes`` and ``quotaCheckStrategy``, or
    ``errors.Invalid`` naming every problem's field (Kueue's validation: a known strategy, each
    input once, no prefixes excluded when undeclared resources are ignored)."""
    problems: list[FieldError] = []
    if strategy is not None and strategy not in QUOTA_CHECK_STRATEGIES:
        problems.append(
            FieldError(strategy_path, f"Unsupported value: {strategy!r}: must be {' or '.join(QUOTA_CHECK_STRATEGIES)}")
        )
    if strategy == IGNORE_UNDECLARED and exclude:
        problems.append(
            FieldError(
                strategy_path, "excludeResourcePrefixes is not allowed when quotaCheckStrategy is IgnoreUndeclared"
            )
        )
    by_input: dict[str, Transformation] = {}
    if raw is not None and not isinstance(raw, list):
        problems.append(FieldError(path, "must be a list of {input, strategy, multiplyBy, outputs}"))
        raw = []
    for i, entry in enumerate(raw or []):
        t = _transformation(entry, f"{path}[{i}]", problems)
        if t is None:
            continue
        if t.input in by_input:
            problems.append(FieldError(f"{path}[{i}].input", f"Duplicate value: {t.input!r}; one entry per input"))
            continue
        by_input[t.input] = t
    prefixes: list[str] = []
    if exclude is not None and not isinstance(exclude, list):
        problems.append(FieldError(exclude_path, "must be a list of resource name prefixes"))
        exclude = []
    for j, prefix in enumerate(exclude or []):
        if not isinstance(prefix, str) or not prefix:
            problems.append(FieldError(f"{exclude_path}[{j}]", f"must be a resource name prefix, not {prefix!r}"))
        else:
            prefixes.append(prefix)
    if problems:
        raise errors.Invalid(problems)
    return Transformations(by_input, tuple(prefixes), strategy == IGNORE_UNDECLARED)


def _transformation(entry: Any, where: str, problems: list[FieldError]) -> Transformation | None:
    if not isinstance(entry, Mapping):
        problems.append(FieldError(where, "must be a mapping {input, strategy, multiplyBy, outputs}"))
        return None
    before = len(problems)
    for key in entry:
        if key not in FIELDS:
            problems.append(FieldError(f"{where}.{key}", f"unknown field; a transformation has {', '.join(FIELDS)}"))
    name = entry.get("input")
    if not isinstance(name, str) or not name:
        problems.append(FieldError(f"{where}.input", "required: the resource name a pod requests"))
    strategy = entry.get("strategy", RETAIN)
    if strategy not in STRATEGIES:
        problems.append(FieldError(f"{where}.strategy", f"Unsupported value: {strategy!r}: one of Retain, Replace"))
    multiply_by = entry.get("multiplyBy")
    if multiply_by is not None and (not isinstance(multiply_by, str) or not multiply_by):
        problems.append(FieldError(f"{where}.multiplyBy", f"must be a resource name, not {multiply_by!r}"))
    raw_outputs = entry.get("outputs") or {}
    outputs: list[tuple[str, int]] = []
    if not isinstance(raw_outputs, Mapping):
        problems.append(FieldError(f"{where}.outputs", "must map resource names to quantities per unit of input"))
        raw_outputs = {}
    for output, value in raw_outputs.items():
        try:
            outputs.append((str(output), quantity.parse_milli(value)))
        except quantity.QuantityError as exc:
            problems.append(FieldError(f"{where}.outputs.{output}", str(exc)))
    if len(problems) > before:
        return None
    assert isinstance(name, str)
    return Transformation(name, tuple(outputs), str(strategy), multiply_by)
