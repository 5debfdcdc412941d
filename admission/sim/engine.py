"""``turnstile simulate --engine cluster``: a scenario run end to end by the real system.

Everything a production install has, in one process, over real connections
(``admission.sim.stack``: PostgreSQL, the simulated cluster, the webhook, the controller and,
where utilisation is measured, Prometheus). The scenario's timeline is played in wall time
(``time_scale`` wall seconds per scenario second): edits go through the store as ``turnstile
apply``/``delete`` would, jobs are created through the API server (the webhook suspends them),
cancellations delete the job. The simulated kubelet runs each job for its ``runtime``.

The report is built from what the controller committed (``workload_events``) by the same
``Recorder`` engine core uses, with times converted back to scenario seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import logging
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from admission.jobs import BY_KIND
from admission.jobs.pods import POD
from admission.kube import client as kube_client
from admission.kube.client import KubeError
from admission.policy import DEFAULT_POLICY, Policy
from admission.sim import efficiency
from admission.sim.operators import cluster as sim_cluster
from admission.sim.operators import dcgm
from admission.sim.replay import replay
from admission.sim.replica_names import ReplicaNames
from admission.sim.stack import ACTOR, NODES, Stack, fresh_database, running
from admission.store import config as config_store
from admission.store import database, deletion
from admission.store import workloads as store
from queues.efficiency import BUDGET_EXHAUSTED, Trace
from queues.podsets import kuberay, serving
from queues.simulation import scenario_edits
from queues.simulation.scenario import Edit, JobEntry, Part, Scenario
from queues.simulation.simulator import Recorder, Result

log = logging.getLogger(__name__)


QUIET_SECONDS = 1.0  # wall seconds without a decision, after the timeline, before a stuck run ends
SETTLE_LIMIT = 5.0  # wall seconds an input waits at most for the system to settle from the ones before


DEPLOYMENTS = kube_client.ResourceRef("apps/v1", "Deployment", "deployments")
SERVING = {
    (api_version, kind): kube_client.ResourceRef(api_version, kind, f"{kind.lower()}s")
    for api_version, kind in serving.KINDS
}  # (their plurals are their lowercased kinds plus "s")


SCALED_FIELDS = ("parallelism", "workerGroupSpecs", "rayClusterConfig", "rayClusterSpec")  # (what a scale edit sets)
RAYCLUSTERS = kube_client.ResourceRef("ray.io/v1", "RayCluster", "rayclusters")


def _autoscaled_cluster(obj: kube_client.Obj) -> str | None:
    """The RayCluster an elastic, autoscaling RayJob or RayService runs on (KubeRay made it), else None."""
    kind = str(obj.get("kind"))
    return kuberay.made_cluster_name(kind, obj) if kuberay.autoscales(kind, obj) else None


def _ref(entry: JobEntry) -> kube_client.ResourceRef:
    """Where the object a timeline entry creates lives in the API."""
    made = SERVING.get((str(entry.object.get("apiVersion")), str(entry.object.get("kind"))))
    if made is not None:
        return made
    if (entry.job.api_version, entry.job.kind) == ("v1", "Pod"):
        return POD.ref
    return BY_KIND[(entry.job.api_version, entry.job.kind)].ref


def _job_object(entry: JobEntry, part: Part, trace: Trace | None = None, memory: Trace | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = efficiency.with_utilization({k: v for k, v in part.object.items() if k != "status"}, trace)
    obj = efficiency.with_gpu_memory(obj, memory)
    meta = dict(obj.get("metadata") or {})
    meta["namespace"] = entry.job.namespace
    if not entry.serves:  # (serving workloads run until they are stopped)
        meta["annotations"] = {**(meta.get("annotations") or {}), sim_cluster.RUNTIME_ANNOTATION: str(part.runtime)}
    obj["metadata"] = meta
    return obj


class Driver:
    """Plays the timeline against a running stack and records what happened."""

    def __init__(self, scenario: Scenario, stack: Stack, *, time_scale: float) -> None:
        self.scenario = scenario
        self.stack = stack
        self.scale = time_scale
        self.record = Recorder(scenario)
        self.refused: dict[str, str] = {}  # jobs the API server refused: key -> its message
        self.pending_deletes: list[asyncio.Task[None]] = []
        self.late: list[tuple[float, float]] = []  # inputs that waited for the system: (scenario time, wall seconds)
        self.names = ReplicaNames.of(stack.host.server.store, scenario.jobs)  # Deployments' replicas
        self.t0 = 0.0
        self.wall0 = dt.datetime.now(dt.UTC)

    def now(self) -> float:
        """Scenario seconds since the timeline started."""
        return max(0.0, (time.monotonic() - self.t0) / self.scale) if self.t0 else 0.0

    def scenario_time(self, at: dt.datetime) -> float:
        return round(max(0.0, (at - self.wall0).total_seconds() / self.scale), 1)

    async def play(self, on_progress: Callable[[float], None] | None = None) -> Result:
        # every object a job entry stands for (a pod group's pods), each at its own time
        actions: list[tuple[float, int, int, tuple[JobEntry, Part] | Edit]] = [
            (part.at, 3, part.index, (e, part)) for e in self.scenario.jobs for part in e.objects
        ]
        actions += [(e.at, 2, e.index, e) for e in self.scenario.edits]
        actions.sort(key=lambda a: a[:3])
        self.t0 = time.monotonic()
        self.wall0 = dt.datetime.now(dt.UTC)
        self.stack.controller.features.budgets.anchor = self.wall0.timestamp()  # (budget periods start at t=0)
        self.names.start()
        observed: list[tuple[float, int, int, Any]] = []  # (t, phase, order, what)
        instant: float | None = None
        for at, phase, index, action in actions:
            delay = self.t0 + at * self.scale - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if at != instant:
                # Engine core's cycles run until nothing changes before time moves on (scenario.md's
                # timing rules): a loaded machine must not let an input overtake what the one before
                # it caused. Rarely waits: inputs are far apart in wall time (the waits are counted).
                instant = at
                waited = await self.stack.settle(limit=SETTLE_LIMIT)
                if waited > 0.005:
                    self.late.append((at, waited))
            if on_progress is not None:
                on_progress(at)
            if isinstance(action, tuple) and not action[0].creates:  # another entry's object makes it
                observed.append((action[0].at, phase, action[0].index, action[0]))
            elif isinstance(action, tuple):
                entry, part = action
                try:
                    trace = self.scenario.utilization.get(entry.job.key)
                    memory = self.scenario.gpu_memory.get(entry.job.key)
                    obj = _job_object(entry, part, trace, memory)
                    await self.stack.kube.create(_ref(entry), entry.job.namespace, obj)
                except KubeError as exc:
                    if exc.status >= 500 or exc.status == 429:
                        raise  # the cluster failed, not the job
                    self.refused[entry.job.key] = exc.message  # reported, as a user would see it
                    continue
                complete = (part.at, part.index) == max((p.at, p.index) for p in entry.objects)
                if complete and entry.replicas is None:  # (a Deployment's replicas: ``self.names``)
                    observed.append((entry.at, phase, entry.index, entry))  # its workload is complete
            else:
                await self._edit(action)
                observed.append((at, phase, index, action))
        if self.late:
            log.info(
                "%s: %d of the timeline's instants waited for the system to settle (at most %.2f s, at t=%s)",
                self.scenario.name,
                len(self.late),
                max(w for _, w in self.late),
                ", ".join(f"{t:g}" for t, _ in self.late[:10]),
            )
        rows = await self._wait_until_done()
        async with database.transaction(self.stack.controller.sessions) as session:
            history = await store.events(session)
        await self.names.stop()
        for made in self.names.made:  # each replica made, at its time, in order
            self.record.add(made.replica)
            t = round(max(0.0, (made.at - self.t0) / self.scale), 1)
            observed.append((t, 3, 1_000_000 + len(observed), made.replica))
        return self._replay(observed, history, {self.names.name(k): v for k, v in rows.items()})

    async def _edit(self, edit: Edit) -> None:
        sessions = self.stack.controller.sessions
        if edit.kind == "Node":  # as kubectl cordon / uncordon / delete node
            if edit.action == "gpuXid":  # (its GPUs report it through the simulated dcgm-exporter)
                value = str(edit.xid) if edit.xid else None
                body: dict[str, Any] = {"metadata": {"annotations": {dcgm.XID_ANNOTATION: value}}}
                with contextlib.suppress(KubeError):
                    await self.stack.kube.patch(NODES, None, edit.name, body)
            elif edit.action == "delete":
                with contextlib.suppress(KubeError):
                    await self.stack.kube.delete(NODES, None, edit.name)
            else:
                body = {"spec": {"unschedulable": edit.action == "cordon"}}  # (kubectl cordon's patch)
                with contextlib.suppress(KubeError):
                    await self.stack.kube.patch(NODES, None, edit.name, body)
            return
        if edit.action == "scale":
            namespace, name = edit.name.split("/", 1)
            scaled = next(e for e in self.scenario.jobs if e.job.key == edit.name)
            if scaled.replicas is not None:  # a Deployment
                await self.stack.kube.patch(DEPLOYMENTS, namespace, name, {"spec": {"replicas": edit.replicas}})
            else:  # a batch Job's parallelism, a Ray worker group (its autoscaler's write): a patch
                with contextlib.suppress(KubeError):  # (finished or gone: nothing to scale, as in engine core)
                    ref, current = _ref(scaled), await self.stack.kube.get(_ref(scaled), namespace, name)
                    made = _autoscaled_cluster(current)
                    if made is not None:  # (an autoscaling Ray job: the autoscaler scales its cluster)
                        ref, name = RAYCLUSTERS, made
                        current = await self.stack.kube.get(ref, namespace, name)
                    scaled_spec = scenario_edits.scaled(current, edit)["spec"]
                    patch = {"spec": {k: v for k, v in scaled_spec.items() if k in SCALED_FIELDS}}
                    await self.stack.kube.patch(ref, namespace, name, patch)
            return
        if edit.action == "cancel":
            namespace = edit.name.split("/", 1)[0]
            entry = next((e for e in self.scenario.jobs if e.job.key == edit.name), None)
            for part in entry.objects if entry is not None else ():
                assert entry is not None
                with contextlib.suppress(KubeError):
                    await self.stack.kube.delete(_ref(entry), namespace, str(part.object["metadata"]["name"]))
            return
        async with database.transaction(sessions) as session:
            if edit.action == "apply":
                assert edit.obj is not None
                await config_store.apply(session, [edit.obj], actor=ACTOR)
                return
        if edit.kind != "ClusterQueue":  # a scenario deletes a flavor or LocalQueue at once, as the core
            with contextlib.suppress(config_store.NotFound):
                async with database.transaction(sessions) as session:
                    await deletion.delete_object(session, edit.kind, edit.name, actor=ACTOR, guard=False)
            return
        try:
            async with database.transaction(sessions) as session:
                await deletion.delete_object(session, edit.kind, edit.name, actor=ACTOR)
        except config_store.Refused:
            # A ClusterQueue with admitted work terminates: it admits nothing more and goes once drained.
            async with database.transaction(sessions) as session:
                await deletion.mark_deleting(session, edit.name)
            self.pending_deletes.append(asyncio.create_task(self._delete_when_drained(edit)))
        except config_store.NotFound:
            pass

    async def _delete_when_drained(self, edit: Edit) -> None:
        while True:
            await asyncio.sleep(0.05)
            with contextlib.suppress(config_store.Refused):
                async with database.transaction(self.stack.controller.sessions) as session:
                    await deletion.delete_object(session, edit.kind, edit.name, actor=ACTOR)
                return

    async def _wait_until_done(self) -> dict[str, tuple[str, str | None, str | None]]:
        """Every job finished or cancelled; or nothing running, none waiting out a backoff or for a
        budget's next period, and no decision for a while (the rest can't fit)."""
        last_event, quiet_since = 0, time.monotonic()
        cancelled = {e.name for e in self.scenario.edits if e.action == "cancel"}
        last_action = max([e.at for e in self.scenario.jobs] + [e.at for e in self.scenario.edits], default=0.0)
        while True:
            async with database.transaction(self.stack.controller.sessions) as session:
                rows = await store.workload_states(session)
                newest = await store.last_event_id(session)
                backing_off = await store.next_requeue(session) is not None
                progressed, ready_running = await store.last_progress(session)
            # only waitForPodsReady's endless evict-and-requeue loop left: ended as engine core ends it
            progress = max(last_action, self.scenario_time(progressed) if progressed else 0.0)
            looping = self.scenario.pods_ready.enable and not ready_running  # (disabled: nothing loops)
            if looping and self.now() > progress + self.scenario.pods_ready.horizon:
                return rows
            # a Deployment's replicas serve until stopped: the run ends once nothing else is open
            serving = set(self.names.by_pod) | {e.job.key for e in self.scenario.jobs if e.regroups}
            open_jobs = [k for k, (state, _, _) in rows.items() if state != "Finished" and k not in cancelled | serving]
            missing = [
                e.job.key
                for e in self.scenario.jobs
                if e.job.key not in rows and e.job.key not in cancelled and e.replicas is None
            ]
            # a workload waiting out a backoff, or held by a budget until its next period, will be decided on
            held = any(state == "Pending" and reason == BUDGET_EXHAUSTED for state, reason, _ in rows.values())
            if newest != last_event or backing_off or held:
                last_event, quiet_since = newest, time.monotonic()
            running = [k for k in open_jobs if rows[k][0] == "Admitted"]
            replicas = [k for k in serving if k in rows and rows[k][0] != "Finished"]
            if not open_jobs and not missing and not replicas and all(t.done() for t in self.pending_deletes):
                return rows
            if not running and time.monotonic() - quiet_since > QUIET_SECONDS + 50 * self.scale:
                return rows
            await asyncio.sleep(0.05)

    def _replay(
        self,
        observed: list[tuple[float, int, int, Any]],
        history: list[store.EventRow],
        rows: dict[str, tuple[str, str | None, str | None]],
    ) -> Result:
        timeline: list[tuple[float, int, int, Any]] = list(observed)
        pods = {e.job.key for e in self.scenario.jobs if e.job.kind == "Pod" and not e.regroups}
        pods |= set(self.names.by_pod)
        for e in history:
            if e.type == "Finished" and e.reason != "JobFinished" and e.workload not in pods:
                continue  # a deleted job: its cancellation is already on the timeline
            # (an evicted pod is deleted by the controller: that deletion ends its workload)
            phase = 1 if e.type == "Finished" else 4
            if e.workload in self.names.by_pod or e.by in self.names.by_pod:  # a replica's pod: its scenario name
                e = dataclasses.replace(e, workload=self.names.name(e.workload), by=e.by and self.names.name(e.by))
            timeline.append((self.scenario_time(e.at), phase, e.id, e))
        result = replay(self.scenario, self.record, timeline, rows, cycles=self.stack.controller.steps.count)
        if self.scenario.reclaim or self.scenario.budgets:
            result.efficiency = efficiency.summary(
                self.stack.controller,
                self.scenario,
                result.events,
                wall0=self.wall0.timestamp(),
                time_scale=self.scale,
            )
        result.refused = dict(self.refused)
        result.tracks = [t for t in result.tracks if t.entry.job.key not in self.refused]
        return result


async def simulate(
    scenario: Scenario,
    *,
    time_scale: float = 0.02,
    database_url: str | None = None,
    on_progress: Callable[[float], None] | None = None,
    watch: Callable[[Driver], Coroutine[Any, Any, None]] | None = None,
    policy: Policy = DEFAULT_POLICY,
) -> Result:
    """Run ``scenario`` through the whole system and report it as engine core does.

    ``watch`` (a live view) runs beside the timeline and is cancelled when the run ends.
    """
    with tempfile.TemporaryDirectory(prefix="turnstile-sim-") as tmp:
        workdir = Path(tmp)
        async with (
            fresh_database(database_url, workdir) as url,
            running(scenario, url, workdir, time_scale=time_scale, policy=policy) as stack,
        ):
            driver = Driver(scenario, stack, time_scale=time_scale)
            watcher = asyncio.create_task(watch(driver)) if watch is not None else None
            try:
                return await driver.play(on_progress)
            finally:
                if watcher is not None:
                    watcher.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await watcher
