"""The discrete-event simulator behind ``turnstile simulate --engine core``.

Replays a scenario in virtual time with the same ``Scheduler`` the controller uses. At each
instant t, in this order (scenario.md's timing rules): 1. jobs whose runtime ends at t
finish; then the autoscaler's scale-ups due at t add their nodes and their requests are
Provisioned (those jobs start); 2. edits at t apply, in file order; 3. jobs submitted at t
enter their queues, in file order; 4. scheduling cycles run until one changes nothing (a
workload whose admission-check backoff ends at t queues again first). Evicted workloads
release their quota at once and restart from zero when admitted again. Everything is ordered
by time and file order, so the same file always gives the same result.

Plain Pods (``queues.podsets.pods``): an evicted pod is deleted, so its workload ends there (Cancelled);
a pod group is one workload, submitted when its last pod is; a Deployment's replicas are pod
workloads ``<name>-<k>``, made and deleted as its ReplicaSet would (``Replicas``). A batch Job
scaled while admitted is resized in place if elastic (``queues.cycle.elastic``), else requeued.

Two-phase admission: a reservation on a ClusterQueue with ProvisioningRequest checks starts
its job only once every request is Provisioned (``queues.simulation.check_model``).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from typing import Any

from queues.cycle import provisioning, scheduler
from queues.cycle.decisions import Resize
from queues.gpus import gpu_health, rightsizing
from queues.kueue import api
from queues.model import Admission, Config
from queues.placement import nodes as placement
from queues.placement.inventory import Inventory
from queues.podsets import jobs
from queues.selectors import Taint
from queues.simulation.check_model import AdmissionChecks
from queues.simulation.reclaim_model import EfficiencyModel
from queues.simulation.recorder import Recorder, Result, Track
from queues.simulation.replicas import Replicas
from queues.simulation.scenario import Edit, JobEntry, Scenario
from queues.simulation.scenario_edits import apply_edit, scaled

__all__ = ["Recorder", "Replicas", "Result", "Simulation", "Track"]


class Simulation:
    """One run of a scenario through the scheduling core."""

    def __init__(self, scenario: Scenario, *, follow_shares: bool = False) -> None:
        self.scenario = scenario
        self.config = Config.of(scenario.manifests)
        self.scaler = provisioning.AutoscalerModel.of(scenario.autoscaler or {}, scenario.nodes)
        # the nodes topology-aware placement sees: the simulated cluster's, less what its pods use
        self.inventory = Inventory() if self.scaler.nodes else None
        self.sched = scheduler.Scheduler(
            self.config,
            namespaces=scenario.namespaces,
            fair_sharing=scenario.fair_sharing,
            admission_fair_sharing=scenario.admission_fair_sharing,
            inventory=self.inventory,
            packing=scenario.packing,
            ignore_undeclared=scenario.devices.transformations.ignore_undeclared,
        )
        self.sched.intake.set_pod_priorities(scenario.pod_priorities)
        self.sched.intake.set_devices(scenario.devices)  # DRA: what pods' claims charge
        self.sched.block_admission = scenario.pods_ready.block_admission
        # idle reclaim and GPU-hour budgets (``queues.efficiency``)
        self.efficiency = EfficiencyModel(
            scenario.utilization, scenario.reclaim, scenario.budgets, scenario.devices.card_fractions()
        )
        if scenario.gpu_memory:  # right-sizing (``queues.gpus.rightsizing``)
            offers = rightsizing.offered(
                (o for o in scenario.manifests if isinstance(o, api.ClusterQueue)),
                {o.name: o for o in scenario.manifests if isinstance(o, api.ResourceFlavor)},
            )
            self.efficiency.memory = rightsizing.MemoryLedger(
                scenario.gpu_memory, scenario.utilization, offers, self._card_memory
            )
        if scenario.budgets:
            self.sched.nominator.gate = self.efficiency.gate()
            self.sched.intake.budget_priority = self.efficiency.lowered()
        self.record = Recorder(scenario, follow_shares=follow_shares)
        self.finishes: list[tuple[float, int, int, str]] = []  # (t, order, epoch, key)
        self.order = 0
        self.now = 0.0
        self.record.configure(self.config)
        self._sync_inventory()
        self.reservations: dict[str, int] = {}  # key -> number of its current quota reservation
        self.scaled: dict[str, Mapping[str, Any]] = {}  # a Job's object as its last scale edit left it
        self.checks = AdmissionChecks(self)
        self.replicas = Replicas(self)
        # waitForPodsReady: started workloads whose pods are not all on nodes yet (key -> epoch; their
        # runtime starts when they are), and when each is evicted unless they are by then
        self.unready: dict[str, int] = {}
        self.readied = 0  # how many workloads have become Ready (blockAdmission schedules again on one)
        self.deadlines: list[tuple[float, int, int, str]] = []  # (t, order, epoch, key)
        self.progress_at = 0.0  # the last instant something but waitForPodsReady's loop happened

    @property
    def tracks(self) -> list[Track]:
        return self.record.tracks

    @property
    def series(self) -> list[tuple[float, int, int]]:
        return self.record.series

    def run(self, on_step: Callable[[Simulation], None] | None = None) -> Result:
        """Replay the scenario; ``on_step`` (tests, live views) sees the state after each instant."""
        arrivals = sorted(self.scenario.jobs, key=lambda e: (e.at, e.index))
        edits = sorted(self.scenario.edits, key=lambda e: (e.at, e.index))
        ai = ei = 0
        while True:
            candidates = []
            if self.finishes:
                candidates.append(self.finishes[0][0])
            candidates += self.checks.next_times()
            if ai < len(arrivals):
                candidates.append(arrivals[ai].at)
            if ei < len(edits):
                candidates.append(edits[ei].at)
            if (scale_up := self.scaler.next_scale_up()) is not None:
                candidates.append(scale_up)
            if (settled := self.sched.next_settled()) is not None:
                candidates.append(settled)
            if self.efficiency.active and self.runs_or_waits():
                candidates += [t for t in (self.efficiency.next_check(self.now), self.efficiency.next_period()) if t]
            if candidates:
                self.progress_at = max(self.progress_at, min(candidates))
            looping = [
                t for t in (self.deadlines[0][0] if self.deadlines else None, self.sched.intake.next_requeue()) if t
            ]
            if looping and (candidates or min(looping) <= self.progress_at + self.scenario.pods_ready.horizon):
                candidates.extend(looping)  # (else: only waitForPodsReady's endless loop is left)
            if not candidates:
                break
            self.now = self.sched.now = self.record.now = min(candidates)
            if self.efficiency.advance(self.now):  # (a budget exhausted or renewed)
                self.sched.reprioritize()
                self.sched.look_again()
            # 1. finishes
            while self.finishes and self.finishes[0][0] <= self.now:
                _, _, epoch, key = heapq.heappop(self.finishes)
                self._finish(key, epoch)
            self.scaler.due_scale_ups(self.now)
            self.checks.due()
            while self.deadlines and self.deadlines[0][0] <= self.now:
                _, _, epoch, key = heapq.heappop(self.deadlines)
                if self.unready.get(key) == epoch and not self.scaler.ready(key):
                    why = self.scaler.why_unplaced(key)
                    evict = self.sched.retries.pods_ready_timeout(key, self.scenario.pods_ready, why=why)
                    self._enact([evict] if evict is not None else [])
            # 2. edits
            while ei < len(edits) and edits[ei].at <= self.now:
                self._edit(edits[ei])
                ei += 1
            # 3. submissions
            while ai < len(arrivals) and arrivals[ai].at <= self.now:
                self._submit(arrivals[ai])
                ai += 1
            # idle GPUs reclaimed (``queues.efficiency``), then 4. cycles
            self._enact(self.efficiency.reclaim(self.now, self.sched))
            self._sync_inventory()
            while True:
                readied = self.readied
                self._enact(self.sched.schedule())
                self._ready_now()
                if not self.sched.block_admission or self.readied == readied:
                    break  # (with blockAdmission, a workload that became Ready lets the next one in)
            self.record.sample()
            if on_step is not None:
                on_step(self)
        result = self.record.result(cycles=self.sched.cycles, explain=self.sched.explain, work=self.sched.work)
        result.efficiency = self.efficiency.summary_at(result.makespan)
        return result

    def _card_memory(self, flavor: str, resource: str) -> float:
        """A GPU's memory (MiB) under ``flavor``: from the first scenario node its nodeLabels
        select (``rightsizing.card_memory_mib``), as the simulated dcgm-exporter reads it."""
        rf = self.sched.config.flavors.get(flavor)
        wanted = rf.spec.node_labels if rf is not None else {}
        for node in self.scenario.nodes:
            labels = {str(k): str(v) for k, v in (node.get("labels") or {}).items()}
            if all(labels.get(k) == v for k, v in wanted.items()):
                return rightsizing.card_memory_mib(resource, labels)
        return rightsizing.card_memory_mib(resource, {})

    def runs_or_waits(self) -> bool:
        """Whether anything still runs or waits (else reclaim checks and budget periods are moot)."""
        return bool(self.efficiency.runs) or bool(self.sched.pending.where)

    def _sync_inventory(self) -> None:
        """Tell placement about nodes the autoscaler added and what pods placed without a topology
        use on each node (Kueue's TAS cache counts such pods too)."""
        if self.inventory is None:
            return
        if len(self.scaler.nodes) != len(self.inventory.nodes):  # (scale-ups add nodes)
            for info in self.scaler.nodes:
                if info.name not in self.inventory.nodes:
                    self.inventory.put(info)
        if not any(f.topology for f in self.sched.snapshot.flavors.values()):
            return  # (only placement by topology reads what other pods use: no need to count it)
        used: dict[str, dict[str, int]] = {}
        for key, pods in self.scaler.placed.items():
            wl = self.sched.workloads.get(key)
            if wl is not None and wl.admission is not None and wl.admission.placement:
                continue  # (held in the inventory by its admission)
            for node, pod in pods:
                for r, v in placement.with_pod_slot(pod.requests).items():
                    used.setdefault(node, {})[r] = used.get(node, {}).get(r, 0) + v
        for node in set(self.inventory.external) | set(used):
            self.inventory.set_external(node, used.get(node, {}))

    def _submit(self, entry: JobEntry, seq: int | None = None) -> None:
        if entry.replicas is not None:
            self.replicas.create(entry)
            return
        wl = self.sched.intake.workload_for(entry.job, seq=entry.seq if seq is None else seq, now=self.now)
        self.record.submitted(wl)
        self.sched.submit(wl)

    def _rescale(self, edit: Edit) -> None:
        """A batch Job's ``parallelism`` (a RayCluster's worker group's replicas) set by a ``scale``
        edit: waiting, it queues again as it now is (in its place); admitted, an elastic one is
        resized in place and any other is evicted and queued again (``Retries.job_changed``), as the
        controller does when its job changes."""
        key = edit.name
        track = self.record.by_key[key]
        wl = track.workload
        if wl is None or track.state not in ("Pending", "Admitted"):
            return
        obj = self.scaled[key] = scaled(self.scaled.get(key) or track.entry.object, edit)
        info = jobs.read_job(obj)
        now = self.sched.intake.workload_for(info, seq=0, now=self.now)
        if wl.admission is None:
            self.sched.pending.remove(wl)
            wl.pod_sets, wl.shape = now.pod_sets, now.shape
            self.sched.intake.enqueue(wl)
        elif (d := self.sched.retries.job_changed(key, now.pod_sets, now.shape, elastic=info.elastic)) is not None:
            self._enact([d])

    def _finish(self, key: str, epoch: int) -> None:
        track = self.record.by_key[key]
        if track.epoch != epoch or track.state != "Admitted" or track.workload is None:
            return
        self.sched.finish(key)
        self.scaler.stop(key)
        self.reservations.pop(key, None)
        self.efficiency.stopped(key, self.now)
        self.record.finished(key)

    def _edit(self, edit: Edit) -> None:
        if edit.kind == "Node":
            self._node_edit(edit)
            return
        if edit.action == "scale" and edit.name in self.replicas.entries:
            self.replicas.scale(edit.name, edit.replicas)
            return
        if edit.action == "scale":
            self._rescale(edit)
            return
        if edit.action == "cancel" and edit.name in self.replicas.entries:
            self.replicas.scale(edit.name, 0)  # the Deployment deleted: its replicas go with it
            return
        if edit.action == "cancel":
            track = self.record.by_key[edit.name]
            if track.state not in ("Pending", "Admitted") or track.workload is None:
                return
            self.sched.cancel(edit.name)
            self.scaler.stop(edit.name)
            self.reservations.pop(edit.name, None)
            self.efficiency.stopped(edit.name, self.now)
            self.record.cancelled(edit.name)
            return
        apply_edit(self.config, edit)
        self.sched.take_told()  # engine core acts on check changes as it makes them; only the edit's count here
        self._enact(self.sched.set_config(self.config))
        for key, started in sorted(self.sched.take_told().checked.items()):  # checks the edit took away
            wl = self.sched.workloads.get(key)
            if started and wl is not None and wl.admission is not None:
                self._start(key, wl.admission)
        self.record.configure(self.config)

    def _node_edit(self, edit: Edit) -> None:
        """A node cordoned or uncordoned (what runs there stays), or deleted (what was placed there
        by topology is evicted and placed again; other pods wait for room elsewhere), or its GPUs
        report an Xid (``_gpu_xid``)."""
        if edit.action == "gpuXid":
            self._gpu_xid(edit.name, edit.xid)
            return
        if edit.action == "delete":
            self._enact(self.sched.retries.node_lost(edit.name))
            self.scaler.remove_node(edit.name)
            return
        node = self.scaler.cordon(edit.name, edit.action == "cordon")
        if node is not None and self.inventory is not None:
            self.inventory.put(node)

    def _gpu_xid(self, name: str, xid: int) -> None:
        """The node's GPUs report ``xid`` from now on, as the controller with its default
        ``TURNSTILE_GPU_HEALTH=taint`` acts on it (``queues.gpus.gpu_health``): a fatal one taints the
        node ``turnstile.dev/gpu-unhealthy:NoSchedule`` and evicts what runs there
        (``NodeFailures``); one that is not (or 0) takes the taint off."""
        node = next((n for n in self.scaler.nodes if n.name == name), None)
        gpus = max(1, node.allocatable.get("nvidia.com/gpu", 0) // 1000) if node is not None else 1
        found = [
            f for i in range(gpus) if (f := gpu_health.xid_fault(name, str(i), gpu_health.simulated_uuid(name, i), xid))
        ]
        taint = Taint(gpu_health.TAINT, gpu_health.taint_value(found), "NoSchedule") if found else None
        tainted = self.scaler.taint(name, gpu_health.TAINT, taint)
        if tainted is not None and self.inventory is not None:
            self.inventory.put(tainted)
        if found:
            keys = set(self.scaler.workloads_on(name)) | {
                key
                for key, wl in self.sched.workloads.items()
                if wl.admission is not None and any(name in nodes for nodes in wl.admission.placement.values())
            }
            self._enact(self.sched.retries.node_failed(name, keys, gpu_health.describe(found)))

    def _enact(self, decisions: list[scheduler.Decision]) -> None:
        for d in decisions:
            key = d.workload.key
            if isinstance(d, scheduler.Admit):
                self.reservations[key] = self.reservations.get(key, 0) + 1
                if d.workload.checks:
                    self.checks.request(d.workload, d.admission)
                else:
                    self._start(key, d.admission)
            elif isinstance(d, Resize):
                self.record.resized(key, d.admission, d.counts)
                if d.workload.started:  # (its pods follow: the added ones start, those beyond it stop)
                    self.scaler.stop(key)
                    self.scaler.start(
                        key,
                        [pod for _, pod in provisioning.pods_of(d.workload, d.admission, self.sched.snapshot.flavors)],
                    )
            else:
                self.scaler.stop(key)
                self.reservations.pop(key, None)
                self.record.evicted(key, d.reason, d.detail, d.by, d.message)
                self.efficiency.stopped(key, self.now)
                entry = self.record.by_key[key].entry
                if entry.job.kind == "Pod" and not entry.regroups:  # (a serving group is made again: it waits)
                    # a pod cannot be suspended: it is deleted, and with it its workload, as Kueue's pod
                    # integration does; a Deployment's ReplicaSet makes another, which queues afresh
                    self.cancel(key)
                    self.replicas.replaced(key)

    def cancel(self, key: str) -> None:
        """The workload's job (or pod) is gone: its quota is released, it is Cancelled."""
        self.sched.cancel(key)
        self.scaler.stop(key)
        self.reservations.pop(key, None)
        self.efficiency.stopped(key, self.now)
        self.record.cancelled(key)

    def _start(self, key: str, admission: Admission) -> None:
        """Every check passed (or none applied): the job's pods are made now and run once all are on
        nodes (``_ready_now``); waitForPodsReady evicts it if they are not by its deadline."""
        track = self.record.admitted(key, admission)
        wl = self.sched.workloads[key]
        flavors = self.sched.snapshot.flavors
        pods = provisioning.pods_of(wl, admission, flavors)
        self.scaler.start(key, [pod for _, pod in pods])
        if admission.placement:
            self.record.placed(key, admission.placement)
        else:  # where the simulated kube-scheduler bound its pods (those that found room)
            pod_set = {id(pod): name for name, pod in pods}
            bound: dict[str, dict[str, int]] = {}
            for node, pod in self.scaler.placed.get(key, []):
                on = bound.setdefault(pod_set[id(pod)], {})
                on[node] = on.get(node, 0) + 1
            self.record.placed(key, bound)
        self.unready[key] = track.epoch
        deadline = self.scenario.pods_ready.deadline(self.now, False, None, track.entry.job.annotations)
        if deadline is not None:
            self.order += 1
            heapq.heappush(self.deadlines, (deadline, self.order, track.epoch, key))
        self._ready_now()

    def _ready_now(self) -> None:
        """Started workloads whose pods are all on nodes now: their runtime starts (the simulated
        cluster's kubelet runs a pod from when it is bound)."""
        for key, epoch in list(self.unready.items()):
            track = self.record.by_key[key]
            if track.epoch != epoch or track.state != "Admitted":
                del self.unready[key]
            elif self.scaler.ready(key):
                del self.unready[key]
                self.progress_at = self.now
                self.readied += 1
                if (wl := self.sched.workloads.get(key)) is not None:
                    wl.ready_at = self.now
                    self.efficiency.started(wl, self.now, 0.0 if track.entry.serves else track.entry.runtime)
                if not track.entry.serves:
                    self.order += 1
                    heapq.heappush(self.finishes, (self.now + track.entry.runtime, self.order, epoch, key))
