"""Fault injection for the simulated API server: what a flaky real one does to its clients.

Latency, 500s and 429s (with Retry-After), 409 conflicts on updates, 403s while RBAC "loads",
watch events that lag their writes, and (``ApiServer.drop_watches``) watches cut: every client
of the simulated cluster, the controller first, must survive them as it would a real server's.
Seeded, so a failing run repeats.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from random import Random

from aiohttp import web

from admission.sim.server.objects import ApiError


@dataclass(slots=True)
class Faults:
    """Fault injection for tests: what a flaky API server does to its clients. Seeded, so repeatable."""

    latency: float = 0.0  # seconds added to every request
    error_rate: float = 0.0  # share of API requests answered 500 or 429 (with Retry-After)
    conflict_rate: float = 0.0  # share of updates refused with 409 Conflict
    # seconds a watch event reaches its watchers after the write that made it: a real API server's
    # watch cache lags the write's own answer by a few milliseconds, so a client often holds a
    # write's answer before the events of earlier writes by others
    watch_delay: float = 0.0
    # resources (plurals) whose requests are refused with 403, as a real server does while it loads
    # its RBAC cache after a restart or before a Role is applied; tests change it while running
    forbidden: set[str] = field(default_factory=set)
    seed: int = 0
    random: Random = field(init=False)

    def __post_init__(self) -> None:
        self.random = Random(self.seed)


async def inject(faults: Faults, request: web.Request) -> None:
    """What ``faults`` do to one request: added latency, then (API paths only) a 403 while RBAC
    "loads", a 500 or 429, a 409 on an update; nothing when none is due."""
    if faults.latency:
        await asyncio.sleep(faults.latency)
    if not request.path.startswith(("/api/", "/apis/")):
        return
    if faults.forbidden and request.path.rstrip("/").rpartition("/")[2] in faults.forbidden:
        raise ApiError(403, "Forbidden", f"{request.path} is forbidden (injected: RBAC not loaded yet)")
    if faults.error_rate and faults.random.random() < faults.error_rate:
        if faults.random.random() < 0.5:
            raise ApiError(
                429,
                "TooManyRequests",
                "the server has received too many requests and has asked us to try again later",
                details={"retryAfterSeconds": 1},
            )
        raise ApiError(500, "InternalError", "an error on the server (injected) has prevented the request")
    if request.method in ("PUT", "PATCH") and faults.conflict_rate and faults.random.random() < faults.conflict_rate:
        raise ApiError(
            409,
            "Conflict",
            "Operation cannot be fulfilled: the object has been modified; please "
            "apply your changes to the latest version and try again (injected)",
        )
