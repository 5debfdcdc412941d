"""Label selectors, node affinity and taints: does a pod set fit a flavor, a namespace a queue.

Mirrors Kubernetes' own matching rules (``labels.Selector``, the scheduler's required node
affinity, ``FindMatchingUntoleratedTaint``) over plain dicts as they appear in manifests.
Kueue's flavor check is reproduced too: a pod set's node constraints are first restricted
to the label keys that the resource group's flavors use, then matched against the
flavor's ``nodeLabels``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Labels = Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``matchExpressions`` entry (label selector or node selector term)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Labels) -> bool:
        op = self.operator
        present = self.key in labels
        if op == "In":
            return present and labels[self.key] in self.values
        if op == "NotIn":
            return not present or labels[self.key] not in self.values
        if op == "Exists":
            return present
        if op == "DoesNotExist":
            return not present
        if op in ("Gt", "Lt"):
            if not present or len(self.values) != 1:
                return False
            try:
                have, want = int(labels[self.key]), int(self.values[0])
            except ValueError:
                return False
            return have > want if op == "Gt" else have < want
        return False


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A ``metav1.LabelSelector``. ``None`` in a manifest is a different thing (see callers)."""

    match_labels: tuple[tuple[str, str], ...] = ()
    expressions: tuple[Requirement, ...] = ()

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> LabelSelector:
        labels = tuple(sorted((str(k), str(v)) for k, v in (raw.get("matchLabels") or {}).items()))
        exprs = tuple(
            Requirement(str(e["key"]), str(e["operator"]), tuple(str(v) for v in e.get("values") or ()))
            for e in raw.get("matchExpressions") or ()
        )
        return cls(labels, exprs)

    def matches(self, labels: Labels) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            r.matches(labels) for r in self.expressions
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.match_labels:
            out["matchLabels"] = dict(self.match_labels)
        if self.expressions:
            out["matchExpressions"] = [
                {"key": r.key, "operator": r.operator, **({"values": list(r.values)} if r.values else {})}
                for r in self.expressions
            ]
        return out


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Toleration:
        return cls(
            key=str(raw.get("key") or ""),
            operator=str(raw.get("operator") or "Equal"),
            value=str(raw.get("value") or ""),
            effect=str(raw.get("effect") or ""),
        )

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value

    def to_dict(self) -> dict[str, str]:
        out = {"key": self.key, "operator": self.operator}
        if self.value:
            out["value"] = self.value
        if self.effect:
            out["effect"] = self.effect
        return out


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Taint:
        return cls(str(raw.get("key") or ""), str(raw.get("value") or ""), str(raw.get("effect") or ""))

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


def untolerated_taint(taints: Sequence[Taint], tolerations: Sequence[Toleration]) -> Taint | None:
    """The first NoSchedule/NoExecute taint no toleration covers, as the scheduler checks it."""
    for taint in taints:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


@dataclass(frozen=True, slots=True)
class NodeConstraints:
    """What a pod template requires of its node: nodeSelector and required node affinity."""

    node_selector: tuple[tuple[str, str], ...] = ()
    # ORed terms, each an ANDed tuple of requirements; empty = no affinity.
    affinity_terms: tuple[tuple[Requirement, ...], ...] = ()

    @classmethod
    def from_pod_spec(cls, spec: Mapping[str, Any]) -> NodeConstraints:
        selector = tuple(sorted((str(k), str(v)) for k, v in (spec.get("nodeSelector") or {}).items()))
        required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        ) or {}
        terms = tuple(
            tuple(
                Requirement(str(e["key"]), str(e["operator"]), tuple(str(v) for v in e.get("values") or ()))
                for e in term.get("matchExpressions") or ()
            )
            for term in required.get("nodeSelectorTerms") or ()
        )
        return cls(selector, terms)

    def matches_flavor(self, node_labels: Labels, allowed_keys: frozenset[str]) -> bool:
        """Kueue's ``flavorSelector``: only keys some flavor of the group uses are considered."""
        for key, value in self.node_selector:
            if key in allowed_keys and node_labels.get(key) != value:
                return False
        if not self.affinity_terms:
            return True
        for term in self.affinity_terms:
            relevant = [r for r in term if r.key in allowed_keys]
            if not relevant:
                return True  # a term with no relevant keys matches any flavor (terms are ORed)
            if all(r.matches(node_labels) for r in relevant):
                return True
        return False
