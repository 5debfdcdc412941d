"""What the controller learns about a workload between decisions: its reasons, checks and pods.

Why a pending workload waits (``set_reasons``) and why an admitted one's pods do
(``set_admitted_reasons``), its admission checks' states (``set_checks``, which also logs the start
of a workload whose checks all passed) and when its pods were Ready (``set_pods_ready``). These are
plain updates of the workload's row: no quota moves here.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from admission.store.queries import query

_SET_REASONS = query("state_set_reasons")


@dataclass(frozen=True, slots=True)
class CheckState:
    """Where a workload stands with its admission checks (two-phase admission)."""

    workload_id: int
    checks: tuple[str, ...]  # still to pass for the quota it holds
    retries: int
    requeue_at: dt.datetime | None  # waiting out a retry's backoff until then
    active: bool  # False: deactivated (a check rejected it)
    reason: str
    message: str
    started: bool = False  # its last check passed now: it is admitted (an Admitted event)


_SET_CHECKS = query("state_set_checks")
_STARTED_EVENTS = query("state_started_events")


async def set_checks(session: AsyncSession, states: Sequence[CheckState], now: dt.datetime) -> None:
    """Record where workloads stand with their admission checks; those whose last check passed
    are admitted now (their history's Admitted event)."""
    if not states:
        return
    await session.execute(
        _SET_CHECKS,
        {
            "id": [c.workload_id for c in states],
            "checks": [json.dumps(list(c.checks)) for c in states],
            "retries": [c.retries for c in states],
            "requeue_at": [c.requeue_at for c in states],
            "active": [c.active for c in states],
            "reason": [c.reason for c in states],
            "message": [c.message for c in states],
        },
    )
    started = [c.workload_id for c in states if c.started]
    if started:
        await session.execute(_STARTED_EVENTS, {"id": started, "now": now})


async def set_pods_ready(session: AsyncSession, ready: Sequence[tuple[int, dt.datetime]]) -> None:
    """waitForPodsReady: when every pod of these admitted workloads was first Ready (kept across
    restarts: a workload that was Ready and loses a pod has the recovery timeout, not the first one)."""
    if not ready:
        return
    await session.execute(_SET_PODS_READY, {"id": [wid for wid, _ in ready], "at": [at for _, at in ready]})


_SET_PODS_READY = query("state_set_pods_ready")


async def set_reasons(session: AsyncSession, reasons: Sequence[tuple[int, str, str, str | None]]) -> None:
    """Why each pending workload waits (id, reason, message, the ClusterQueue it waits in), for
    ``turnstile get/describe workload``."""
    if reasons:
        await session.execute(
            _SET_REASONS,
            {
                "id": [r[0] for r in reasons],
                "reason": [r[1] for r in reasons],
                "message": [r[2] for r in reasons],
                "cluster_queue": [r[3] for r in reasons],
            },
        )


_SET_ADMITTED_REASONS = query("state_set_admitted_reasons")


async def set_admitted_reasons(session: AsyncSession, reasons: Sequence[tuple[int, str, str]]) -> None:
    """What an admitted workload's job waits for before it starts (id, reason, message): e.g. its
    victims' pods to stop (``Preempting``), for ``turnstile get/describe workload``."""
    if reasons:
        await session.execute(
            _SET_ADMITTED_REASONS,
            {"id": [r[0] for r in reasons], "reason": [r[1] for r in reasons], "message": [r[2] for r in reasons]},
        )


async def clear_admitted_reason(session: AsyncSession, ids: Sequence[int], reason: str) -> None:
    """Clear admitted workloads' reason where it is still ``reason`` (what was waited for is over)."""
    if ids:  # (an array, not an IN list: a new leader clears with every admitted workload's id)
        await session.execute(_CLEAR_ADMITTED_REASON, {"ids": list(ids), "reason": reason})


_CLEAR_ADMITTED_REASON = query("state_clear_admitted_reason")
