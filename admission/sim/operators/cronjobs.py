"""The CronJob controller of the simulated cluster: a Job from ``spec.jobTemplate`` at each scheduled time.

As kube-controller-manager's (pkg/controller/cronjob): the Job is named ``<cronjob>-<scheduled
time in minutes since the epoch>``, carries the template's labels and annotations (so a
``kueue.x-k8s.io/queue-name`` in ``jobTemplate.metadata.labels`` queues every Job it makes) plus
``batch.kubernetes.io/cronjob-scheduled-timestamp``, is controlled by the CronJob, and is created
*through the API server*, so admission webhooks (Turnstile's) see it as on a real cluster. Only the
latest missed time is run (as the real controller, which skips to the most recent); ``suspend``
stops new Jobs; ``concurrencyPolicy: Forbid`` skips a time while a Job of the CronJob is active,
``Replace`` deletes the active ones first. ``status.lastScheduleTime`` and ``status.active`` are kept.

Schedules are the standard five fields (minute hour day-of-month month day-of-week: numbers,
``*``, ranges, lists, ``/`` steps) and the ``@hourly``-style macros, in UTC (``spec.timeZone`` is
refused by the simulated server's validation only if malformed; here every zone is UTC: a
difference written down in docs/simulated-cluster.md). Times are wall time, not scaled.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from admission.sim.server import resources
from admission.sim.server.objects import ApiError, Obj, clone

if TYPE_CHECKING:
    from admission.sim.operators.replicas import Replicas

log = logging.getLogger(__name__)

CRONJOBS = next(r for r in resources.BUILT_IN if r.plural == "cronjobs")
JOBS = next(r for r in resources.BUILT_IN if r.plural == "jobs")
SCHEDULED = "batch.kubernetes.io/cronjob-scheduled-timestamp"
USER = {"username": "system:serviceaccount:kube-system:cronjob-controller", "groups": ["system:serviceaccounts"]}
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 6))


class Schedule:
    """A parsed cron schedule; ``ValueError`` names what is wrong."""

    def __init__(self, text: str) -> None:
        fields = MACROS.get(text.strip(), text).split()
        if len(fields) != 5:
            raise ValueError(f"{text!r}: a schedule has 5 fields (minute hour day month weekday) or is @hourly etc.")
        self.sets = [_field(f, lo, hi) for f, (lo, hi) in zip(fields, _RANGES, strict=True)]
        self.any_day, self.any_weekday = fields[2] == "*", fields[4] == "*"
        self.sets[4] |= {0} if 7 in self.sets[4] else set()

    def matches(self, t: dt.datetime) -> bool:
        minute, hour, day, month, weekday = self.sets
        if t.minute not in minute or t.hour not in hour or t.month not in month:
            return False
        by_day, by_weekday = t.day in day, (t.isoweekday() % 7) in weekday
        if self.any_day or self.any_weekday:  # (cron: when either is restricted, either may match)
            return by_day and by_weekday
        return by_day or by_weekday

    def latest(self, after: dt.datetime, until: dt.datetime) -> dt.datetime | None:
        """The latest scheduled minute in (after, until], or None."""
        t = until.replace(second=0, microsecond=0)
        floor = after.replace(second=0, microsecond=0)
        steps = 0
        while t > floor and steps < 527_040:  # a year of minutes at most
            if self.matches(t):
                return t
            t -= dt.timedelta(minutes=1)
            steps += 1
        return None

    def next(self, after: dt.datetime) -> dt.datetime | None:
        t = after.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
        for _ in range(527_040 * 4):  # (29 February fits within four years)
            if self.matches(t):
                return t
            t += dt.timedelta(minutes=1)
        return None


def _field(text: str, lo: int, hi: int) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        body, _, step_text = part.partition("/")
        step = int(step_text) if step_text else 1
        if body == "*":
            start, end = lo, hi
        elif "-" in body:
            a, b = body.split("-", 1)
            start, end = int(a), int(b)
        else:
            start = int(body)
            end = hi if step_text else start
        if step < 1 or start < lo or end > (7 if hi == 6 else hi) or start > end:
            raise ValueError(f"{text!r}: out of range {lo}-{hi}")
        out.update(range(start, end + 1, step))
    return out


def _parse_time(text: object) -> dt.datetime | None:
    try:
        return dt.datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        return None


class CronJobs:
    """Reconciles CronJobs in the replica controllers' loop (``Replicas.register``)."""

    def __init__(self, replicas: Replicas, clock: Callable[[], dt.datetime] | None = None) -> None:
        self.replicas = replicas
        self.clock = clock or (lambda: dt.datetime.now(dt.UTC))
        self.timers: dict[str, asyncio.TimerHandle] = {}
        replicas.register(CRONJOBS, self.reconcile)

    async def reconcile(self, cron: Obj) -> None:
        meta, spec = cron["metadata"], cron.get("spec") or {}
        namespace, name = meta["namespace"], meta["name"]
        try:
            schedule = Schedule(str(spec.get("schedule") or ""))
        except ValueError as exc:
            log.info("CronJob %s/%s: %s", namespace, name, exc)
            return
        store = self.replicas.store
        status = cron.setdefault("status", {})
        jobs = [
            j
            for j in store.list(JOBS, namespace)[0]
            if any(
                r.get("uid") == meta["uid"] and r.get("controller") for r in j["metadata"].get("ownerReferences") or []
            )
        ]
        active = [j for j in jobs if not _finished(j)]
        now = self.clock()
        since = _parse_time(status.get("lastScheduleTime")) or _parse_time(meta.get("creationTimestamp")) or now
        due = schedule.latest(since, now)
        if due is not None and not spec.get("suspend"):
            policy = spec.get("concurrencyPolicy") or "Allow"
            if policy == "Forbid" and active:
                due = None  # skipped: the real controller waits for the active Job
            else:
                if policy == "Replace":
                    for job in active:
                        await self._delete(job)
                    active = []
                created = await self._create(cron, due)
                if created is not None:
                    active.append(created)
                status["lastScheduleTime"] = due.strftime("%Y-%m-%dT%H:%M:%SZ")
        status["active"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "namespace": namespace, "name": j["metadata"]["name"],
             "uid": j["metadata"]["uid"]}
            for j in active
        ]  # fmt: skip
        with contextlib.suppress(ApiError):  # (changed meanwhile: its event reconciles it again)
            store.replace(CRONJOBS, namespace, name, cron, subresource="status")
        self._wake_at(cron, schedule.next(now))

    async def _create(self, cron: Obj, at: dt.datetime) -> Obj | None:
        template = cron["spec"].get("jobTemplate") or {}
        tmeta = template.get("metadata") or {}
        meta = cron["metadata"]
        body = {
            "metadata": {
                "name": f"{meta['name']}-{int(at.timestamp() // 60)}",
                "labels": dict(tmeta.get("labels") or {}),
                "annotations": {**(tmeta.get("annotations") or {}), SCHEDULED: at.strftime("%Y-%m-%dT%H:%M:%SZ")},
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "CronJob",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": clone(template.get("spec") or {}),
        }
        try:
            created, _ = await self.replicas.api.create(JOBS, meta["namespace"], body, user=USER)
        except ApiError as exc:
            if exc.code != 409:  # (409: made already at this time)
                log.info("CronJob %s/%s could not create its Job: %s", meta["namespace"], meta["name"], exc.message)
            return None
        return created

    async def _delete(self, job: Obj) -> None:
        try:
            self.replicas.store.delete(JOBS, job["metadata"]["namespace"], job["metadata"]["name"])
        except ApiError:
            return

    def _wake_at(self, cron: Obj, at: dt.datetime | None) -> None:
        key = f"{cron['metadata']['namespace']}/{cron['metadata']['name']}"
        timer = self.timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        if at is None:
            return
        delay = max(0.0, (at - self.clock()).total_seconds()) + 0.01
        self.timers[key] = asyncio.get_running_loop().call_later(
            delay, self.replicas.mark, CRONJOBS, cron["metadata"]["namespace"], cron["metadata"]["name"]
        )


def _finished(job: Obj) -> bool:
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )
