"""The ledger's started and used GPU-hours, as the leader sees jobs run and reads DCGM.

The usage ledger's rows are quota *held* (``admission.store.usage``). Two more measures come from
what the controller observes, and this module turns observations into ledger updates:

- *started*: a held workload's job is running when Kubernetes shows it unsuspended under its
  current admission (``turnstile.dev/admission`` on the job, or on a plain pod group's pods). The
  first step that sees it so stamps the open rows' ``running_at``; the wait for an admission check
  or for preempted workloads to stop is therefore held but not started. A new term sees every
  running job again; the store keeps the first stamp.
- *used*: every utilisation read (``admission.controller.reclaim`` reads Prometheus whenever
  ``TURNSTILE_PROMETHEUS_URL`` is set, policy or not) gives each pod's mean utilisation since the
  last read. A running workload whose pods have figures adds the part of that span it ran to its
  rows' ``measured_seconds``, and that times its mean to ``busy_seconds``. A workload without
  figures adds nothing: missing data is unknown, never idle.

The step drains both into one fenced transaction after its commit (``Steps._save_meter``); a
failed write ends the term as any failed write does, and the next term starts over from what the
store holds (a read lost that way is unmeasured, never counted twice).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from admission.controller.jobcache import JobCache
from admission.controller.term import Term, admission_token
from queues.gpu_metrics import PodKey, Reading


@dataclass(slots=True)
class Span:
    """One utilisation read: each pod's mean over ``[since, until]`` (wall seconds)."""

    reading: Reading
    since: float
    until: float


@dataclass(slots=True)
class Meter:
    jobs: JobCache
    pods_of: Callable[[str], Iterable[PodKey]]
    running: dict[str, tuple[str, float]] = field(default_factory=dict)  # key -> (admission token, running since)
    stamps: dict[str, float] = field(default_factory=dict)  # key -> running since: to store
    spans: list[Span] = field(default_factory=list)  # reads not yet accounted
    _term: Term | None = None

    def observe(self, term: Term, uids: Iterable[str], now: float) -> None:
        """Look at jobs that changed (all of them when the term is new): which now run."""
        if term is not self._term:
            self._term, self.running, self.stamps = term, {}, {}
            uids = [row.uid for row in term.by_key.values()]
        for uid in uids:
            row = term.rows.get(uid)
            if row is None:
                continue
            held = term.held(row.key)
            token = admission_token(held) if held is not None else None
            view = self.jobs.views.get(uid)
            if token is None or view is None or view.suspended or view.admission != token:
                if token is None or (row.key in self.running and self.running[row.key][0] != token):
                    self.running.pop(row.key, None)
                continue
            if self.running.get(row.key, ("", 0.0))[0] != token:
                self.running[row.key] = (token, now)
                self.stamps[row.key] = now

    def read(self, span: Span) -> None:
        """A utilisation read arrived (the next step accounts it)."""
        self.spans.append(span)

    def drain(self, term: Term) -> tuple[list[tuple[int, float]], list[tuple[int, float, float]]]:
        """What to store: (row id, running since) of newly running workloads, and (row id, seconds
        measured, busy seconds) from the reads since the last drain."""
        stamps = [(row.id, at) for key, at in self.stamps.items() if (row := term.by_key.get(key)) is not None]
        self.stamps = {}
        measured: dict[int, list[float]] = {}
        spans, self.spans = self.spans, []
        for span in spans:
            for key, (token, since) in list(self.running.items()):
                held = term.held(key)
                row = term.by_key.get(key)
                if held is None or row is None or admission_token(held) != token:
                    del self.running[key]  # (released or admitted again: a new run, seen anew)
                    continue
                seconds = span.until - max(span.since, since)
                mean = span.reading.mean(self.pods_of(key)) if seconds > 0 else None
                if mean is None:
                    continue
                acc = measured.setdefault(row.id, [0.0, 0.0])
                acc[0] += seconds
                acc[1] += seconds * mean
        return stamps, [(row_id, s, busy) for row_id, (s, busy) in measured.items()]
