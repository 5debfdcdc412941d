"""The enactor: drive each job to its workload's state, one job at a time, level-triggered.

It compares a job (as the informers last saw it) with its workload in the current term and
patches the difference, through a work queue that handles each job serially and retries with
backoff. An admitted workload's job is unsuspended with its flavors' node labels and
tolerations merged into its pod templates, once no evicted job still runs in its quota tree
(Kueue releases a victim's quota only when its pods are gone; Turnstile keeps the books at
once but starts the preemptor only then, so no GPU is ever double-booked). Whether a victim has
stopped is read from its pods, not its job's status: a real Job's ``status.terminating`` is absent
before Kubernetes 1.29 and can stick at 1 with 1.28's alpha gate, while a deleted pod holds its
GPUs for its whole grace period. A victim admitted again (on another flavor, in the same step)
stays a victim until the pods of its previous run are gone: neither it nor its preemptor starts
before then. No event says when pods without a job status are gone, so a stopping job is looked
at again every ``POLL_SECONDS``. A pending
workload's job is suspended first (a running Job's template cannot change), then its own
scheduling directives are restored and the admission mark removed. Everything it needs is
derived from the store and the cluster, so after a restart it converges the same way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection

from admission.controller import elastic_pods
from admission.controller.features import pinning
from admission.controller.features.inventory import NodeInventory
from admission.controller.pod_set_infos import own_infos, pod_counts, run_infos, unplaced
from admission.controller.term import Term, admission_token
from admission.controller.watch.jobcache import JobCache
from admission.controller.workqueue import Retry, WorkQueue
from admission.jobs.base import JobView, PodRef, PodSetInfo
from admission.jobs.job_fields import ADMISSION_ANNOTATION
from admission.jobs.pods import POD
from admission.kube import client as kube_client
from admission.kube.client import Kube, KubeError, Obj
from queues.model import Workload
from queues.placement.pinning import WORKLOAD_ANNOTATION, PodSlot, pinned_node, rank_of
from queues.podsets import pods

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0  # a job whose pods still stop is looked at again this often (its status may not say)


class Enactor:
    def __init__(
        self,
        kube: Kube,
        *,
        jobs: JobCache,
        current_term: Callable[[], Term | None],
        workers: int,
        on_waiting: Callable[[str, list[str] | None], None] = lambda key, victims: None,
        inventory: NodeInventory | None = None,
        poll: float = POLL_SECONDS,
        ungated: Callable[[str, str, bool, float], None] = lambda gate, cluster_queue, group, seconds: None,
    ) -> None:
        self.kube = kube
        self.ungated = ungated  # told (gate, ClusterQueue, in a pod group, seconds since admission) per pod let go
        self.poll = poll  # seconds between looks at a stopping job's pods (scaled like the backoffs)
        self.listed_at: dict[str, float] = {}  # stopping job -> when its pods were last listed (monotonic)
        self.inventory = inventory  # the nodes plain pods placed by topology are pinned to
        self.jobs = jobs  # the controller's memory of jobs (its informers and our writes keep it)
        self.current_term = current_term
        # an admitted workload waits for these preempted workloads' pods to stop (None: no longer)
        self.on_waiting = on_waiting
        self.said_waiting: dict[str, tuple[str, ...]] = {}
        self.queue = WorkQueue(self.enact, workers=workers, name="enact")
        self.patches = 0

    def start(self) -> None:
        self.queue.start()

    async def stop(self) -> None:
        await self.queue.stop()

    def request(self, key: str) -> None:
        self.queue.request(key)

    def view(self, key: str) -> JobView | None:
        return self.jobs.view(key)

    def mark_stopping(self, term: Term, key: str) -> bool:
        """If ``key``'s job runs but its workload is not admitted (or not under this admission),
        its tree is stopping: no admission there starts until its pods are gone."""
        wl = term.scheduler.workloads.get(key)
        view = self.view(key)
        if wl is None or view is None or not self.running(key):
            return False
        held = term.held(key)
        token = admission_token(held) if held is not None else None
        if token is not None and (view.admission is None or view.admission == token):
            return False
        tree = term.tree_of(held or wl)
        if tree is not None:
            term.stopping[key] = tree
        return tree is not None

    async def check_stopped(self, term: Term, key: str) -> bool:
        """Whether the pods of ``key``'s evicted run are gone; if so it is no longer stopping and the
        admissions waiting on its tree look again, else it is looked at again in ``POLL_SECONDS``."""
        if key not in term.stopping:
            return True
        if await self._pods_run(key):
            self.queue.request_after(key, self.poll)
            return False
        tree = term.stopping.pop(key, None)
        for other, t in list(term.blocked.items()):
            if t == tree:
                self.request(other)
        return True

    def running(self, key: str) -> bool:
        view = self.view(key)
        return view is not None and not view.finished and (view.active or not view.suspended)

    async def _pods_run(self, key: str) -> bool:
        """Whether any pod of ``key``'s job may still hold capacity: a plain pod workload's own pods
        (its informer sees them until they are gone), else, for a suspended, finished or deleted job,
        a pod in its namespace that names the workload (``turnstile.dev/workload``) or is owned by
        the job and has not ended, terminating or not. An unanswered list counts as running."""
        view = self.view(key)
        if view is not None and view.pods is not None:
            return self.running(key)
        if view is not None and not view.finished and not view.suspended:
            return True
        now = time.monotonic()
        if self.running(key) and now - self.listed_at.get(key, -self.poll) < self.poll:
            return True  # its status says so too: listed again at most once a poll (a status can stick)
        self.listed_at[key] = now
        namespace = key.partition("/")[0]
        # (its own pods, and those of its parts: a RayJob's submitter Job's, which carry no annotation)
        owners = {view.uid, *self.jobs.parts.get(view.uid, ())} if view is not None else set()
        token: str | None = None
        try:
            while True:
                page = await self.kube.request("GET", PODS.path(namespace), query={"limit": 500, "continue": token})
                for pod in page.get("items") or []:
                    if _runs_for(pod, key, owners):
                        return True
                token = (page.get("metadata") or {}).get("continue") or None
                if not token:
                    self.listed_at.pop(key, None)
                    return False
        except KubeError as exc:
            log.warning("%s: cannot tell whether its pods are gone (%s); it counts as running", key, exc)
            return True

    async def enact(self, key: str) -> None:
        """Drive one job to its workload's state (see the module docstring)."""
        term = self.current_term()
        if term is None:
            return  # the next term reconciles every job
        if not term.valid():
            term.park(self.queue.request, key)  # (not acting on a possibly stale term: once the lease is renewed)
            return
        view = self.view(key)
        row = term.by_key.get(key)
        wl = term.scheduler.workloads.get(key)
        if view is None or view.finished or view.info is None or row is None or row.uid != view.uid or wl is None:
            await self.check_stopped(term, key)  # (a victim that finished or was deleted: its pods may still stop)
            return
        held = term.held(key)  # only what is committed may reach the cluster
        token = admission_token(held) if held is not None else None
        if view.pods is not None:
            await self._enact_pods(term, key, view, held, token)
            return
        own, own_counts = own_infos(wl, view), pod_counts(wl, None)
        if token is None or (view.admission is not None and view.admission != token):
            # Pending (or running under an admission that is no more): suspend first, then restore.
            term.blocked.pop(key, None)
            self.mark_stopping(term, key)
            if not view.suspended:
                # Suspend only: a running Job's template cannot change. The admission mark stays
                # until the restore, so a job without it always carries its own directives.
                await self._patch(view, view.integration.patch(view, suspend=True, infos=(), admission=view.admission))
                return
            await self.check_stopped(term, key)
            if view.admission is not None or not view.carries(own, own_counts):
                await self._restore(view, own, own_counts)
            return
        if not view.suspended:
            if view.info.elastic and held is not None:  # (its pods start up to its admitted count)
                running = held

                def victims_gone() -> bool:
                    return not self._victims_running(term, key, running, say=False)

                if await elastic_pods.ungate(self.kube, view, held, victims_gone):
                    self.queue.request_after(key, self.poll)
            return  # running as admitted
        if not await self.check_stopped(term, key):
            return  # admitted again while the pods of its previous run still stop: it waits for them too
        assert held is not None and held.admission is not None
        if self._victims_running(term, key, held):
            return  # pods of an evicted job still hold this tree's capacity; its events wake us
        infos, counts = run_infos(term, held, held.admission), pod_counts(held, held.admission)
        if not view.integration.pins_pods:
            infos = [unplaced(info) for info in infos]  # (its pods are not pinned: see docs/topology.md)
        if view.integration.external is not None and not view.carries(infos):
            # (written while it is suspended, as Trainer requires; its answer brings us back here)
            await self._patch(view, view.integration.patch(view, suspend=None, infos=infos, admission=token))
            return
        if view.started and not view.carries(infos):
            await self._clear_start_time(view)
        patch = view.integration.patch(view, suspend=False, infos=infos, admission=token, counts=counts)
        await self._patch(view, patch)

    async def _enact_pods(self, term: Term, key: str, view: JobView, held: Workload | None, token: str | None) -> None:
        """The same for a pod workload, which cannot be suspended: a pending one's running pods
        are deleted (their owner, if any, makes new ones, which queue afresh); an admitted one's
        gated pods are ungated, each with its pod set's directives and the admission mark."""
        assert view.pods is not None
        if token is None or (view.admission is not None and view.admission != token):
            term.blocked.pop(key, None)
            self.mark_stopping(term, key)
            for pod in view.pods:
                if pod.running:
                    await self._pod_write(view, "DELETE", pod)
            await self.check_stopped(term, key)
            return
        waiting = [pod for pod in view.pods if pod.gated and pod.live]
        if not waiting:
            return  # every pod runs as admitted
        if not await self.check_stopped(term, key):
            return
        assert held is not None and held.admission is not None
        if self._victims_running(term, key, held):
            return
        infos = {info.name: info for info in run_infos(term, held, held.admission)}
        nodes = self._pins(term, held, view.pods)
        for pod in waiting:
            info = infos.get(pod.pod_set) or next(iter(infos.values()))
            notes = {**info.annotations, ADMISSION_ANNOTATION: token}
            selector = dict(info.node_selector)
            if info.topology_gate:
                if pod.name not in nodes or self.inventory is None:
                    continue  # no slot left for it in the placement: it stays held
                selector.update(pinning.node_selector(self.inventory, nodes[pod.name]))
            patch = pods.ungate_patch(pod.obj, selector, info.tolerations, notes)
            if await self._pod_write(view, "PATCH", pod, patch) and held.started_at is not None:
                waited = time.time() - held.started_at  # (a group's pods are named apart from it)
                self.ungated(pods.GATE, held.admission.cluster_queue, view.name != pod.name, waited)

    def _pins(self, term: Term, held: Workload, group: tuple[PodRef, ...]) -> dict[str, str]:
        """Pod name -> node, for the held pods of ``held``'s pod sets placed by topology."""
        assert held.admission is not None
        if self.inventory is None or not held.admission.placement:
            return {}
        hosts = self.inventory.hosts()
        out: dict[str, str] = {}
        for pod_set in held.admission.placement:
            slots = [
                PodSlot(p.name, rank_of(pods.labels_of(p.obj), pods.annotations_of(p.obj)), None)
                if p.gated
                else PodSlot(p.name, (), pinned_node(p.obj.get("spec") or {}, hosts), p.live)
                for p in group
                if p.pod_set == pod_set
            ]
            out.update(pinning.assign(term, self.inventory, held, pod_set, slots))
        return out

    async def _pod_write(self, view: JobView, method: str, pod: PodRef, patch: list[Obj] | None = None) -> bool:
        """Delete or patch one pod of ``view``; False if it was gone (or replaced) already."""
        path = PODS.path(view.namespace, pod.name)
        try:
            if method == "DELETE":  # only the pod we mean, not one re-created under its name
                body = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": pod.uid}}
                await self.kube.request("DELETE", path, body=body)
            else:
                await self.kube.request("PATCH", path, body=patch, content_type=kube_client.JSON_PATCH)
        except KubeError as exc:
            if exc.status == 404 or (exc.status == 409 and method == "DELETE"):
                return False  # gone, or replaced by another of its name: its events say what to do next
            if exc.temporary:
                raise Retry(str(exc), after=exc.retry_after) from exc
            _refused(f"Pod {view.namespace}/{pod.name}", exc)
            raise Retry(f"{exc} (looking again)") from exc
        self.patches += 1
        return True

    def _victims_running(self, term: Term, key: str, held: Workload, *, say: bool = True) -> bool:
        """Whether pods of workloads preempted in ``held``'s quota tree still run (then it waits,
        and their events wake it): no GPU is ever double-booked. ``say``: tell the step it waits
        (its Workload object says ``Preempting``); not for an elastic job's growth, whose running
        pods go on under its admission while only the added ones wait."""
        tree = term.tree_of(held)
        victims = sorted(k for k, t in term.stopping.items() if t == tree and k != key) if tree else []
        if tree is not None and victims:
            term.blocked[key] = tree
            if say:
                self._waiting(key, tuple(victims))
            return True
        term.blocked.pop(key, None)
        if not say:
            return False
        if key in term.announce:  # a preemptor whose victims are gone: it is admitted now (said once)
            term.announce.discard(key)
            self.said_waiting.pop(key, None)
            self.on_waiting(key, None)
        else:
            self._waiting(key, ())
        return False

    def _waiting(self, key: str, victims: tuple[str, ...]) -> None:
        """Say (once per change) what an admitted workload waits for before its job may start."""
        if self.said_waiting.get(key, ()) == victims:
            return
        if victims:
            self.said_waiting[key] = victims
        else:
            self.said_waiting.pop(key, None)
        self.on_waiting(key, list(victims) or None)

    async def _restore(self, view: JobView, own: list[PodSetInfo], counts: dict[str, int]) -> None:
        if view.started:
            await self._clear_start_time(view)
        await self._patch(view, view.integration.patch(view, suspend=None, infos=own, admission=None, counts=counts))

    async def _clear_start_time(self, view: JobView) -> None:
        """As Kueue does: a suspended Job whose controller has not yet cleared status.startTime
        cannot take new scheduling directives; clear it (the Job controller sets it again on start)."""
        ref = view.integration.ref
        try:
            await self._write(
                view,
                "PATCH",
                ref.path(view.namespace, view.name, "status"),
                {"status": {"startTime": None}},
                kube_client.MERGE_PATCH,
            )
        except KubeError as exc:
            if exc.status != 404:
                raise Retry(str(exc), after=exc.retry_after) from exc

    async def _patch(self, view: JobView, patch: list[Obj]) -> None:
        ref = view.integration.ref
        try:
            await self._write(view, "PATCH", ref.path(view.namespace, view.name), patch, kube_client.JSON_PATCH)
        except KubeError as exc:
            if exc.status == 404:
                return  # the job is gone; its DELETED event releases the workload
            if exc.temporary:
                raise Retry(str(exc), after=exc.retry_after) from exc
            _refused(f"{ref.kind} {view.key}", exc)
            raise Retry(f"{exc} (looking again)") from exc
        self.patches += 1

    async def _write(self, view: JobView, method: str, path: str, body: object, content_type: str) -> None:
        """One write to the job; its answer becomes the job's view, and watch events older than it
        are skipped until the watch catches up (``JobCache``), so no patch is computed twice from a
        job as it was before our own write."""
        self.jobs.writing(view.uid)
        answer: Obj | None = None
        try:
            answer = await self.kube.request(method, path, body=body, content_type=content_type)
        finally:
            self.jobs.wrote(view, answer)


PODS = POD.ref


def _refused(what: str, exc: KubeError) -> None:
    """Say which object the API server refused a write to, and why: a conflict (409, the object
    changed meanwhile) is routine and looked at again; anything else (422) is worth a warning."""
    level = logging.INFO if exc.status == 409 else logging.WARNING
    log.log(level, "%s: the API server refused the write (%s); looking at it again", what, exc)


def _runs_for(pod: Obj, key: str, owners: Collection[str]) -> bool:
    """Whether ``pod`` has not ended and belongs to workload ``key`` (its annotation) or is owned by
    one of ``owners`` (the job's uid and its parts')."""
    if pods.done(pod):
        return False
    meta = pod.get("metadata") or {}
    if (meta.get("annotations") or {}).get(WORKLOAD_ANNOTATION) == key:
        return True
    return any(o.get("uid") in owners for o in meta.get("ownerReferences") or [])
