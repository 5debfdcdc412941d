"""The controller's memory of jobs: one view per job, never older than the controller's own writes.

The informers feed it every job event; the enactor tells it about every write it makes to a job.
A write's answer is the job as it is right after the write, so the enactor's next decision is
taken from it. But watch events for changes made *before* that write (a status update by the
Job controller, say) may still be on their way, and taking them would put the view back in the
past: a restore patch would be computed again from a job that still carries the admission mark,
and sent twice (the second ``remove`` of a path already removed is a ``422 Invalid`` on a real
API server).

So, as client-go's controllers keep *expectations*, a write whose answer is not yet in the view
sets one: the resourceVersion it produced. Until the watch delivers that very version, events
for the job are older than the write and are skipped (a watch delivers every change of an object
in order, so the written version does come, and anything after it comes after it). Versions are
only ever compared for equality, as Kubernetes' API conventions require. An expectation is also
met by a deletion, by a relist that started after the write (a list is a consistent read), and,
as a last resort, by time (``EXPECTATION_SECONDS``). The event of the very version a view was read
from (the written version's own event, most often) is that object again: it marks the job changed
but is not read again.

A workload is named by its job's namespace and name (scenario.md), so two jobs of different kinds
with one name in one namespace (a Job and a JobSet ``train``) would share a workload key, and what
is decided for one would be done to the other: the second one's pods run on the first one's quota.
So one live job holds a key (``uid_of``): a job of another kind that comes while the holder lives
``waits`` for the key, is never queued, and is told why (``admission.controller.observation``,
whose store row decides who holds a key after a restart); when the holder goes, the waiting job
takes the key and is ``released`` to be looked at again. A job deleted and made again under its
name (the same kind) takes the key at once, as before.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Container
from dataclasses import dataclass, field

from admission.jobs.base import Integration, JobView
from admission.kube.client import Obj
from queues.model import SharedShapes
from queues.podsets import trainjobs
from queues.podsets.jobs import KINDS

log = logging.getLogger(__name__)

EXPECTATION_SECONDS = 60.0  # an expected version not seen by then is given up on (the watch broke)


@dataclass(slots=True)
class _Expectation:
    version: str  # the resourceVersion our write produced
    written: float  # monotonic time the write's answer came


@dataclass(slots=True)
class JobCache:
    views: dict[str, JobView] = field(default_factory=dict)  # job uid -> the job as last known
    uid_of: dict[str, str] = field(default_factory=dict)  # workload key (namespace/name) -> job uid
    shapes: SharedShapes = field(default_factory=SharedShapes)  # pod sets, one copy per job template
    expected: dict[str, _Expectation] = field(default_factory=dict)  # job uid -> our last write
    in_flight: dict[str, set[str]] = field(default_factory=dict)  # job uid -> versions seen during a write
    skipped: int = 0  # events older than one of our writes, not taken
    waiting: dict[str, str] = field(default_factory=dict)  # job uid -> the key another kind's live job holds
    released: list[str] = field(default_factory=list)  # waiting jobs that took their key since last asked
    runtimes: trainjobs.Runtimes | None = None  # a TrainJob's training runtime (``watch.runtimes``)
    # parent job uid -> the uids of its parts seen (kept after a part is deleted: a RayJob's submitter
    # Job goes before its pods, which still hold their node until they stop)
    parts: dict[str, set[str]] = field(default_factory=dict)
    # the enabled integrations' kinds: a job controlled by one of them is its part (``JobView.part``)
    owners: Container[tuple[str, str]] = field(default_factory=lambda: frozenset(KINDS))

    def view(self, key: str) -> JobView | None:
        uid = self.uid_of.get(key)
        return self.views.get(uid) if uid is not None else None

    def observe(self, integration: Integration, kind: str, obj: Obj, *, listed_since: float | None = None) -> bool:
        """A job event from an informer; False when it is older than one of our writes and skipped.

        ``listed_since``: the monotonic time the informer's current list began, when the event
        comes from a (re)list rather than the watch."""
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid"))
        version = str(meta.get("resourceVersion") or "")
        seen = self.in_flight.get(uid)
        if seen is not None:
            seen.add(version)
        expectation = self.expected.get(uid)
        if expectation is not None and kind != "DELETED" and version != expectation.version:
            relisted_after = listed_since is not None and listed_since > expectation.written
            expired = time.monotonic() - expectation.written > EXPECTATION_SECONDS
            if not relisted_after and not expired:
                self.skipped += 1
                return False
            if expired:
                log.debug("job %s: version %s of our write never came; taking %s", uid, expectation.version, version)
        self.expected.pop(uid, None)
        current = self.views.get(uid)
        if kind == "DELETED":
            self.drop(uid)
        elif version and current is not None and current.version == version and current.source is not None:
            pass  # (the version this view was read from, our write's echo most often: the same object)
        else:
            self.put(
                uid,
                integration.view(obj, self.shapes, self.runtimes, previous=current, owners=self.owners),
            )
        return True

    def put(self, uid: str, view: JobView) -> None:
        """The job (or pod workload, ``admission.controller.watch.podgroups``) as it now is. A part of
        another job (``JobView.part``) is never queued, so it never takes a workload key: KubeRay names
        a RayJob's submitter Job as the RayJob, and the RayJob keeps its key."""
        self.views[uid] = view
        if not view.part:
            holder = self.views.get(self.uid_of.get(view.key, uid))
            if holder is not None and holder.uid != uid and holder.integration.ref != view.integration.ref:
                self.waiting[uid] = view.key  # (another kind's live job holds the key)
            else:
                self.uid_of[view.key] = uid
                self.waiting.pop(uid, None)
        elif view.parent is not None:
            self.parts.setdefault(view.parent, set()).add(uid)

    def hold(self, uid: str) -> None:
        """Give ``uid``'s job its key (the store says the workload is its); a job that held it waits."""
        view = self.views.get(uid)
        if view is None or view.part or self.uid_of.get(view.key) == uid:
            return
        holder = self.uid_of.get(view.key)
        if holder is not None and holder in self.views:
            self.waiting[holder] = view.key
        self.uid_of[view.key] = uid
        self.waiting.pop(uid, None)

    def drop(self, uid: str) -> JobView | None:
        """The job is gone; its key is forgotten unless another job has taken it meanwhile, or given
        to a job of another kind that waited for it (``released``)."""
        view = self.views.pop(uid, None)
        self.waiting.pop(uid, None)
        if view is not None and self.uid_of.get(view.key) == uid:
            del self.uid_of[view.key]
            heir = next((u for u, key in self.waiting.items() if key == view.key), None)
            if heir is not None:
                self.hold(heir)
                self.released.append(heir)
        self.parts.pop(uid, None)  # (a parent gone: its parts' pods are looked for no more)
        return view

    def take_released(self) -> list[str]:
        """The jobs that took their key since last asked (to be looked at again)."""
        if not self.released:
            return []  # (every job event asks: most find none)
        out, self.released = self.released, []
        return out

    def writing(self, uid: str) -> None:
        """A write to the job begins: note the versions the watch delivers meanwhile."""
        self.in_flight[uid] = set()

    def wrote(self, view: JobView, answer: Obj | None) -> None:
        """The write ended; ``answer`` is the job as the API server returned it (None: it failed)."""
        seen = self.in_flight.pop(view.uid, set())
        if answer is None:
            return
        meta = answer.get("metadata") or {}
        version = str(meta.get("resourceVersion") or "")
        current = self.views.get(view.uid)
        if str(meta.get("uid")) != view.uid or current is None:
            return  # the job is gone (or was replaced by another of the same name)
        if version in seen or current.version == version:
            return  # the watch already brought this version (and maybe newer ones): the view is current
        self.views[view.uid] = view.integration.view(
            answer, self.shapes, self.runtimes, previous=current, owners=self.owners
        )
        self.expected[view.uid] = _Expectation(version, time.monotonic())
