"""Kueue's webhook rules for its objects, reporting every violation with its field path.

Shape and types are checked by the models in ``api``; this module adds what Kueue's
validating webhooks and CRD rules add: object names, quantities >= 0, borrowing and lending
limits only with a cohort, lendingLimit <= nominalQuota, at most 16 resource groups, a
resource in one group only, a flavor once per ClusterQueue, every flavor listing the group's
covered resources in order, and the fields that belong to one API version only.
"""

from __future__ import annotations

import re
from typing import Any

from queues import efficiency, quantity
from queues.errors import FieldError, join_path
from queues.kueue import api

MAX_RESOURCE_GROUPS = 16
MAX_FLAVORS_PER_GROUP = 64
MAX_RESOURCES_PER_GROUP = 64

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_RESOURCE_NAME = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


def dns_subdomain_error(value: str) -> str | None:
    """Why ``value`` is not a valid object name (RFC 1123 subdomain), or None."""
    if not value:
        return "must not be empty"
    if len(value) > 253:
        return "must be no more than 253 characters"
    if not _DNS_SUBDOMAIN.match(value):
        return (
            f"{value!r} is not a valid name: use lowercase letters, digits, '-' and '.', "
            "starting and ending with a letter or digit"
        )
    return None


def dns_label_ok(value: str) -> bool:
    """An RFC 1123 label (a namespace's name): at most 63 lowercase letters, digits and '-'."""
    return bool(value) and len(value) <= 63 and bool(_DNS_LABEL.match(value))


def label_key_error(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return f"label key {key!r} has an invalid prefix"
    if not name or len(name) > 63 or not _LABEL_NAME.match(name):
        return f"label key {key!r} is invalid: at most 63 letters, digits, '-', '_' or '.'"
    return None


def label_value_error(value: str) -> str | None:
    if value and (len(value) > 63 or not _LABEL_NAME.match(value)):
        return f"label value {value!r} is invalid: at most 63 letters, digits, '-', '_' or '.'"
    return None


MAX_ANNOTATIONS_BYTES = 256 * 1024  # Kubernetes' TotalAnnotationSizeLimitB


def _metadata(meta: api.Metadata) -> list[FieldError]:
    """Labels and annotations as the API server validates any object's."""
    out: list[FieldError] = []
    for key, value in meta.labels.items():
        if err := label_key_error(key) or label_value_error(value):
            out.append(FieldError(f"metadata.labels[{key}]", err))
    total = 0
    for key, value in meta.annotations.items():
        total += len(key) + len(value)
        if err := label_key_error(key):
            out.append(FieldError(f"metadata.annotations[{key}]", err.replace("label key", "annotation key")))
    if total > MAX_ANNOTATIONS_BYTES:
        out.append(FieldError("metadata.annotations", f"may not be more than 256 KiB in total ({total:,} bytes given)"))
    return out


def validate(obj: api.KueueObject) -> list[FieldError]:
    """Every rule ``obj`` breaks, as field errors; empty when valid."""
    out: list[FieldError] = []
    if err := dns_subdomain_error(obj.metadata.name):
        out.append(FieldError("metadata.name", err))
    out += _metadata(obj.metadata)
    if isinstance(obj, api.LocalQueue):
        ns = obj.metadata.namespace
        if not ns:
            out.append(FieldError("metadata.namespace", "a LocalQueue needs a namespace"))
        elif len(ns) > 63 or not _DNS_LABEL.match(ns):
            out.append(FieldError("metadata.namespace", f"{ns!r} is not a valid namespace name"))
        if err := dns_subdomain_error(obj.spec.cluster_queue):
            out.append(FieldError("spec.clusterQueue", err))
    elif obj.metadata.namespace:
        out.append(FieldError("metadata.namespace", f"{obj.kind} is cluster-scoped; remove the namespace"))
    if isinstance(obj, api.ClusterQueue):
        out += _cluster_queue(obj)
        out += _admission_scope(obj.spec.admission_scope)
    elif isinstance(obj, api.Cohort):
        out += _cohort(obj)
    elif isinstance(obj, api.ResourceFlavor):
        out += _resource_flavor(obj)
    elif isinstance(obj, api.ProvisioningRequestConfig):
        for i, res in enumerate(obj.spec.managed_resources):
            if not _RESOURCE_NAME.match(res):
                out.append(FieldError(f"spec.managedResources[{i}]", f"{res!r} is not a resource name"))
    elif isinstance(obj, api.Topology):
        out += _topology(obj)
    return out


def _topology(obj: api.Topology) -> list[FieldError]:
    """Kueue's rules: node labels unique, valid label keys, the hostname label only at the lowest level."""
    out: list[FieldError] = []
    levels = obj.levels
    for i, label in enumerate(levels):
        path = f"spec.levels[{i}].nodeLabel"
        if levels.index(label) != i:
            out.append(FieldError(path, f"{label!r} is already level {levels.index(label)}; levels must differ"))
        if err := label_key_error(label):
            out.append(FieldError(path, err))
        if label == "kubernetes.io/hostname" and i != len(levels) - 1:
            out.append(FieldError(path, "kubernetes.io/hostname can only be the last (lowest) level"))
    return out


def _cluster_queue(cq: api.ClusterQueue) -> list[FieldError]:
    spec = cq.spec
    out: list[FieldError] = []
    reclaim = cq.metadata.annotations.get(efficiency.POLICY_ANNOTATION)
    if reclaim is not None:  # Turnstile's idle-reclaim policy (``queues.efficiency``)
        out.extend(efficiency.annotation_policy(cq.name, reclaim)[1])
    if cq.version == "v1beta2":
        if spec.cohort is not None:
            out.append(FieldError("spec.cohort", "not in kueue.x-k8s.io/v1beta2; use spec.cohortName"))
        if spec.admission_checks:
            out.append(
                FieldError("spec.admissionChecks", "not in kueue.x-k8s.io/v1beta2; use spec.admissionChecksStrategy")
            )
    else:
        if spec.cohort_name is not None:
            out.append(FieldError("spec.cohortName", "not in kueue.x-k8s.io/v1beta1; use spec.cohort"))
        if spec.admission_checks and spec.admission_checks_strategy is not None:
            out.append(
                FieldError("spec.admissionChecks", "use either admissionChecks or admissionChecksStrategy, not both")
            )
    cohort = spec.cohort_ref
    cohort_field = "spec.cohortName" if spec.cohort_name else "spec.cohort"
    if cohort is not None and (err := dns_subdomain_error(cohort)):
        out.append(FieldError(cohort_field, err))
    out += _resource_groups(spec.resource_groups, has_parent=bool(cohort), parent_word="cohort")
    pre = spec.preemption
    if (
        pre.reclaim_within_cohort == "Never"
        and pre.borrow_within_cohort is not None
        and pre.borrow_within_cohort.policy != "Never"
    ):
        out.append(
            FieldError(
                "spec.preemption.borrowWithinCohort.policy",
                "must be Never while reclaimWithinCohort is Never",
            )
        )
    fung = spec.flavor_fungibility
    if fung.preference is not None and (
        fung.when_can_borrow != "TryNextFlavor" or fung.when_can_preempt != "TryNextFlavor"
    ):
        out.append(
            FieldError(
                "spec.flavorFungibility.preference",
                "can only be set when whenCanBorrow and whenCanPreempt are both TryNextFlavor",
            )
        )
    if spec.namespace_selector is not None:
        out += _selector(spec.namespace_selector, "spec.namespaceSelector")
    seen_checks: set[str] = set()
    rules = spec.admission_checks_strategy.admission_checks if spec.admission_checks_strategy else []
    for i, name in enumerate(spec.admission_checks):
        if name in seen_checks:
            out.append(FieldError(f"spec.admissionChecks[{i}]", f"duplicate admission check {name!r}"))
        seen_checks.add(name)
    for i, rule in enumerate(rules):
        if rule.name in seen_checks:
            out.append(
                FieldError(f"spec.admissionChecksStrategy.admissionChecks[{i}].name", f"duplicate {rule.name!r}")
            )
        seen_checks.add(rule.name)
    return out


def _cohort(cohort: api.Cohort) -> list[FieldError]:
    out: list[FieldError] = []
    parent = cohort.spec.parent_ref
    if parent is not None:
        if err := dns_subdomain_error(parent):
            out.append(FieldError("spec.parentName", err))
        elif parent == cohort.name:
            out.append(FieldError("spec.parentName", "a cohort cannot be its own parent"))
    out += _resource_groups(cohort.spec.resource_groups, has_parent=bool(parent), parent_word="parent")
    return out


def _resource_flavor(rf: api.ResourceFlavor) -> list[FieldError]:
    out: list[FieldError] = []
    for key, value in rf.spec.node_labels.items():
        if err := label_key_error(key) or label_value_error(value):
            out.append(FieldError(f"spec.nodeLabels[{key}]", err))
    if len(rf.spec.node_labels) > 8:
        out.append(FieldError("spec.nodeLabels", "must have at most 8 labels"))
    for i, taint in enumerate(rf.spec.node_taints):
        if err := label_key_error(taint.key):
            out.append(FieldError(f"spec.nodeTaints[{i}].key", err))
    for i, tol in enumerate(rf.spec.tolerations):
        if tol.operator == "Exists" and tol.value:
            out.append(FieldError(f"spec.tolerations[{i}].value", "must be empty when operator is Exists"))
    return out


def _selector(selector: api.LabelSelector, path: str) -> list[FieldError]:
    out: list[FieldError] = []
    for key, value in selector.match_labels.items():
        if err := label_key_error(key) or label_value_error(value):
            out.append(FieldError(f"{path}.matchLabels[{key}]", err))
    for i, expr in enumerate(selector.match_expressions):
        p = f"{path}.matchExpressions[{i}]"
        if err := label_key_error(expr.key):
            out.append(FieldError(f"{p}.key", err))
        if expr.operator in ("In", "NotIn") and not expr.values:
            out.append(FieldError(f"{p}.values", f"must be non-empty when operator is {expr.operator}"))
        if expr.operator in ("Exists", "DoesNotExist") and expr.values:
            out.append(FieldError(f"{p}.values", f"must be empty when operator is {expr.operator}"))
    return out


def _resource_groups(groups: list[api.ResourceGroup], *, has_parent: bool, parent_word: str) -> list[FieldError]:
    out: list[FieldError] = []
    if len(groups) > MAX_RESOURCE_GROUPS:
        out.append(
            FieldError("spec.resourceGroups", f"must have at most {MAX_RESOURCE_GROUPS} items, has {len(groups)}")
        )
    seen_resources: dict[str, str] = {}
    seen_flavors: dict[str, str] = {}
    for g, group in enumerate(groups):
        gpath = join_path("spec.resourceGroups", g)
        if not group.covered_resources:
            out.append(FieldError(f"{gpath}.coveredResources", "must list at least one resource"))
        if len(group.covered_resources) > MAX_RESOURCES_PER_GROUP:
            out.append(FieldError(f"{gpath}.coveredResources", f"must have at most {MAX_RESOURCES_PER_GROUP} items"))
        for r, res in enumerate(group.covered_resources):
            rpath = f"{gpath}.coveredResources[{r}]"
            if not _RESOURCE_NAME.match(res):
                out.append(FieldError(rpath, f"{res!r} is not a resource name"))
            if res in seen_resources:
                out.append(FieldError(rpath, f"duplicate resource {res!r}: already covered at {seen_resources[res]}"))
            else:
                seen_resources[res] = rpath
        if not group.flavors:
            out.append(FieldError(f"{gpath}.flavors", "must list at least one flavor"))
        if len(group.flavors) > MAX_FLAVORS_PER_GROUP:
            out.append(FieldError(f"{gpath}.flavors", f"must have at most {MAX_FLAVORS_PER_GROUP} items"))
        for f, flavor in enumerate(group.flavors):
            fpath = f"{gpath}.flavors[{f}]"
            if err := dns_subdomain_error(flavor.name):
                out.append(FieldError(f"{fpath}.name", err))
            if flavor.name in seen_flavors:
                out.append(
                    FieldError(
                        f"{fpath}.name",
                        f"duplicate flavor {flavor.name!r}: already used at {seen_flavors[flavor.name]}",
                    )
                )
            else:
                seen_flavors[flavor.name] = fpath
            if len(flavor.resources) != len(group.covered_resources):
                out.append(
                    FieldError(
                        f"{fpath}.resources",
                        f"must list the {len(group.covered_resources)} covered resources "
                        f"({', '.join(group.covered_resources)}) in order, lists {len(flavor.resources)}",
                    )
                )
            for q, quota in enumerate(flavor.resources):
                qpath = f"{fpath}.resources[{q}]"
                if q < len(group.covered_resources) and quota.name != group.covered_resources[q]:
                    out.append(
                        FieldError(
                            f"{qpath}.name",
                            f"must be {group.covered_resources[q]!r}, the covered resource at the same position",
                        )
                    )
                if quota.nominal_quota < 0:
                    out.append(FieldError(f"{qpath}.nominalQuota", "must be greater than or equal to 0"))
                for value, field in ((quota.borrowing_limit, "borrowingLimit"), (quota.lending_limit, "lendingLimit")):
                    if value is None:
                        continue
                    if value < 0:
                        out.append(FieldError(f"{qpath}.{field}", "must be greater than or equal to 0"))
                    if not has_parent:
                        out.append(FieldError(f"{qpath}.{field}", f"must be nil when {parent_word} is empty"))
                if quota.lending_limit is not None and quota.lending_limit > quota.nominal_quota >= 0:
                    out.append(FieldError(f"{qpath}.lendingLimit", "must be less than or equal to the nominalQuota"))
    return out


ADMISSION_MODES = ("UsageBasedAdmissionFairSharing", "NoAdmissionFairSharing")  # (``queues.cycle.usage_history``)


def _admission_scope(scope: dict[str, Any] | None, path: str = "spec.admissionScope") -> list[FieldError]:
    """Kueue's ``admissionScope``: ``admissionMode`` is required and one of two."""
    if scope is None:
        return []
    out = [FieldError(f"{path}.{k}", "unknown field (known: admissionMode)") for k in scope if k != "admissionMode"]
    mode = scope.get("admissionMode")
    if mode not in ADMISSION_MODES:
        out.append(FieldError(f"{path}.admissionMode", f"must be {' or '.join(ADMISSION_MODES)}, not {mode!r}"))
    return out


# Fields Kueue defines that Turnstile accepts (a Kueue file must apply unchanged) but does not act
# on yet: each is said as a warning wherever an object is applied, never silently ignored.
_NOT_YET = {
    "concurrentAdmissionPolicy": "Turnstile admits one workload per job at a time (no concurrent admission variants)",
    "podSetUpdates": "Turnstile writes Kueue's own pod annotations for a ProvisioningRequest, not these updates",
    "podSetMergePolicy": "Turnstile makes one PodTemplate per pod set, never merged",
    "retryDelayMinutes": "deprecated in Kueue too; retries follow the ProvisioningRequestConfig's retryStrategy",
}


_AFS_OFF = (
    "admission fair sharing is off (Kueue's admissionFairSharing: the controller's "
    "TURNSTILE_ADMISSION_FAIR_SHARING, a scenario's admissionFairSharing block), so {what}"
)


def unused_fields(obj: api.KueueObject, *, admission_fair_sharing: bool = False) -> list[FieldError]:
    """Fields set on ``obj`` that Turnstile accepts but does not act on (yet, or as configured):
    warnings, not errors. ``admission_fair_sharing``: whether it is on where ``obj`` is applied."""
    out: list[FieldError] = []
    if not admission_fair_sharing:
        if isinstance(obj, api.LocalQueue) and obj.spec.fair_sharing is not None:
            what = "a LocalQueue's weight is not used: LocalQueues share their ClusterQueue in priority and FIFO order"
            out.append(FieldError("spec.fairSharing", f"accepted but not used: {_AFS_OFF.format(what=what)}"))
        if (
            isinstance(obj, api.ClusterQueue)
            and (obj.spec.admission_scope or {}).get("admissionMode") == (ADMISSION_MODES[0])
        ):
            what = "its LocalQueues share it in priority and FIFO order"
            out.append(FieldError("spec.admissionScope", f"accepted but not used: {_AFS_OFF.format(what=what)}"))
    unused = {
        "concurrentAdmissionPolicy": isinstance(obj, api.ClusterQueue)
        and obj.spec.concurrent_admission_policy is not None,
        "podSetUpdates": isinstance(obj, api.ProvisioningRequestConfig) and obj.spec.pod_set_updates is not None,
        "podSetMergePolicy": isinstance(obj, api.ProvisioningRequestConfig)
        and obj.spec.pod_set_merge_policy is not None,
        "retryDelayMinutes": isinstance(obj, api.AdmissionCheck) and obj.spec.retry_delay_minutes is not None,
    }
    out.extend(
        FieldError(f"spec.{name}", f"accepted but not used: {_NOT_YET[name]}") for name, set_ in unused.items() if set_
    )
    out.extend(_fractional_devices(obj))
    return out


def _fractional_devices(obj: api.KueueObject) -> list[FieldError]:
    """A quota of a device (an extended resource: ``nvidia.com/gpu``, a MIG slice) that is not whole:
    pods ask for devices in whole units (Kubernetes refuses a fraction), so the fraction is never used."""
    if not isinstance(obj, (api.ClusterQueue, api.Cohort)):
        return []
    out: list[FieldError] = []
    for g, group in enumerate(obj.spec.resource_groups):
        for f, flavor in enumerate(group.flavors):
            for r, quota in enumerate(flavor.resources):
                if "/" not in quota.name or quota.name.startswith(("kubernetes.io/", "requests.")):
                    continue
                for field, value in (
                    ("nominalQuota", quota.nominal_quota),
                    ("borrowingLimit", quota.borrowing_limit),
                    ("lendingLimit", quota.lending_limit),
                ):
                    if value is not None and value % 1000:
                        path = f"spec.resourceGroups[{g}].flavors[{f}].resources[{r}].{field}"
                        whole = value // 1000
                        out.append(
                            FieldError(
                                path,
                                f"{quantity.format_milli(value)} {quota.name} is not a whole number: pods ask for "
                                f"whole devices, so only {whole} can be used; write {whole} (or a MIG or time-sliced "
                                "resource for parts of a GPU)",
                            )
                        )
    return out
