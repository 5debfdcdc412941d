"""What a pod set's DRA claims cost: each device a ResourceClaimTemplate asks for, charged as the
logical resource its DeviceClass maps to (Kueue's ResourceClaimTemplate path). ``Devices.charge`` is
the one place a job's pod sets become what quota counts: Kueue's resource transformations and
excluded prefixes first (``queues.podsets.transformations``), then the claims.

A claim is made per pod from its template (``queues.dra.claim_templates`` reads it), so the charge
is per pod, like a container's requests: ``count`` devices of a mapped DeviceClass are ``count``
units of the mapped resource, or, for a mapping with sources, ``count`` times what one matching
device consumes of its counter (partitionable devices) or one allocation takes of its capacity
(shared devices, ``queues.dra.capacity``), read from the cluster's ResourceSlices. A prioritized
list (``firstAvailable``, which Kueue refuses) is charged, per resource, the most any of its
alternatives takes (on a flavor, any its nodes can serve: ``queues.dra.alternatives``). What
cannot be counted before allocation is not admitted uncounted: a claim naming a ResourceClaim
directly (a shared claim is not the pod's alone), a template that does not exist, a DeviceClass no
mapping names (in any alternative), ``allocationMode: All`` (how many is known only at
allocation) and ``adminAccess``. The pod set then says why in ``unaccounted`` and its workload
waits, Misconfigured, with that message; it is charged again when the templates or the mappings
change.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from queues import quantity
from queues.dra import alternatives, capacity, card_shares, slices
from queues.dra.claim_templates import API_VERSION, ClaimTemplate, DeviceRequest
from queues.dra.mappings import NONE, SETTING, CapacitySource, CounterSource, Mappings
from queues.podsets.jobs import PodSet
from queues.podsets.transformations import NONE as NO_TRANSFORMATIONS
from queues.podsets.transformations import Transformations

__all__ = ["API_VERSION", "MISCONFIGURED", "ClaimTemplate", "DeviceRequest", "Devices", "unaccounted"]

MISCONFIGURED = "Misconfigured"  # Kueue's QuotaReserved reason for a workload it cannot charge
Flavors = Mapping[str, Mapping[str, str]]  # flavor -> its nodeLabels


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
    # what the published devices say of each mapped resource's part of a card (``card_fractions``)
    shares: dict[str, dict[str, Fraction]] = field(default_factory=dict, compare=False, repr=False)
    # the Nodes' labels (node -> labels), saying each flavor's nodes (``narrowed``); None: not known
    nodes: Mapping[str, Mapping[str, str]] | None = None

    @classmethod
    def of(
        cls,
        mappings: Mappings,
        templates: Iterable[ClaimTemplate],
        classes: Mapping[str, tuple[str, ...]] | None = None,
        published: Iterable[slices.Slice] = (),
        transformations: Transformations = NO_TRANSFORMATIONS,
        nodes: Mapping[str, Mapping[str, str]] | None = None,
    ) -> Devices:
        published = tuple(published)
        counted = slices.current(published)
        return cls(
            mappings,
            {(t.namespace, t.name): t for t in templates},
            dict(classes or {}),
            tuple(d for s in counted for d in s.devices),
            transformations,
            tuple(c for s in counted for c in s.counter_sets),
            nodes=None if slices.rewriting(published) else nodes,  # (kept up to date by the controller)
        )

    def charge(
        self, namespace: str, pod_sets: tuple[PodSet, ...], flavors: Flavors | None = None
    ) -> tuple[PodSet, ...]:
        """``pod_sets`` as read from a job (their requests the containers' alone) as quota counts
        them: the resource transformations applied, then each pod set's claims' devices added to
        its requests, or ``unaccounted`` saying why they cannot be; with ``flavors``, ``narrowed``."""
        pod_sets = self.transformations.apply(pod_sets)
        if not any(ps.claims for ps in pod_sets):
            return pod_sets
        charged = tuple(self._charged(namespace, i, ps) if ps.claims else ps for i, ps in enumerate(pod_sets))
        return self.narrowed(namespace, charged, flavors) if flavors else charged

    def recharge(self, namespace: str, pod_sets: tuple[PodSet, ...]) -> tuple[PodSet, ...]:
        """Charge again the pod sets that could not be (their requests are still the containers')."""
        return tuple(
            self._charged(namespace, i, dataclasses.replace(ps, unaccounted=None)) if ps.unaccounted else ps
            for i, ps in enumerate(pod_sets)
        )

    def card_fractions(self) -> dict[str, Fraction]:
        """Each mapped resource's part of a card per unit, for GPU-hours: what the published devices
        say (``queues.dra.card_shares``), and a card for a mapping of NVIDIA's whole-GPU DeviceClass
        alone; remembered until the devices change."""
        if "all" not in self.shares:
            self.shares["all"] = {
                **card_shares.derived(self.mappings, self.classes, self.published, self.counter_sets),
                **self.mappings.card_fractions(),
            }
        return dict(self.shares["all"])

    def narrowed(self, namespace: str, pod_sets: tuple[PodSet, ...], flavors: Flavors) -> tuple[PodSet, ...]:
        """Charged pod sets with ``by_flavor`` for ``flavors`` (name -> ``nodeLabels``): a prioritized
        list is charged on a flavor the most its nodes' alternatives take (``queues.dra.alternatives``)."""
        return tuple(
            dataclasses.replace(ps, by_flavor=self._by_flavor(namespace, ps, flavors)) if ps.devices else ps
            for ps in pod_sets
        )

    def _by_flavor(self, namespace: str, ps: PodSet, flavors: Flavors) -> dict[str, dict[str, int]]:
        if self.nodes is None or ps.unaccounted:
            return {}
        listed: list[tuple[dict[str, int], tuple[DeviceRequest, ...]]] = []
        for claim in ps.claims:
            template = self.templates.get((namespace, claim.template or ""))
            for request in template.requests if template is not None else ():
                most = self._cost(request) if request.first_available else None
                if isinstance(most, dict):
                    listed.append((most, request.alternatives))
        less = alternatives.by_flavor(flavors, self.nodes, listed, self._serves, self._cost) if listed else {}
        return {flavor: {r: ps.requests.get(r, 0) - down for r, down in d.items()} for flavor, d in less.items()}

    def _serves(self, alternative: DeviceRequest, nodes: frozenset[str]) -> bool:
        key = ("served", alternative, nodes)  # (a DeviceClass not seen yet may select anything: served)
        if key not in self.known:
            wanted = self.classes.get(alternative.device_class or "")
            self.known[key] = wanted is None or alternatives.servable(alternative, wanted, self.published, nodes)
        return bool(self.known[key])

    def prioritized(self, namespace: str, ps: PodSet) -> list[str]:
        """The requests of ``ps``'s claims that are prioritized lists (``claim gpus, request
        gpus``): charged their largest alternative (``_cost``), which a user is told at creation."""
        return [
            f"claim {claim.name}, request {request.name}"
            for claim in ps.claims
            if claim.template is not None and (template := self.templates.get((namespace, claim.template)))
            for request in template.requests
            if request.first_available
        ]

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
                field_ = "firstAvailable" if template.requests[k].first_available else "exactly.selectors"
                return dataclasses.replace(
                    ps,
                    unaccounted=(
                        f"{where}.devices.requests[{k}].{field_}: ResourceClaimTemplate "
                        f"{namespace}/{template.name} request {template.requests[k].name} (pod set {ps.name}, claim "
                        f"{claim.name}): {why}"
                    ),
                )
            for request in template.requests:
                cost = self._cost(request)
                if isinstance(cost, DeviceRequest):
                    return dataclasses.replace(
                        ps,
                        unaccounted=(
                            f'{where}.resourceClaimTemplateName: Not found: "DeviceClass {cost.device_class} is '
                            f'not mapped in DRA configuration for podset {ps.name}" (claim {claim.name}, '
                            f"ResourceClaimTemplate {namespace}/{template.name}, request {cost.name}); map it to a "
                            f"resource the ClusterQueue gives quota for in {SETTING} (a scenario's deviceClassMappings)"
                        ),
                    )
                if isinstance(cost, str):
                    return dataclasses.replace(
                        ps,
                        unaccounted=(
                            f"{where}.resourceClaimTemplateName: ResourceClaimTemplate {namespace}/{template.name} "
                            f"request {request.name} (pod set {ps.name}, claim {claim.name}): {cost}"
                        ),
                    )
                for res, milli in cost.items():
                    added[res] = added.get(res, 0) + milli
        requests = dict(ps.requests)
        for res, milli in added.items():
            requests[res] = requests.get(res, 0) + milli
        return dataclasses.replace(ps, requests=requests, unaccounted=None, devices=added)

    def _cost(self, request: DeviceRequest) -> dict[str, int] | DeviceRequest | str:
        """What one pod's ``request`` is charged, by mapped resource (milli-units); the request
        (or alternative) whose DeviceClass no mapping names; or why it cannot be known. A
        prioritized list (``firstAvailable``) is charged, for each resource, the most any of its
        alternatives takes of it: the allocator picks the alternative on the node, after admission,
        so the charge covers whichever it picks (as a counter charge covers the largest matching
        partition)."""
        if request.first_available:
            most: dict[str, int] = {}
            for alternative in request.alternatives:
                cost = self._cost(alternative)
                if isinstance(cost, str):
                    return f"subrequest {alternative.name}: {cost}"
                if isinstance(cost, DeviceRequest):
                    return cost
                for res, milli in cost.items():
                    most[res] = max(most.get(res, 0), milli)
            return most
        assert request.device_class is not None
        logical = self.mappings.lookup(request.device_class)
        if logical is None:
            return request
        sources = self.mappings.counter(logical) or self.mappings.capacity(logical)
        per_device = self._sourced_charge(request, sources) if sources else quantity.MILLI
        if isinstance(per_device, str):
            return per_device
        return {logical: request.count * per_device}

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
            if request.first_available:
                # (short only if every alternative is: the allocator takes any that can be had)
                found = [self._selected(alternative, taken) for alternative in request.alternatives]
                if all(isinstance(f, str) for f in found):
                    return k, f"no alternative can ever be allocated: {'; '.join(str(f) for f in found)}"
                continue
            if not request.selectors:
                continue
            mine = self._selected(request, taken)
            if isinstance(mine, str):
                return k, mine
            taken.update(mine)
        return None

    def _selected(self, request: DeviceRequest, taken: set[int]) -> list[int] | str:
        """The published devices (not in ``taken``) that ``request`` could be allocated, by its
        DeviceClass's and its own selectors, or why fewer than its ``count`` can be."""
        assert request.device_class is not None
        if not request.selectors:
            return []
        if request.device_class not in self.classes:
            return f"DeviceClass {request.device_class} does not exist, so no device is known to match it"
        wanted = [*self.classes[request.device_class], *request.selectors]
        mine: list[int] = []
        for i, device in enumerate(self.published):
            if len(mine) == request.count:
                break
            if i not in taken and slices.selects(wanted, device):
                mine.append(i)
        if len(mine) < request.count:
            return (
                f"insufficient matching devices for CEL selector in DeviceClass {request.device_class}: "
                f"{len(mine)} device(s) match in the cluster but {request.count} requested; the request waits "
                "until a driver publishes such devices (ResourceSlices)"
            )
        return mine

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
            return next(
                (f"subrequest {a.name}: {why}" for a in request.alternatives if (why := Devices._refused(a))), None
            )
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
