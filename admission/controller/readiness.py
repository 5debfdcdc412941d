"""Readiness and health: named checks, what gates ``/readyz``, and the database's reachability.

``/readyz`` is what the Deployment's readiness probe asks, so it decides whether the API server
routes admission reviews to this replica. It is therefore the *webhook's* readiness: the
replica is not shutting down, serves a certificate the published ``caBundle`` trusts, and has a
queue configuration to answer from. The webhook answers from memory, so a database outage must
not take it away (with ``failurePolicy: Fail`` that would refuse every queued job's creation in
the cluster while the database is down). The scheduler's own state (database reachable,
informers listed, leading or standing by) is reported beside it, not gated on:
``/readyz?verbose`` lists every check as Kubernetes' own endpoints do (``[+]name ok`` /
``[-]name failed: why``), and ``/readyz/NAME`` answers for one check.

``DatabaseHealth`` records whether the database answered lately; an outage is logged once when
it starts (with its cause) and once when it ends (with its length), not on every retry.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

Probe = Callable[[], str | None]  # None: fine; else why not, in a few words


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    probe: Probe
    gates: bool  # part of /readyz, or only reported
    detail: Callable[[], str] | None = None  # said after "ok" in the verbose report


class Readiness:
    def __init__(self) -> None:
        self.checks: list[Check] = []
        self.stopping = False
        self.add("shutdown", lambda: "shutting down" if self.stopping else None, gates=True)

    def add(self, name: str, probe: Probe, *, gates: bool, detail: Callable[[], str] | None = None) -> None:
        self.checks = [c for c in self.checks if c.name != name] + [Check(name, probe, gates, detail)]

    def failing(self, *, gating_only: bool = True) -> list[tuple[str, str]]:
        out = []
        for check in self.checks:
            if gating_only and not check.gates:
                continue
            why = check.probe()
            if why is not None:
                out.append((check.name, why))
        return out

    def ready(self) -> bool:
        """What ``/readyz`` answers: every gating check passes."""
        return not self.failing()

    def all_ok(self) -> bool:
        """Every check passes, reported ones too (the whole replica is up: tests, ``sim up``)."""
        return not self.failing(gating_only=False)

    def report(self) -> list[str]:
        """``/readyz?verbose``: a line per check; reported-only checks say so."""
        lines = []
        for check in self.checks:
            why = check.probe()
            note = "" if check.gates else " (reported, not gating readiness)"
            if why is None:
                said = f": {check.detail()}" if check.detail is not None else ""
                lines.append(f"[+]{check.name} ok{said}{note}")
            else:
                lines.append(f"[-]{check.name} failed: {why}{note}")
        return lines

    def check(self, name: str) -> str | bool | None:
        """One check's answer: None fine, a reason, or False when there is no such check."""
        for check in self.checks:
            if check.name == name:
                return check.probe()
        return False


class DatabaseHealth:
    """Whether the database answered lately; outages logged once each way."""

    def __init__(self) -> None:
        self.ok = False
        self.ever = False
        self.down_since: float | None = None
        self.cause = "not contacted yet"

    def succeeded(self) -> None:
        if not self.ok and self.down_since is not None:
            log.warning("database reachable again after %.1fs", time.monotonic() - self.down_since)
        self.ok, self.ever, self.down_since, self.cause = True, True, None, ""

    def failed(self, doing: str, cause: str) -> None:
        if self.ok or self.down_since is None:
            log.warning(
                "database unreachable while %s: %s; the webhook keeps answering from memory, scheduling waits",
                doing,
                cause,
            )
            self.down_since = time.monotonic()
        self.ok, self.cause = False, f"{doing}: {cause}"

    def probe(self) -> str | None:
        return None if self.ok else self.cause
