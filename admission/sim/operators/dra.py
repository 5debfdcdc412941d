"""Dynamic Resource Allocation in the simulated cluster: the ResourceClaim controller, a DRA
driver's devices, and the kube-scheduler's allocation of them.

- The ResourceClaim controller: a pod naming a ResourceClaimTemplate in ``spec.resourceClaims``
  gets a ResourceClaim made from it (``<pod>-<claim>-<5 chars>``, owned by the pod, annotated
  ``resource.kubernetes.io/pod-claim-name``) and listed in its ``status.resourceClaimStatuses``;
  the claim is deleted once the pod is done or gone.
- A driver: a Node annotated ``turnstile.dev/sim-dra-gpus: "N"`` gets a ResourceSlice of N whole
  GPUs from driver ``gpu.nvidia.com`` (``gpu-0`` .. ``gpu-N-1``, attributes ``type: gpu`` and the
  node's ``nvidia.com/gpu.product`` label as ``productName``), as NVIDIA's DRA driver publishes
  them; a scenario may list any ResourceSlice spec for a node instead (``nodes[].resourceSlices``).
- The scheduler (``admission.sim.operators.kube_scheduler``) binds a pod with claims only to a
  node whose published devices satisfy every request of every claim not yet allocated: devices
  of the node's slices, of the request's DeviceClass (its CEL selectors, then the request's),
  allocated to no other claim; ``count`` of them, or none. The claim's ``status.allocation`` and
  ``reservedFor`` are written before the pod is bound.

Devices are matched as the core matches them for counter charges (``queues.dra.slices``: CEL
over ``device.driver``, ``attributes``, ``capacity``). Differences from a real cluster
(docs/simulated-cluster.md): no ``quantity()`` or ``semver()`` in selectors; ``firstAvailable``,
``allocationMode: All``, shared claims and admin access are not allocated (such a pod stays
Pending); a claim is deallocated by its deletion only. Partitionable devices are allocated as the
real allocator does: a device whose ``consumesCounters`` would take more of its pool's
``sharedCounters`` than the allocated devices left is not free (a MIG partition overlapping one in
use), and a counter set the pool does not publish makes its devices unusable.
"""

from __future__ import annotations

from typing import Any

from admission.sim.server import resources
from admission.sim.server.object_store import ObjectStore
from admission.sim.server.objects import ApiError, Obj, clone
from queues import quantity
from queues.dra import slices

CLAIMS = next(r for r in resources.ALL if r.plural == "resourceclaims")
TEMPLATES = next(r for r in resources.ALL if r.plural == "resourceclaimtemplates")
SLICES = next(r for r in resources.ALL if r.plural == "resourceslices")
DEVICE_CLASSES = next(r for r in resources.ALL if r.plural == "deviceclasses")
PODS = next(r for r in resources.ALL if r.plural == "pods")
POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"
GPUS_ANNOTATION = "turnstile.dev/sim-dra-gpus"
DRIVER = "gpu.nvidia.com"
PRODUCT_LABEL = "nvidia.com/gpu.product"
CANNOT_ALLOCATE = "cannot allocate all claims"

Device = tuple[str, str, str]  # (driver, pool, device name)
CounterKey = tuple[str, str, str, str]  # (driver, pool, counter set, counter)
Plan = list[tuple[Obj, list[dict[str, str]]]]  # claims to allocate, each with its results


def claims_of(pod: Obj) -> list[dict[str, Any]]:
    return [c for c in (pod.get("spec") or {}).get("resourceClaims") or [] if isinstance(c, dict)]


class Dra:
    """The ResourceClaim controller and the allocator, over the store."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    # ----- the ResourceClaim controller ------------------------------------------------------

    def make_claims(self, pod: Obj) -> bool:
        """The pod's claims made from their templates, once each (a template not there yet: the
        pod waits, and is looked at again on its next event); whether any was made."""
        meta = pod["metadata"]
        statuses = list((pod.get("status") or {}).get("resourceClaimStatuses") or [])
        made = {s.get("name") for s in statuses}
        for entry in claims_of(pod):
            template_name = entry.get("resourceClaimTemplateName")
            if template_name is None or entry.get("name") in made:
                continue
            try:
                template = self.store.get(TEMPLATES, meta["namespace"], template_name)
            except ApiError:
                continue
            body = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {
                    "generateName": f"{meta['name']}-{entry['name']}-",
                    "namespace": meta["namespace"],
                    "annotations": {POD_CLAIM_NAME: entry["name"]},
                    "ownerReferences": [
                        {
                            "apiVersion": "v1",
                            "kind": "Pod",
                            "name": meta["name"],
                            "uid": meta.get("uid"),
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": clone((template.get("spec") or {}).get("spec") or {}),
            }
            claim = self.store.create(CLAIMS, meta["namespace"], body, namespaces=resources.NAMESPACES)
            statuses.append({"name": entry["name"], "resourceClaimName": claim["metadata"]["name"]})
        if len(statuses) == len(made):
            return False
        current = self.store.get(PODS, meta["namespace"], meta["name"])
        current.setdefault("status", {})["resourceClaimStatuses"] = statuses
        self.store.replace(PODS, meta["namespace"], meta["name"], current, subresource="status")
        return True

    def release(self, pod: Obj) -> None:
        """The pod is done or gone: the claims made for it go, and their devices with them."""
        meta = pod["metadata"]
        for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
            name = status.get("resourceClaimName")
            if name:
                try:
                    self.store.delete(CLAIMS, meta["namespace"], name)
                except ApiError:
                    continue

    # ----- a driver's devices ----------------------------------------------------------------

    def publish(self, node: Obj) -> None:
        """A node annotated ``turnstile.dev/sim-dra-gpus`` gets its GPUs' ResourceSlice."""
        meta = node["metadata"]
        raw = (meta.get("annotations") or {}).get(GPUS_ANNOTATION)
        if raw is None or not str(raw).isdigit():
            return
        name = f"{meta['name']}-{DRIVER}"
        product = (meta.get("labels") or {}).get(PRODUCT_LABEL, "")
        devices = [
            {"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}, "productName": {"string": product}}}
            for i in range(int(raw))
        ]
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": {
                "driver": DRIVER,
                "nodeName": meta["name"],
                "pool": {"name": meta["name"], "generation": 1, "resourceSliceCount": 1},
                "devices": devices,
            },
        }
        try:
            self.store.get(SLICES, "", name)
        except ApiError:
            self.store.create(SLICES, "", body, namespaces=resources.NAMESPACES)

    # ----- allocation ------------------------------------------------------------------------

    def claims(self, pod: Obj) -> list[Obj] | None:
        """The pod's ResourceClaims, or None while one is not made yet (or is a shared claim that
        does not exist)."""
        meta = pod["metadata"]
        made = {
            s.get("name"): s.get("resourceClaimName")
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        }
        out = []
        for entry in claims_of(pod):
            name = entry.get("resourceClaimName") or made.get(entry.get("name"))
            if not name:
                return None
            try:
                out.append(self.store.get(CLAIMS, meta["namespace"], name))
            except ApiError:
                return None
        return out

    def plans(self, claims: list[Obj], nodes: list[str]) -> dict[str, Plan]:
        """For each of ``nodes`` whose devices can serve every claim not yet allocated, the devices
        (the cluster's slices, claims and counters read once for all of them)."""
        published = self.store.list(SLICES, None)[0]
        taken = self._allocated()
        counters = Counters.of(published, taken)
        out: dict[str, Plan] = {}
        for node in nodes:
            plan = self._plan(claims, self._devices(published, node), set(taken), counters.copy())
            if plan is not None:
                out[node] = plan
        return out

    def _plan(
        self, claims: list[Obj], devices: list[slices.Device], taken: set[Device], counters: Counters
    ) -> Plan | None:
        plan: Plan = []
        for claim in claims:
            if (claim.get("status") or {}).get("allocation"):
                continue
            results: list[dict[str, str]] = []
            for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
                picked = self._pick(request, devices, taken, counters)
                if picked is None:
                    return None
                for driver, pool, device in picked:
                    taken.add((driver, pool, device))
                    counters.take((driver, pool, device))
                    results.append({"request": request["name"], "driver": driver, "pool": pool, "device": device})
            plan.append((claim, results))
        return plan

    def allocate(self, plan: Plan, pod: Obj, node: str) -> None:
        """The planned devices written to the claims, reserved for ``pod``."""
        for claim, results in plan:
            meta = claim["metadata"]
            current = self.store.get(CLAIMS, meta["namespace"], meta["name"])
            current.setdefault("status", {})["allocation"] = {
                "devices": {"results": results},
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                    ]
                },
            }
            current["status"]["reservedFor"] = [
                {"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"].get("uid")}
            ]
            self.store.replace(CLAIMS, meta["namespace"], meta["name"], current, subresource="status")

    def _allocated(self) -> set[Device]:
        out: set[Device] = set()
        for claim in self.store.list(CLAIMS, None)[0]:
            allocation = (claim.get("status") or {}).get("allocation") or {}
            for r in (allocation.get("devices") or {}).get("results") or []:
                out.add((str(r.get("driver")), str(r.get("pool")), str(r.get("device"))))
        return out

    @staticmethod
    def _devices(published: list[Obj], node: str) -> list[slices.Device]:
        """The devices the slices publish for ``node`` (or for all nodes)."""
        out: list[slices.Device] = []
        for slice_ in published:
            spec = slice_.get("spec") or {}
            if spec.get("nodeName") != node and not spec.get("allNodes"):
                continue
            driver, pool = str(spec.get("driver")), str((spec.get("pool") or {}).get("name"))
            out.extend(slices.Device.of(driver, pool, node, device) for device in spec.get("devices") or [])
        return out

    def _pick(
        self, request: dict[str, Any], devices: list[slices.Device], taken: set[Device], counters: Counters
    ) -> list[Device] | None:
        exactly = request.get("exactly")
        if not isinstance(exactly, dict) or exactly.get("allocationMode") == "All" or exactly.get("adminAccess"):
            return None  # (firstAvailable, All and admin access are not allocated here)
        try:
            device_class = self.store.get(DEVICE_CLASSES, "", str(exactly.get("deviceClassName")))
        except ApiError:
            return None
        selectors = [
            *slices.class_selectors(device_class),
            *slices.expressions(exactly.get("selectors")),
        ]
        count = int(exactly.get("count") or 1)
        free = (d for d in devices if (d.driver, d.pool, d.name) not in taken)
        found: list[Device] = []
        trial = counters.copy()
        for d in free:
            ident = (d.driver, d.pool, d.name)
            if len(found) < count and slices.selects(selectors, d) and trial.fits(ident):
                trial.take(ident)  # (two partitions of one request must fit the card together)
                found.append(ident)
        return found if len(found) == count else None


class Counters:
    """Partitionable devices: what each counter set of a pool holds (``sharedCounters``), what each
    device consumes of them (``consumesCounters``), and what the allocated devices took."""

    def __init__(self, capacity: dict[CounterKey, int], needs: dict[Device, dict[CounterKey, int]]) -> None:
        self.capacity = capacity  # (driver, pool, counter set, counter) -> milli-units
        self.needs = needs  # device -> what it consumes
        self.used: dict[CounterKey, int] = {}

    @classmethod
    def of(cls, published: list[Obj], taken: set[Device]) -> Counters:
        capacity: dict[CounterKey, int] = {}
        needs: dict[Device, dict[CounterKey, int]] = {}
        for slice_ in published:
            spec = slice_.get("spec") or {}
            driver, pool = str(spec.get("driver")), str((spec.get("pool") or {}).get("name"))
            for counter_set in spec.get("sharedCounters") or []:
                for name, value in (counter_set.get("counters") or {}).items():
                    capacity[(driver, pool, str(counter_set.get("name")), name)] = _milli(value)
            for device in spec.get("devices") or []:
                need = {
                    (driver, pool, str(entry.get("counterSet")), name): _milli(value)
                    for entry in device.get("consumesCounters") or []
                    for name, value in (entry.get("counters") or {}).items()
                }
                if need:
                    needs[(driver, pool, str(device.get("name")))] = need
        out = cls(capacity, needs)
        for ident in taken:
            out.take(ident)
        return out

    def copy(self) -> Counters:
        out = Counters(self.capacity, self.needs)
        out.used = dict(self.used)
        return out

    def fits(self, device: Device) -> bool:
        return all(
            key in self.capacity and self.used.get(key, 0) + v <= self.capacity[key]
            for key, v in self.needs.get(device, {}).items()
        )

    def take(self, device: Device) -> None:
        for key, v in self.needs.get(device, {}).items():
            self.used[key] = self.used.get(key, 0) + v


def _milli(value: Any) -> int:
    raw = value.get("value") if isinstance(value, dict) else value
    try:
        return quantity.parse_milli(str(raw))
    except quantity.QuantityError:
        return 0
