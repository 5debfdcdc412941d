"""The ProvisioningRequest admission check, as Kueue's ``kueue.x-k8s.io/provisioning-request``.

Two-phase admission: the scheduler reserves quota; when the ClusterQueue names provisioning
admission checks (for the flavors assigned), the workload is *admitted* (its job started) only
once each check is Ready. For each check the controller (or engine core's model) asks the
cluster-autoscaler for the capacity with one ``autoscaling.x-k8s.io/v1`` ProvisioningRequest
whose pod sets are those that request a managed resource, and reads its conditions:

- ``Provisioned=True`` -> Ready: the job starts, its pods annotated to consume the capacity;
- ``Failed=True`` (or ``BookingExpired=True`` before the job started) -> Retry: quota released,
  the workload waits ``min(base * 2^(n-1), max)`` seconds, then queues again and a new request
  (attempt n+1) is made; after ``backoffLimitCount`` retries -> Rejected: deactivated;
- ``CapacityRevoked=True`` while the job runs -> the workload is evicted and retried the same way;
- otherwise Pending: the workload waits with reason ``WaitingForCapacity``.

Everything here is pure: the names, the backoff, the verdict on a request's conditions, and
``AutoscalerModel``, engine core's stand-in for the simulated cluster-autoscaler.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from queues.kueue import api
from queues.kueue.admission_checks import config_for
from queues.placement import nodes as placement
from queues.placement.nodes import UNSCHEDULABLE
from queues.podsets import jobs
from queues.selectors import Taint

if TYPE_CHECKING:  # the model builds on this module (a ClusterQueue's checks decide if it is active)
    from queues.model import Admission, Config, Flavor, Workload

CONSUME_ANNOTATION = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS_ANNOTATION = "autoscaling.x-k8s.io/provisioning-class-name"
PARAMETER_PREFIX = "provreq.kueue.x-k8s.io/"  # job annotations passed on as request parameters
WAITING_FOR_CAPACITY = "WaitingForCapacity"
ADMISSION_CHECK = "AdmissionCheck"  # the eviction reason of a retry

READY, RETRY, REJECTED, PENDING = "Ready", "Retry", "Rejected", "Pending"

_MAX_NAME = 253


def checks_to_pass(
    config: Config, cq: api.ClusterQueueSpec, pod_sets: Sequence[jobs.PodSet], admission: Admission
) -> tuple[str, ...]:
    """The admission checks a new quota reservation must pass before its job starts: the
    ClusterQueue's checks that apply to the flavors assigned (a rule with ``onFlavors`` applies
    when one of them is used) and that need a request (some pod set requests a managed resource)."""
    rules = cq.check_rules
    if not rules:
        return ()  # the common case, on every admission and every start: no work
    used = {f for resources in admission.flavors.values() for f in resources.values()}
    out = []
    for rule in rules:
        if rule.on_flavors and not set(rule.on_flavors) & used:
            continue
        spec = config_for(config, rule.name)
        if spec is None or pod_sets_needing(pod_sets, spec.managed_resources):
            out.append(rule.name)  # an inactive check keeps the job waiting, as in Kueue
    return tuple(out)


def pod_sets_needing(pod_sets: Sequence[jobs.PodSet], managed: Sequence[str]) -> tuple[str, ...]:
    """Pod sets that need capacity from the autoscaler: those requesting a managed resource
    (every pod set when ``managedResources`` is empty), as Kueue's ``requiredPodSets``."""
    return tuple(ps.name for ps in pod_sets if not managed or any(ps.requests.get(r) for r in managed))


def _object_name(name: str) -> str:
    """``name`` as a valid object name: cut to 253 characters with a hash of the whole, as Kueue."""
    if len(name) <= _MAX_NAME:
        return name
    return f"{name[: _MAX_NAME - 11]}-{hashlib.sha1(name.encode()).hexdigest()[:10]}"


def request_name(workload: str, check: str, attempt: int) -> str:
    """The ProvisioningRequest of ``attempt`` (1, 2, ...) for a workload (its job's name) and check."""
    return _object_name(f"{workload}-{check}-{attempt}")


def template_name(request: str, pod_set: str) -> str:
    """The PodTemplate a request's pod set points to (``ppt-`` as Kueue)."""
    return _object_name(f"ppt-{request}-{pod_set}")


@dataclass(frozen=True, slots=True)
class Request:
    """The ProvisioningRequest one admission check of a quota reservation calls for."""

    check: str
    name: str  # of the current attempt (the workload's retries + 1)
    spec: api.ProvisioningRequestConfigSpec


def requests(config: Config, wl: Workload) -> list[Request]:
    """The requests ``wl``'s quota reservation calls for now: one per admission check that
    applies and can run (its config exists), for the current attempt; none without quota."""
    if wl.admission is None:
        return []
    cq = config.cluster_queues.get(wl.admission.cluster_queue)
    if cq is None:
        return []
    job = wl.key.split("/", 1)[1]
    out = []
    for check in checks_to_pass(config, cq.spec, wl.pod_sets, wl.admission):
        spec = config_for(config, check)
        if spec is not None:
            out.append(Request(check, request_name(job, check, wl.retries + 1), spec))
    return out


def pod_annotations(config: Config, wl: Workload) -> dict[str, dict[str, str]]:
    """Per pod set, the annotations its pods carry once the job starts: for each check that
    applied, the request they consume and its provisioning class (Kueue's podSetUpdates)."""
    out: dict[str, dict[str, str]] = {}
    for r in requests(config, wl):
        for ps in pod_sets_needing(wl.pod_sets, r.spec.managed_resources):
            out[ps] = {CONSUME_ANNOTATION: r.name, CLASS_ANNOTATION: r.spec.provisioning_class_name}
    return out


def backoff(retry: int, strategy: api.RetryStrategy) -> float:
    """Seconds a workload waits before its ``retry``-th new request (1, 2, ...), as Kueue."""
    return float(min(strategy.backoff_base_seconds * 2 ** (retry - 1), strategy.backoff_max_seconds))


@dataclass(frozen=True, slots=True)
class Verdict:
    state: str  # Ready | Retry | Rejected | Pending
    message: str
    revoked: bool = False  # the capacity went away while the job ran


def _true(conditions: Sequence[Mapping[str, Any]], kind: str) -> Mapping[str, Any] | None:
    return next((c for c in conditions if c.get("type") == kind and c.get("status") == "True"), None)


def verdict(
    conditions: Sequence[Mapping[str, Any]], *, attempt: int, strategy: api.RetryStrategy, started: bool
) -> Verdict:
    """What a request's conditions mean for its check, as Kueue's provisioning controller:
    attempt ``n`` <= ``backoffLimitCount`` is retried, the one after is rejected."""
    retry_left = attempt <= strategy.backoff_limit_count
    if (c := _true(conditions, "Failed")) is not None:
        msg = str(c.get("message") or c.get("reason") or "failed")
        return Verdict(RETRY, f"Retrying after failure: {msg}") if retry_left else Verdict(REJECTED, msg)
    if (c := _true(conditions, "CapacityRevoked")) is not None:
        if started:
            msg = str(c.get("message") or "the autoscaler took the capacity back")
            return Verdict(RETRY, f"Retrying after capacity was revoked: {msg}", revoked=True)
        return Verdict(PENDING, "")
    if (c := _true(conditions, "BookingExpired")) is not None and not started:
        msg = str(c.get("message") or "the booking expired")
        return Verdict(RETRY, f"Retrying after booking expired: {msg}") if retry_left else Verdict(REJECTED, msg)
    if (c := _true(conditions, "Provisioned")) is not None:
        return Verdict(READY, str(c.get("message") or "provisioned"))
    latest = next(
        (c for c in conditions if c.get("type") == "Provisioned"),
        next((c for c in conditions if c.get("type") == "Accepted"), None),
    )
    return Verdict(PENDING, str((latest or {}).get("message") or "waiting for the autoscaler to answer"))


def waiting_message(request: str, message: str) -> str:
    said = f"waiting for ProvisioningRequest {request}"
    return f"{said}: {message}" if message else said


def pod_needs(wl: Workload, admission: Admission, flavors: Mapping[str, Flavor], pod_set: str) -> placement.PodNeeds:
    """One pod of ``pod_set`` as it runs once admitted: its requests, its own nodeSelector plus its
    flavors' node labels, its own tolerations plus its flavors' (as the enactor starts it)."""
    ps = next(p for p in wl.pod_sets if p.name == pod_set)
    selector = dict(ps.constraints.node_selector)
    tolerations = list(ps.tolerations)
    for name in sorted(set(admission.flavors.get(pod_set, {}).values())):
        flavor = flavors.get(name)
        if flavor is None:
            continue
        selector.update(flavor.node_labels)
        tolerations += [t for t in flavor.tolerations if t not in tolerations]
    return placement.PodNeeds(placement.with_pod_slot(ps.node_requests), selector, tuple(tolerations))


def pods_of(wl: Workload, admission: Admission, flavors: Mapping[str, Flavor]) -> list[tuple[str, placement.PodNeeds]]:
    """Every pod of an admitted workload as it is created, with its pod set, in rank order; a pod
    set placed by topology has each pod pinned to its node (Kueue's per-pod hostname selector)."""
    out: list[tuple[str, placement.PodNeeds]] = []
    for ps in wl.running_pod_sets:
        pod = pod_needs(wl, admission, flavors, ps.name)
        nodes = admission.placement.get(ps.name)
        if not nodes:
            out += [(ps.name, pod)] * ps.count
            continue
        for node, count in nodes.items():
            pinned = placement.PodNeeds(pod.requests, {**pod.node_selector, placement.HOSTNAME: node}, pod.tolerations)
            out += [(ps.name, pinned)] * count
    return out


# ----- engine core's cluster-autoscaler ------------------------------------------------------------


@dataclass
class AutoscalerModel:
    """The simulated cluster's nodes and cluster-autoscaler (``admission.sim.operators.autoscaler``), in
    scenario time: pods of running workloads placed first fit in node-name order, requests
    answered by ``nodes.answer``, scale-ups completing ``delay`` seconds later, a Provisioned
    request's booking expiring ``booking_expiry`` seconds later unless its job started."""

    template: Mapping[str, Any]
    max_nodes: int
    delay: float
    booking_expiry: float = 600.0  # a Provisioned request no pod consumed by then: BookingExpired
    nodes: list[placement.NodeInfo] = field(default_factory=list)
    free: placement.Free = field(default_factory=dict)
    placed: dict[str, list[tuple[str, placement.PodNeeds]]] = field(default_factory=dict)
    unplaced: dict[str, list[placement.PodNeeds]] = field(default_factory=dict)  # pods waiting for room
    added: int = 0
    scale_ups: list[tuple[float, int, int]] = field(default_factory=list)  # (due, order, nodes)
    # Provisioned requests whose pods do not exist yet: "namespace/request" -> (workload key, pods)
    booked: dict[str, tuple[str, list[placement.PodNeeds]]] = field(default_factory=dict)
    _order: int = 0

    @classmethod
    def of(cls, options: Mapping[str, Any], node_shapes: Sequence[Mapping[str, Any]]) -> AutoscalerModel:
        model = cls(
            template=dict(options.get("nodeTemplate") or {}),
            max_nodes=int(options.get("maxNodes", 16)),
            delay=float(options.get("provisioningDelay", 120)),
            booking_expiry=float(options.get("bookingExpiry", 600)),
        )
        for shape in node_shapes:
            model._add_node(placement.node_object(str(shape["name"]), shape))
        return model

    def _add_node(self, obj: Mapping[str, Any]) -> None:
        info = placement.NodeInfo.of(obj)
        self.nodes.append(info)
        self.nodes.sort(key=lambda n: n.name)
        self.free[info.name] = dict(info.allocatable)

    def ask(self, pods: Sequence[placement.PodNeeds], provisioning_class: str, now: float) -> placement.Answer:
        """A new request for ``pods``: the autoscaler's answer (a scale-up is booked to end at
        ``now + delay``; ``due_scale_ups`` adds its nodes)."""
        free = {name: dict(f) for name, f in self.free.items()}
        for _, (_, booked) in sorted(self.booked.items()):
            placement.book(booked, self.nodes, free)
        answer = placement.answer(
            pods,
            self.nodes,
            free,
            provisioning_class=provisioning_class,
            template=self.template,
            max_nodes=self.max_nodes,
            added=self.added,
        )
        if answer.verdict == "ScaleUp":
            self.added += answer.nodes
            self._order += 1
            heapq.heappush(self.scale_ups, (now + self.delay, self._order, answer.nodes))
        return answer

    def provisioned(self, request: str, key: str, pods: Sequence[placement.PodNeeds]) -> None:
        """Request ``request`` (namespace/name) of workload ``key`` is Provisioned: its capacity is
        booked until its pods exist, its booking expires, or the workload lets go of it."""
        self.booked[request] = (key, list(pods))

    def unbook(self, key: str, request: str | None = None) -> None:
        """The bookings of ``key`` (or only ``request``) end."""
        for name in [n for n, (k, _) in self.booked.items() if k == key and (request is None or n == request)]:
            del self.booked[name]

    def next_scale_up(self) -> float | None:
        return self.scale_ups[0][0] if self.scale_ups else None

    def due_scale_ups(self, now: float) -> None:
        while self.scale_ups and self.scale_ups[0][0] <= now:
            _, _, count = heapq.heappop(self.scale_ups)
            for _ in range(count):
                self._add_node(placement.node_object(placement.scale_up_name(len(self.nodes)), self.template))
        self._place_waiting()

    def cordon(self, name: str, on: bool) -> placement.NodeInfo | None:
        """``kubectl cordon``/``uncordon``: pods there keep running, new ones go elsewhere."""
        return self.taint(name, UNSCHEDULABLE, Taint(UNSCHEDULABLE, "", "NoSchedule") if on else None)

    def taint(self, name: str, key: str, taint: Taint | None) -> placement.NodeInfo | None:
        """The node's taint of ``key`` set to ``taint`` (None: taken off; pods waiting for room
        may go there now): pods there keep running, new ones that do not tolerate it go elsewhere."""
        for i, node in enumerate(self.nodes):
            if node.name == name:
                self.nodes[i] = placement.tainted(node, key, taint)
                if taint is None:
                    self._place_waiting()
                return self.nodes[i]
        return None

    def workloads_on(self, name: str) -> list[str]:
        """The workloads with a pod bound to node ``name``."""
        return sorted(key for key, pods in self.placed.items() if any(node == name for node, _ in pods))

    def remove_node(self, name: str) -> None:
        """The node is deleted: its pods are gone, and their owners' new pods wait for room."""
        self.nodes = [n for n in self.nodes if n.name != name]
        self.free.pop(name, None)
        for key, pods in self.placed.items():
            lost = [pod for node, pod in pods if node == name]
            if lost:
                pods[:] = [(node, pod) for node, pod in pods if node != name]
                self.unplaced.setdefault(key, []).extend(lost)
        self._place_waiting()

    def start(self, key: str, pods: Sequence[placement.PodNeeds]) -> None:
        """A workload's pods are created: each goes to the first node it fits, or waits for room."""
        self.unbook(key)  # its pods hold the capacity now
        self.placed[key] = []
        # With no nodes at all the simulated scheduler binds pods to an unlimited stand-in node.
        if self.nodes and pods:
            self.unplaced[key] = list(pods)
        self._place_waiting()

    def stop(self, key: str) -> None:
        """A workload's pods are gone (or its requests): their capacity is free again."""
        self.unbook(key)
        for name, pod in self.placed.pop(key, []):
            for r, v in pod.requests.items():
                self.free[name][r] = self.free[name].get(r, 0) + v
        self.unplaced.pop(key, None)
        self._place_waiting()

    def ready(self, key: str) -> bool:
        """Every pod of a started workload is on a node."""
        return key in self.placed and key not in self.unplaced

    def why_unplaced(self, key: str) -> str | None:
        """Why a started workload's pods wait for a node, in the kube-scheduler's words (its first
        waiting pod's), as the controller says it (``admission.controller.features.pod_waits``); None when
        all are placed."""
        pods = self.unplaced.get(key)
        if not pods or not self.nodes:
            return None
        words = placement.fit_error(pods[0], self.nodes, self.free)
        return f"{len(pods)} of its pods cannot be scheduled: {words}"

    def _place_waiting(self) -> None:
        """Place what waits for room, first come first placed (only workloads with waiting pods are
        kept in ``unplaced``: this runs at every start and stop)."""
        for key, pods in list(self.unplaced.items()):
            still = []
            for pod in pods:
                node = placement.first_fit(pod, self.nodes, self.free) if self.nodes else None
                if node is None:
                    still.append(pod)
                else:
                    self.placed[key].append((node, pod))
            if still:
                pods[:] = still
            else:
                del self.unplaced[key]
