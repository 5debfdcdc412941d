"""Engine cluster's report, rebuilt from what the controller committed.

The driver (``admission.sim.engine``) records what it did (jobs created, edits made) and reads the
decisions the controller committed (``workload_events``); ``replay`` plays both, in scenario time,
through engine core's ``Recorder`` and a scheduler of its own (for the quota each admission holds
and why a workload still waits), so both engines' reports have one shape.
"""

from __future__ import annotations

from typing import Any

from admission.store import workloads as store
from queues.cycle import scheduler
from queues.model import Admission, Config, Workload
from queues.podsets import jobs
from queues.simulation.scenario import Edit, JobEntry, Scenario
from queues.simulation.scenario_edits import apply_edit
from queues.simulation.simulator import Recorder, Result
from queues.workloads import usage_of


def replay(
    scenario: Scenario,
    record: Recorder,
    timeline: list[tuple[float, int, int, Any]],
    rows: dict[str, tuple[str, str | None, str | None]],
    *,
    cycles: int,
) -> Result:
    """The run as engine core reports it, from the driver's actions (``JobEntry``, ``Edit``) and the
    committed decisions (``store.EventRow``), each at ``(scenario time, phase, order)``.

    Ordered by time, then by scenario.md's phases at one instant (finishes, edits, submissions,
    decisions), then by file or commit order. ``rows`` are the workloads' stored states.
    """
    timeline = sorted(timeline, key=lambda a: a[:3])
    config = Config.of(scenario.manifests)
    ignore = scenario.devices.transformations.ignore_undeclared  # (Kueue's quotaCheckStrategy)
    sched = scheduler.Scheduler(config, namespaces=scenario.namespaces, ignore_undeclared=ignore)
    sched.intake.set_devices(scenario.devices)  # (DRA claims charged as the controller charged them)
    record.configure(config)
    workloads: dict[str, Workload] = {}
    last_t: float | None = None
    for t, _, _, what in timeline:
        if last_t is not None and t != last_t:
            record.sample()
        record.now = last_t = t
        if isinstance(what, JobEntry):
            wl = workloads[what.job.key] = sched.intake.workload_for(what.job, seq=what.seq, now=t)
            sched.submit(wl)
            record.submitted(wl)
        elif isinstance(what, Edit):
            track = record.by_key.get(what.name)
            if what.action == "cancel":
                if track is not None and track.state in ("Pending", "Admitted") and track.submitted is not None:
                    record.cancelled(what.name)
            elif what.action != "scale" and what.kind != "Node":  # (a scale's replicas are on the timeline;
                # a node's edit changes no queue configuration: its evictions are on the timeline)
                apply_edit(config, what)
                record.configure(config)
        elif what.workload in workloads:
            ev: store.EventRow = what
            if record.by_key[ev.workload].state == "Finished":
                # A job finishes once. Finishes sort before decisions at one instant, so a decision
                # committed at the instant its job completed (an eviction, a re-admission in the same
                # step) comes after the finish here: it did not matter, the work was done.
                continue
            if ev.type == "Admitted":
                flavors = ev.flavors or {}
                record.admitted(
                    ev.workload,
                    admission_of(
                        config,
                        workloads[ev.workload],
                        flavors,
                        ev.cluster_queue or "",
                        bool(ev.borrowing),
                        ev.counts or {},
                    ),
                )
                if ev.placement:
                    record.placed(ev.workload, ev.placement)
            elif ev.type == "Evicted":
                record.evicted(ev.workload, ev.reason or "", ev.detail, ev.by)
            elif ev.type == "Resized":  # (an elastic job's admission, resized while it runs)
                if (held := record.by_key[ev.workload].admission) is not None:
                    counts = ev.counts or {}
                    wl = workloads[ev.workload]
                    resized = admission_of(config, wl, held.flavors, held.cluster_queue, held.borrowing, counts)
                    record.resized(ev.workload, resized, counts)
            elif ev.reason not in (None, "JobFinished"):
                if record.by_key[ev.workload].state in ("Admitted", "Pending"):
                    record.cancelled(ev.workload)  # a pod deleted: by its eviction, or by the user
            elif record.by_key[ev.workload].state in ("Admitted", "Pending"):
                # A job can complete just as it is evicted (before the suspension reaches it): it
                # finished, whichever of the two was committed first at that instant.
                record.finished(ev.workload)
    record.sample()

    def explain(wl: Workload) -> tuple[str, str]:
        state, reason, message = rows.get(wl.key, ("Pending", None, None))
        if reason and state == "Pending":
            return reason, message or ""
        return sched.explain(wl)

    return record.result(cycles=cycles, explain=explain)


def admission_of(
    config: Config,
    wl: Workload,
    flavors: dict[str, dict[str, str]],
    cluster_queue: str,
    borrowing: bool,
    counts: dict[str, int] | None = None,
) -> Admission:
    """The quota an admission holds, from the flavor each pod set's resources were assigned (and
    the pods it was admitted with, where partially), counted as the flavor assigner counts it
    (``queues.workloads.usage_of``: its pods too where the ClusterQueue covers them)."""
    cq = config.cluster_queues.get(cluster_queue)  # (as the scenario's edits left it)
    covered = {r for group in cq.spec.resource_groups for r in group.covered_resources} if cq is not None else set()
    pod_sets = jobs.with_counts(wl.pod_sets, counts or {})
    usage = usage_of(pod_sets, flavors, covered)
    if usage is None:  # (a covered resource the commit gave no flavor: counted as far as it goes)
        usage = usage_of(pod_sets, flavors, ()) or {}
    return Admission(cluster_queue, flavors, usage, borrowing, dict(counts or {}))
