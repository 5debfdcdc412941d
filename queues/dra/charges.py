"""What a pod set's DRA claims cost: each device a ResourceClaimTemplate asks for, charged as the
logical resource its DeviceClass maps to (Kueue's ResourceClaimTemplate path). ``Devices.charge`` is
the one place a job's pod sets become what quota counts: Kueue's resource transformations and
excluded prefixes first (``queues.podsets.transformations``), then the claims.

A claim is made per pod from its template, so the charge is per pod, like a container's
requests: ``count`` devices of a mapped DeviceClass are ``count`` units of the mapped resource, or,
for a mapping with sources, ``count`` times what one matching device consumes of its counter
(partitionable devices) or one allocation takes of its capacity (shared devices,
``queues.dra.capacity``), read from the cluster's ResourceSlices. What
cannot be counted before allocation is not admitted uncounted: a claim naming a ResourceClaim
directly (a shared claim is not the pod's alone), a template that does not exist, a DeviceClass no
mapping names, ``allocationMode: All`` (how many is known only at allocation), ``adminAccess``
and prioritized lists (``firstAvailable``, not implemented yet). The pod set then says why in
``unaccounted`` and its workload waits, Misconfigured, with that message; it is charged again
when the templates or the mappings change.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from queues import errors, quantity
from queues.dra import capacity, slices
from queues.dra.mappings import NONE, SETTING, CapacitySource, CounterSource, Mappings
from queues.errors import FieldError
from queues.podsets.jobs import PodSet
from queues.podsets.transformations import NONE as NO_TRANSFORMATIONS
from queues.podsets.transformations import Transformations

API_VERSION = "resource.k8s.io/v1"
MISCONFIGURED = "Misconfigured"  # Kueue's QuotaReserved reason for a workload it cannot charge


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """One entry of a claim's ``spec.devices.requests``."""

    name: str
    device_class: str | None  # exactly.deviceClassName (None with firstAvailable)
    count: int = 1
    all_devices: bool = False  # allocationMode: All
    admin_access: bool = False
    first_available: bool = False  # a prioritized list of alternatives
    selectors: tuple[str, ...] = ()  # its CEL selectors' expressions
    capacity: tuple[tuple[str, str], ...] = ()  # exactly.capacity.requests: dimension -> quantity


@dataclass(frozen=True, slots=True)
class ClaimTemplate:
    """A ResourceClaimTemplate: the device requests each pod's claim is made with."""

    namespace: str
    name: str
    requests: tuple[DeviceRequest, ...]

    @classmethod
    def from_object(cls, obj: Mapping[str, Any], namespace: str | None = None) -> ClaimTemplate:
        """A ``resource.k8s.io/v1`` ResourceClaimTemplate, or ``errors.Invalid`` naming the field."""
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
        assert isinstance(meta, Mapping)
        name = meta.get("name")
        problems: list[FieldError] = []
        if not isinstance(name, str) or not name:
            problems.append(FieldError("metadata.name", "required: the template's name, as pods name it"))
        spec = obj.get("spec")
        claim_spec = spec.get("spec") if isinstance(spec, Mapping) else None
        devices = claim_spec.get("devices") if isinstance(claim_spec, Mapping) else None
        raw = devices.get("requests") if isinstance(devices, Mapping) else None
        requests: list[DeviceRequest] = []
        if raw is not None and not isinstance(raw, list):
            problems.append(FieldError("spec.spec.devices.requests", "must be a list of device requests"))
        for i, entry in enumerate(raw or []):
            request = _request(entry, f"spec.spec.devices.requests[{i}]", problems)
            if request is not None:
                requests.append(request)
        if problems:
            raise errors.Invalid(problems, subject=f"ResourceClaimTemplate {name or '?'}")
        return cls(str(namespace or meta.get("namespace") or "default"), str(name), tuple(requests))


def _request(entry: Any, where: str, problems: list[FieldError]) -> DeviceRequest | None:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
        problems.append(FieldError(f"{where}.name", "required: each device request has a name"))
        return None
    if entry.get("firstAvailable"):
        return DeviceRequest(entry["name"], None, first_available=True)
    exactly = entry.get("exactly")
    if not isinstance(exactly, Mapping) or not isinstance(exactly.get("deviceClassName"), str):
        problems.append(
            FieldError(f"{where}.exactly.deviceClassName", "required: the DeviceClass of the devices asked for")
        )
        return None
    mode = exactly.get("allocationMode") or "ExactCount"
    if mode not in ("ExactCount", "All"):
        problems.append(FieldError(f"{where}.exactly.allocationMode", f"must be ExactCount or All, not {mode!r}"))
        return None
    count = exactly.get("count", 1)
    if mode == "ExactCount" and (not isinstance(count, int) or isinstance(count, bool) or count < 1):
        problems.append(FieldError(f"{where}.exactly.count", f"must be a whole number of devices >= 1, not {count!r}"))
        return None
    return DeviceRequest(
        entry["name"],
        exactly["deviceClassName"],
        count=int(count) if mode == "ExactCount" else 0,
        all_devices=mode == "All",
        admin_access=bool(exactly.get("adminAccess")),
        selectors=slices.expressions(exactly.get("selectors")),
        capacity=_capacity_requests(exactly.get("capacity"), f"{where}.exactly.capacity.requests", problems),
    )


def _capacity_requests(raw: Any, where: str, problems: list[FieldError]) -> tuple[tuple[str, str], ...]:
    """``exactly.capacity.requests``: how much of a shared device's capacity dimensions it asks for."""
    requests = raw.get("requests") if isinstance(raw, Mapping) else None
    if not requests:
        return ()
    out: list[tuple[str, str]] = []
    for name, value in requests.items() if isinstance(requests, Mapping) else ():
        try:
            quantity.parse_milli(str(value))
        except quantity.QuantityError:
            problems.append(FieldError(f"{where}.{name}", f"must be a quantity (40Gi), not {value!r}"))
            continue
        out.append((str(name), str(value)))
    return tuple(sorted(out))


@dataclass(frozen=True, slots=True)
class Devices:
    """The mappings and the ResourceClaimTemplates a cluster has: what charges a pod set's claims."""

    mappings: Mappings = NONE
    templates: Mapping[tuple[str, str], ClaimTemplate] = field(default_factory=dict)  # (namespace, name)
    classes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # DeviceClass -> its CEL selectors
    published: tuple[slices.Device, ...] = ()  # the devices of the cluster's ResourceSlices (counter charges)
    # Kueue's resources.transformations and excludeResourcePrefixes: applied to the containers'
    # requests before the claims are charged, as Kueue does (``queues.podsets.transformations``)
    transformations: Transformations = NO_TRANSFORMATIONS
    # the cards' shared counters (``sharedCounters``), of the same complete pools: what a node offers
    # of a counter-charged resource when pods are placed by topology (``queues.dra.node_capacity``)
    counter_sets: tuple[slices.CounterSet, ...] = ()
    # what matching CEL over every published device found so far (a job's every event makes its
    # workload again, and the devices are not matched each time): counter and capacity charges, by
    # (DeviceClass, request selectors, capacity requests, sources); a template's requests short of devices
    known: dict[tuple[Any, ...], int | str] = field(default_factory=dict, compare=False, repr=False)
    short_of: dict[tuple[DeviceRequest, ...], tuple[int, str] | None] = field(
        default_factory=dict, compare=False, repr=False
    )

    @classmethod
    def of(
        cls,
        mappings: Mappings,
        templates: Iterable[ClaimTemplate],
        classes: Mapping[str, tuple[str, ...]] | None = None,
        published: Iterable[slices.Slice] = (),
        transformations: Transformations = NO_TRANSFORMATIONS,
    ) -> Devices:
        counted = slices.current(published)
        return cls(
            mappings,
            {(t.namespace, t.name): t for t in templates},
            dict(classes or {}),
            tuple(d for s in counted for d in s.devices),
            transformations,
            tuple(c for s in counted for c in s.counter_sets),
        )

    def charge(self, namespace: str, pod_sets: tuple[PodSet, ...]) -> tuple[PodSet, ...]:
        """``pod_sets`` as read from a job (their requests the containers' alone) as quota counts
        them: the resource transformations applied, then each pod set's claims' devices added to
        its requests, or ``unaccounted`` saying why they cannot be."""
        pod_sets = self.transformations.apply(pod_sets)
        if not any(ps.claims for ps in pod_sets):
            return pod_sets
        return tuple(self._charged(namespace, i, ps) if ps.claims else ps for i, ps in enumerate(pod_sets))

    def recharge(self, namespace: str, pod_sets: tuple[PodSet, ...]) -> tuple[PodSet, ...]:
        """Charge again the pod sets that could not be (their requests are still the containers')."""
        return tuple(
            self._charged(namespace, i, dataclasses.replace(ps, unaccounted=None)) if ps.unaccounted else ps
            for i, ps in enumerate(pod_sets)
        )

    def _charged(self, namespace: str, index: int, ps: PodSet) -> PodSet:
        added: dict[str, int] = {}
        for j, claim in enumerate(ps.claims):
            where = f"spec.podSets[{index}].template.spec.resourceClaims[{j}]"
            if claim.template is None:
                return dataclasses.replace(
                    ps,
                    unaccounted=(
                        f"{where}.resourceClaimName: pod set {ps.name}'s claim {claim.name} names ResourceClaim "
                        f"{claim.claim} directly, and a claim shared by name is not charged to quota (its devices "
                        "are not this workload's alone); claim the devices through a resourceClaimTemplateName"
                    ),
                )
            template = self.templates.get((namespace, claim.template))
            if template is None:
                return dataclasses.replace(
                    ps,
                    unaccounted=(
                        f"{where}.resourceClaimTemplateName: Not found: ResourceClaimTemplate "
                        f"{namespace}/{claim.template} (pod set {ps.name}, claim {claim.name}); create it"
                    ),
                )
            for request in template.requests:
                why = self._refused(request)
                if why is not None:
                    return dataclasses.replace(
                        ps,
                        unaccounted=(
                            f"{where}.resourceClaimTemplateName: ResourceClaimTemplate {namespace}/{template.name} "
                            f"request {request.name} (pod set {ps.name}, claim {claim.name}): {why}"
                        ),
                    )
            short = self._short(template)
            if short is not None:
                k, why = short
                return dataclasses.replace(
                    ps,
                    unaccounted=(
                        f"{where}.devices.requests[{k}].exactly.selectors: ResourceClaimTemplate "
                        f"{namespace}/{template.name} request {template.requests[k].name} (pod set {ps.name}, claim "
                        f"{claim.name}): {why}"
                    ),
                )
            for request in template.requests:
                assert request.device_class is not None
                logical = self.mappings.lookup(request.device_class)
                if logical is None:
                    return dataclasses.replace(
                        ps,
                        unaccounted=(
                            f'{where}.resourceClaimTemplateName: Not found: "DeviceClass {request.device_class} is '
                            f'not mapped in DRA configuration for podset {ps.name}" (claim {claim.name}, '
                            f"ResourceClaimTemplate {namespace}/{template.name}); map it to a resource the "
                            f"ClusterQueue gives quota for in {SETTING} (a scenario's deviceClassMappings)"
                        ),
                    )
                sources = self.mappings.counter(logical) or self.mappings.capacity(logical)
                per_device = self._sourced_charge(request, sources) if sources else quantity.MILLI
                if isinstance(per_device, str):
                    return dataclasses.replace(
                        ps,
                        unaccounted=(
                            f"{where}.resourceClaimTemplateName: ResourceClaimTemplate {namespace}/{template.name} "
                            f"request {request.name} (pod set {ps.name}, claim {claim.name}): {per_device}"
                        ),
                    )
                added[logical] = added.get(logical, 0) + request.count * per_device
        requests = dict(ps.requests)
        for res, milli in added.items():
            requests[res] = requests.get(res, 0) + milli
        return dataclasses.replace(ps, requests=requests, unaccounted=None, devices=added)

    def _short(self, template: ClaimTemplate) -> tuple[int, str] | None:
        """Kueue's check of a claim's CEL selectors against the cluster's devices: the first request
        with selectors of its own that fewer devices match than it asks for (each device counted for
        one request of the claim): its index, and why; a pod that can never be scheduled takes no quota.
        Only requests with their own selectors are checked, as in Kueue. Remembered until the devices
        change."""
        if template.requests not in self.short_of:
            self.short_of[template.requests] = self._count_selected(template)
        return self.short_of[template.requests]

    def _count_selected(self, template: ClaimTemplate) -> tuple[int, str] | None:
        taken: set[int] = set()
        for k, request in enumerate(template.requests):
            if not request.selectors:
                continue
            assert request.device_class is not None
            if request.device_class not in self.classes:
                return k, f"DeviceClass {request.device_class} does not exist, so no device is known to match it"
            wanted = [*self.classes[request.device_class], *request.selectors]
            mine: list[int] = []
            for i, device in enumerate(self.published):
                if len(mine) == request.count:
                    break
                if i not in taken and slices.selects(wanted, device):
                    mine.append(i)
            taken.update(mine)
            if len(mine) < request.count:
                return k, (
                    f"insufficient matching devices for CEL selector in DeviceClass {request.device_class}: "
                    f"{len(mine)} device(s) match in the cluster but {request.count} requested; the request waits "
                    "until a driver publishes such devices (ResourceSlices)"
                )
        return None

    def _sourced_charge(self, request: DeviceRequest, sources: CounterSource | tuple[CapacitySource, ...]) -> int | str:
        """What one device of ``request`` is charged (milli-units) by a mapping's counter or
        capacity sources, or why that cannot be known; remembered until the cluster's devices
        change (a job's every event makes its workload again)."""
        assert request.device_class is not None
        key = (request.device_class, request.selectors, request.capacity, sources)
        if key not in self.known:
            if isinstance(sources, CounterSource):
                self.known[key] = self._match_counter(request, sources)
            else:
                self.known[key] = self._match_capacity(request, sources)
        return self.known[key]

    def _matched(self, request: DeviceRequest, driver: str, selector: str) -> list[slices.Device] | str:
        """The published devices of ``driver`` that a source's selector, the request's DeviceClass
        and the request's own selectors all select, or why there are none."""
        assert request.device_class is not None
        if request.device_class not in self.classes:
            return f"DeviceClass {request.device_class} does not exist, so no device is known to match it"
        wanted = [*self.classes[request.device_class], *request.selectors]
        matched = [
            d
            for d in self.published
            if d.driver == driver and slices.selects([selector], d) and slices.selects(wanted, d)
        ]
        if not matched:
            own = " and the request's selectors" if request.selectors else ""
            return (
                f"no device of driver {driver} in the cluster's ResourceSlices matches DeviceClass "
                f"{request.device_class}{own}"
            )
        return matched

    def _match_counter(self, request: DeviceRequest, source: CounterSource) -> int | str:
        """Kueue's partitionable devices: the most of the counter that one matching device consumes."""
        matched = self._matched(request, source.driver, source.selector)
        if isinstance(matched, str):
            return f"{matched}, so what it consumes of counter {source.name} is unknown"
        missing = next((d for d in matched if source.name not in d.consumes), None)
        if missing is not None:
            return f"device {missing.pool}/{missing.name} of driver {source.driver} consumes no counter {source.name}"
        try:
            return max(quantity.parse_milli(d.consumes[source.name]) for d in matched)
        except quantity.QuantityError as exc:
            return f"a matching device's counter {source.name} is not a quantity: {exc}"

    def _match_capacity(self, request: DeviceRequest, sources: tuple[CapacitySource, ...]) -> int | str:
        """Kueue's consumable capacity: for each source, the most one allocation of the request
        takes of the dimension on a matching device (its request, else the device's default, else
        the whole dimension, rounded by the device's policy), summed over the sources."""
        asked = dict(request.capacity)
        charged = 0
        for source in sources:
            matched = self._matched(request, source.driver, source.selector)
            if isinstance(matched, str):
                return f"{matched}, so what it takes of capacity {source.name} is unknown"
            if len(matched) < request.count:
                return (
                    f"insufficient matching devices for capacity driver {source.driver}: {len(matched)} device(s) "
                    f"match but {request.count} requested"
                )
            having = [d.dimensions[source.name] for d in matched if source.name in d.dimensions]
            if not having:
                return f"matched devices have no capacity dimension {source.name!r}"
            takes = [t for t in (capacity.taken(dim, asked.get(source.name)) for dim in having) if t is not None]
            if not takes:
                return (
                    f"capacity request cannot be satisfied by any matched device's RequestPolicy for dimension "
                    f"{source.name!r} (exactly.capacity.requests: {asked.get(source.name, 'none')})"
                )
            charged += max(takes)
        return charged

    @staticmethod
    def _refused(request: DeviceRequest) -> str | None:
        if request.first_available:
            return "prioritized lists (firstAvailable) are not charged yet; ask for exactly one DeviceClass"
        if request.all_devices:
            return (
                f"allocationMode All asks for every matching device of DeviceClass {request.device_class}, a number "
                "known only at allocation; ask for a count (allocationMode: ExactCount)"
            )
        if request.admin_access:
            return "adminAccess requests are not charged to quota; run them outside a queue"
        return None


def unaccounted(pod_sets: Iterable[PodSet]) -> str | None:
    """Why a workload's claims could not be charged (the first pod set's reason), or None."""
    return next((ps.unaccounted for ps in pod_sets if ps.unaccounted), None)
