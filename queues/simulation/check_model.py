"""Engine core's admission checks: a quota reservation on a ClusterQueue with ProvisioningRequest
checks asks the autoscaler model (the simulated cluster-autoscaler's decisions, with the
scenario's ``autoscaler:`` timing) for each check; the job starts once every request is
Provisioned; a booking no pod consumes in time expires; a Failed or expired request is retried
with the config's backoff, then the workload is deactivated (``queues.cycle.provisioning``).
"""

from __future__ import annotations

import heapq
from typing import Protocol

from queues.cycle import provisioning, scheduler
from queues.kueue.admission_checks import config_for
from queues.model import Admission, Config, Workload
from queues.placement import nodes as placement


class Host(Protocol):
    """What the checks need of engine core's simulation (``Simulation`` is one)."""

    now: float
    order: int  # the tie-breaker every timed event takes the next of
    config: Config
    sched: scheduler.Scheduler
    scaler: provisioning.AutoscalerModel
    reservations: dict[str, int]  # key -> number of its current quota reservation

    def _start(self, key: str, admission: Admission) -> None: ...

    def _enact(self, decisions: list[scheduler.Decision]) -> None: ...


class AdmissionChecks:
    """The requests engine core has made, and when each is provisioned or its booking expires."""

    def __init__(self, sim: Host) -> None:
        self.sim = sim
        # requests a scale-up will provision: (t, order, key, reservation, check)
        self.provisions: list[tuple[float, int, str, int, str]] = []
        # bookings of Provisioned requests whose job has not started: (t, order, key, reservation, check)
        self.bookings: list[tuple[float, int, str, int, str]] = []
        # (key, check) -> its current request ("namespace/name") and the pods it asks capacity for
        self.asked: dict[tuple[str, str], tuple[str, list[placement.PodNeeds]]] = {}

    def next_times(self) -> list[float]:
        """When a request is next provisioned or a booking next expires."""
        return [heap[0][0] for heap in (self.provisions, self.bookings) if heap]

    def due(self) -> None:
        """What is due now: requests provisioned, bookings expired."""
        now, reservations = self.sim.now, self.sim.reservations
        while self.provisions and self.provisions[0][0] <= now:
            _, _, key, reservation, check = heapq.heappop(self.provisions)
            if reservations.get(key) == reservation:
                self._ready(key, check)
        while self.bookings and self.bookings[0][0] <= now:
            _, _, key, reservation, check = heapq.heappop(self.bookings)
            wl = self.sim.sched.workloads.get(key)
            if reservations.get(key) == reservation and wl is not None and not wl.started:
                self.sim.scaler.unbook(key, self.asked[(key, check)][0])
                self._lost(wl, check, "BookingExpired", "no pod consumed the capacity in time")

    def request(self, wl: Workload, admission: Admission) -> None:
        """A quota reservation with admission checks: one ProvisioningRequest per check, answered by
        the autoscaler model as the simulated cluster-autoscaler answers it."""
        reservation = self.sim.reservations[wl.key]
        for request in provisioning.requests(self.sim.config, wl):
            check, name, spec = request.check, request.name, request.spec
            pods = [
                provisioning.pod_needs(wl, admission, self.sim.sched.snapshot.flavors, ps)
                for ps in provisioning.pod_sets_needing(wl.pod_sets, spec.managed_resources)
                for _ in range(next(p.count for p in wl.running_pod_sets if p.name == ps))
            ]
            self.asked[(wl.key, check)] = (f"{wl.namespace}/{name}", pods)
            answer = self.sim.scaler.ask(pods, spec.provisioning_class_name, self.sim.now)
            if answer.verdict == "Provisioned":
                self._ready(wl.key, check)
            elif answer.verdict == "Failed":
                self._lost(wl, check, "Failed", answer.message)
            else:
                if answer.verdict == "ScaleUp":
                    self.sim.order += 1
                    heapq.heappush(
                        self.provisions,
                        (self.sim.now + self.sim.scaler.delay, self.sim.order, wl.key, reservation, check),
                    )
                self.sim.sched.retries.check_waiting(wl.key, provisioning.waiting_message(name, answer.message))
            if self.sim.reservations.get(wl.key) != reservation:
                return  # a failure released the reservation: no further checks for it

    def _ready(self, key: str, check: str) -> None:
        wl = self.sim.sched.workloads.get(key)
        if wl is None or wl.admission is None or wl.started:
            return  # (started: an edit took its checks away; its request is gone)
        request, pods = self.asked[(key, check)]
        self.sim.scaler.provisioned(request, key, pods)  # booked until its pods exist
        if self.sim.sched.retries.check_passed(key, check):
            self.sim._start(key, wl.admission)
        elif wl.admission is not None and wl.checks:  # booked until the other checks pass, or it expires
            self.sim.order += 1
            heapq.heappush(
                self.bookings,
                (self.sim.now + self.sim.scaler.booking_expiry, self.sim.order, key, self.sim.reservations[key], check),
            )

    def _lost(self, wl: Workload, check: str, condition: str, message: str) -> None:
        """The request of ``check`` got ``condition`` (Failed, BookingExpired): retry or reject."""
        spec = config_for(self.sim.config, check)
        if spec is None:
            return
        attempt = wl.retries + 1
        verdict = provisioning.verdict(
            [{"type": condition, "status": "True", "message": message}],
            attempt=attempt,
            strategy=spec.retry_strategy,
            started=wl.started,
        )
        if verdict.state == provisioning.RETRY:
            until = self.sim.now + provisioning.backoff(attempt, spec.retry_strategy)
            evict = self.sim.sched.retries.check_retry(wl.key, verdict.message, until)
        else:
            evict = self.sim.sched.retries.check_rejected(wl.key, verdict.message)
        if evict is not None:
            self.sim._enact([evict])
