"""The ledger's started and used GPU-hours, as the leader sees jobs run and reads DCGM.

The usage ledger's rows are quota *held* (``admission.store.usage``). Two more measures come from
what the controller observes, and this module turns observations into ledger updates:

- *started*: a held workload's job is running when Kubernetes shows it unsuspended under its
  current admission (``turnstile.dev/admission`` on the job, or on a plain pod group's pods). The
  first step that sees it so stamps the open rows' ``running_at`` with that moment (stored with
  the next commit, ``capability.STAMPS_WAIT`` at most later); the wait for an admission check
  or for preempted workloads to stop is therefore held but not started. A new term sees every
  running job again; the store keeps the first stamp.
- *used*: every utilisation read (``admission.controller.features.reclaim`` reads Prometheus whenever
  ``TURNSTILE_PROMETHEUS_URL`` is set, policy or not) gives each pod's mean utilisation since the
  last read. A running workload whose pods have figures adds the part of that span it ran to its
  rows' ``measured_seconds``, and that times its mean to ``busy_seconds``. A workload without
  figures adds nothing: missing data is unknown, never idle. The same read gives each pod's
  busiest GPU's memory (peak, mean, size): the run's rows keep the peak and size and add the
  time covered and that time times the mean (right-sizing, ``queues.gpus.rightsizing``).

- *used, exactly, when a run ends*: the periodic reads measure a run to the read, and a run shorter
  than a read not at all. When a run ends (its workload released, evicted or admitted anew), its
  pods and interval are kept (``ended``); the next read asks Prometheus for its whole interval
  (``utilisation.Prometheus.measure``), and the run's rows get that: measured for all the time
  they ran, busy by the mean, GPU memory by the run's (``store.usage.set_run_measured``),
  replacing what the periodic reads had added. A run with no point in Prometheus keeps what it
  had (unknown, never idle).

A step looks at the jobs that changed before it decides, and stores the runs it saw start in its
own fenced transaction, before its decisions (so a run this step's eviction ends was stamped
running first, and an admission this step makes is not stamped by a run of the one before); what
the reads measured goes into a transaction of its own after the commit. A failed write ends the
term as any failed write does, and the next term starts over from what the store holds (a read
lost that way is unmeasured, never counted twice). Stamping in the step's own transaction saves
a transaction (its begin, ping, fence check and commit) per step while jobs start (issue 32).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from admission.controller.capability import STAMPS_WAIT, Capability, StepContext
from admission.controller.features.utilisation import RunFigures, RunWindow
from admission.controller.term import Term, admission_token, timestamp
from admission.controller.watch.jobcache import JobCache
from admission.store import database, lease
from admission.store import usage as ledger
from admission.store.usage import Measurement
from queues.cycle.decisions import Decision
from queues.gpus.gpu_metrics import Memory, PodKey, Reading, memory_of

MAX_ENDED = 100_000  # ended runs waiting to be measured (Prometheus away): the oldest are dropped beyond
TRIES = 3  # reads a run with no points yet is asked for again (its last samples may not be scraped yet)


@dataclass(slots=True)
class Span:
    """One utilisation read: each pod's mean over ``[since, until]`` (wall seconds)."""

    reading: Reading
    since: float
    until: float


@dataclass(slots=True)
class Run:
    """A workload's job running under one admission: since when, its ledger row, the pods seen."""

    token: str
    since: float
    row_id: int
    pods: set[PodKey] = field(default_factory=set)


@dataclass(slots=True)
class Meter:
    jobs: JobCache
    pods_of: Callable[[str], Iterable[PodKey]]
    running: dict[str, Run] = field(default_factory=dict)  # workload key -> its run
    stamps: dict[str, float] = field(default_factory=dict)  # key -> running since: to store
    spans: list[Span] = field(default_factory=list)  # reads not yet accounted
    ended: dict[RunWindow, int] = field(default_factory=dict)  # runs to measure whole -> tries left
    exact: list[tuple[RunWindow, RunFigures]] = field(default_factory=list)  # (run, its figures): to store
    early: dict[str, set[PodKey]] = field(default_factory=dict)  # pods seen before their run was
    # workloads whose committed state changed since the last drain (the term tells, ``Term.listeners``):
    # only their runs can have ended; looking at every run each step cost O(running) per step
    changed: set[str] = field(default_factory=set)
    _term: Term | None = None

    def observe(self, term: Term, uids: Iterable[str], now: float) -> None:
        """Look at jobs that changed (all of them when the term is new): which now run."""
        if term is not self._term:
            self._term, self.running, self.stamps = term, {}, {}
            self.changed.clear()
            term.listeners.append(self.changed.add)
            uids = [row.uid for row in term.by_key.values()]
        for uid in uids:
            row = term.rows.get(uid)
            if row is None:
                continue
            held = term.held(row.key)
            token = admission_token(held) if held is not None else None
            view = self.jobs.views.get(uid)
            run = self.running.get(row.key)
            if token is None or view is None or view.suspended or view.admission != token:
                if run is not None and (token is None or run.token != token):
                    self._end(row.key, now)
                continue
            if run is None or run.token != token:
                if run is not None:
                    self._end(row.key, now)
                self.running[row.key] = run = Run(token, now, row.id, self.early.pop(row.key, set()))
                self.stamps[row.key] = now
            run.pods.update(self.pods_of(row.key))

    def pod_seen(self, key: str, pod: PodKey) -> None:
        """A live pod of workload ``key`` was seen (``inventory.NodeInventory``): part of its run,
        or of the run about to be seen (kept until the next drain if its workload is held)."""
        run = self.running.get(key)
        if run is not None:
            run.pods.add(pod)
        else:
            self.early.setdefault(key, set()).add(pod)

    def _end(self, key: str, now: float) -> None:
        """A run ended: measure it whole at the next read (pods looked up one last time)."""
        run = self.running.pop(key)
        run.pods.update(self.pods_of(key))
        if run.pods and now > run.since:
            self.ended[RunWindow(run.row_id, frozenset(run.pods), run.since, now)] = TRIES
            while len(self.ended) > MAX_ENDED:
                del self.ended[next(iter(self.ended))]

    def to_measure(self) -> list[RunWindow]:
        """The ended runs for the next read to measure whole."""
        return list(self.ended)

    def measured(self, asked: Iterable[RunWindow], found: dict[int, RunFigures]) -> None:
        """What a read found for ended runs (row id -> figures): kept for the next step to store;
        a run without points is asked again, a few times."""
        for run in asked:
            if run.row_id in found:
                self.exact.append((run, found[run.row_id]))
                self.ended.pop(run, None)
            elif run in self.ended:
                self.ended[run] -= 1
                if self.ended[run] <= 0:
                    del self.ended[run]

    def read(self, span: Span) -> None:
        """A utilisation read arrived (the next step accounts it)."""
        self.spans.append(span)

    def take_stamps(self, term: Term) -> list[tuple[int, float]]:
        """(row id, running since) of the runs seen starting, to store now; forgotten here."""
        stamps = [(row.id, at) for key, at in self.stamps.items() if (row := term.by_key.get(key)) is not None]
        self.stamps = {}
        return stamps

    def drain(self, term: Term, now: float) -> tuple[list[Measurement], list[tuple[RunWindow, RunFigures]]]:
        """What to store after a step's commit: what the reads since the last drain measured of
        running workloads, and ended runs measured whole (the runs seen starting were stored in the
        step's own transaction: ``take_stamps``)."""
        running = self.running
        for key in sorted((k for k in self.changed if k in running), key=lambda k: (running[k].since, k)):
            held = term.held(key)
            if held is None or term.by_key.get(key) is None or admission_token(held) != running[key].token:
                self._end(key, now)  # (released or admitted again: a new run, seen anew)
        self.changed.clear()
        measured: dict[int, _Sum] = {}
        spans, self.spans = self.spans, []
        for span in spans:
            for key, run in self.running.items():
                seconds = span.until - max(span.since, run.since)
                if seconds <= 0:
                    continue
                pods = self.pods_of(key)
                mean = span.reading.mean(pods)
                memory = memory_of(span.reading.memory, pods)
                if mean is None and memory is None:
                    continue
                run.pods.update(pods)
                measured.setdefault(run.row_id, _Sum()).add(seconds, mean, memory)
        self.early = {key: pods for key, pods in self.early.items() if term.held(key) is not None}
        exact, self.exact = self.exact, []
        return [total.measurement(row_id) for row_id, total in measured.items()], exact


@dataclass(slots=True)
class _Sum:
    """What the reads since the last drain measured of one run."""

    seconds: float = 0.0
    busy: float = 0.0
    memory_seconds: float = 0.0
    mib_seconds: float = 0.0
    memory: Memory | None = None

    def add(self, seconds: float, mean: float | None, memory: Memory | None) -> None:
        if mean is not None:
            self.seconds += seconds
            self.busy += seconds * mean
        if memory is not None:
            self.memory_seconds += seconds
            self.mib_seconds += seconds * memory.mean_mib
            self.memory = memory if self.memory is None else self.memory.merged(memory)

    def measurement(self, row_id: int) -> Measurement:
        peak = self.memory.peak_mib if self.memory else None
        total = self.memory.total_mib if self.memory else None
        return Measurement(row_id, self.seconds, self.busy, self.memory_seconds, self.mib_seconds, peak, total)


class Metering(Capability):
    """The meter as the kernel sees it (``admission.controller.capability``): before each step
    decides, the jobs that changed are looked at; the runs seen starting are stamped, with when they
    were seen, in the next step's transaction that commits, before its decisions (their ledger rows
    exist: their admission was committed by an earlier step), at most ``STAMPS_WAIT`` later; after
    the commit, what the utilisation reads measured and the runs that ended are stored in a fenced
    transaction of their own."""

    def __init__(self, meter: Meter, sessions: async_sessionmaker[AsyncSession]) -> None:
        self.meter = meter
        self.sessions = sessions

    def decide(self, step: StepContext) -> Sequence[Decision]:
        self.meter.observe(step.term, step.dirty, step.now)
        return ()

    def commit_due(self) -> float | None:
        first = min(self.meter.stamps.values(), default=None)  # (a stamp: it may wait for a commit)
        return None if first is None else first + STAMPS_WAIT

    async def write_before_decisions(self, session: AsyncSession, step: StepContext) -> None:
        running = self.meter.take_stamps(step.term)
        await ledger.set_running(session, [(row_id, timestamp(at)) for row_id, at in running])

    async def record(self, step: StepContext) -> None:
        term = step.term
        measured, exact = self.meter.drain(term, step.now)
        if not (measured or exact):
            return
        async with database.transaction(self.sessions) as session:
            await lease.check(session, term.fence)
            await ledger.add_measured(session, measured)
            await ledger.set_run_measured(
                session,
                [
                    ledger.RunMeasurement(run.row_id, timestamp(run.since), timestamp(run.until), f.busy, f.memory)
                    for run, f in exact
                ],
            )
