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

Devices are matched as the core matches them for counter and capacity charges
(``queues.dra.slices``: CEL over ``device.driver``, ``attributes``, ``capacity``), and held as the
real allocator holds them (``admission.sim.operators.device_usage``): a plain device by one
allocation, a shared device (``allowMultipleAllocations``) by many while its capacity lasts (each
result records its ``shareID`` and ``consumedCapacity``), a partitionable device while its pool's
counters last. Differences from a real cluster (docs/simulated-cluster.md): no ``quantity()`` or
``semver()`` in selectors; ``allocationMode: All``, admin access and claims with ``constraints``
are not allocated (such a pod stays Pending); a claim is deallocated by its deletion only. A
prioritized list (``firstAvailable``) gets its first alternative that the node can serve (the
result names it ``<request>/<subrequest>``), and the nodes serving earlier alternatives are
preferred, as the kube-scheduler's scoring does.
"""

from __future__ import annotations

import uuid
from typing import Any

from admission.sim.operators.device_usage import Usage, ident
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

Plan = list[tuple[Obj, list[dict[str, Any]]]]  # claims to allocate, each with its results


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
        (the cluster's slices and claims read once for all of them); the nodes that give
        prioritized lists (``firstAvailable``) earlier alternatives first, as the kube-scheduler
        scores them higher."""
        published = self.store.list(SLICES, None)[0]
        usage = Usage.of(published, self.store.list(CLAIMS, None)[0])
        ranked: list[tuple[tuple[int, ...], int, str, Plan]] = []
        for i, node in enumerate(nodes):
            planned = self._plan(claims, self._devices(published, node), usage.copy())
            if planned is not None:
                ranked.append((planned[1], i, node, planned[0]))
        return {node: plan for _, _, node, plan in sorted(ranked)}

    def _plan(
        self, claims: list[Obj], devices: list[slices.Device], usage: Usage
    ) -> tuple[Plan, tuple[int, ...]] | None:
        """The devices for every claim on one node, and which alternative each prioritized list got."""
        plan: Plan = []
        rank: list[int] = []
        for claim in claims:
            if (claim.get("status") or {}).get("allocation"):
                continue
            wanted = (claim.get("spec") or {}).get("devices") or {}
            if wanted.get("constraints"):
                return None  # (matchAttribute and distinctAttribute are not modelled: never ignored)
            results: list[dict[str, Any]] = []
            for request in wanted.get("requests") or []:
                alternatives = request.get("firstAvailable")
                if alternatives is None:
                    picked = self._pick(request["name"], request.get("exactly"), devices, usage)
                    if picked is None:
                        return None
                    results.extend(picked)
                    continue
                for k, alternative in enumerate(alternatives):  # (the first that can be had, in order)
                    trial = usage.copy()
                    picked = self._pick(f"{request['name']}/{alternative.get('name')}", alternative, devices, trial)
                    if picked is not None:
                        usage = trial
                        results.extend(picked)
                        rank.append(k)
                        break
                else:
                    return None
            plan.append((claim, results))
        return plan, tuple(rank)

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

    def _pick(self, name: str, exactly: Any, devices: list[slices.Device], usage: Usage) -> list[dict[str, Any]] | None:
        """``count`` distinct devices for one request (its ``exactly``, or one ``firstAvailable``
        subrequest: the same fields), taken from ``usage``, as allocation results naming ``name``."""
        if not isinstance(exactly, dict) or exactly.get("allocationMode") == "All" or exactly.get("adminAccess"):
            return None  # (All and admin access are not allocated here)
        try:
            device_class = self.store.get(DEVICE_CLASSES, "", str(exactly.get("deviceClassName")))
        except ApiError:
            return None
        selectors = [
            *slices.class_selectors(device_class),
            *slices.expressions(exactly.get("selectors")),
        ]
        asked = (exactly.get("capacity") or {}).get("requests") or {}
        count = int(exactly.get("count") or 1)
        found: list[dict[str, Any]] = []
        for d in devices:
            if len(found) == count:
                break
            if not slices.selects(selectors, d):
                continue
            takes = usage.fits(d, asked)
            if takes is None:
                continue
            usage.take(ident(d), takes, shared=d.shared)  # (two devices of one request must fit together)
            result: dict[str, Any] = {"request": name, "driver": d.driver, "pool": d.pool, "device": d.name}
            if d.shared:
                result["shareID"] = str(uuid.uuid4())
                result["consumedCapacity"] = {dim: quantity.format_milli(v) for dim, v in sorted(takes.items())}
            found.append(result)
        return found if len(found) == count else None
