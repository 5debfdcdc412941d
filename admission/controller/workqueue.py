"""A work queue of object keys, as client-go's: each key handled by one worker at a time.

``request(key)`` marks a key dirty. Workers take keys in the order they were requested; a key
requested again while being handled is handled once more afterwards (never twice at once, so
per-object handling is serial while different objects proceed in parallel), and a key
requested many times while waiting is handled once. A handler that raises ``Retry`` is
called again after a per-key exponential backoff; any other exception is logged and the key
is retried the same way, so one bad object never stops the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

BACKOFF_START = 0.05
BACKOFF_MAX = 10.0


async def stop_workers(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel a pool of worker tasks and wait until each has stopped."""
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task


class Retry(Exception):
    """Handle this key again later (after ``after`` seconds, else the key's backoff)."""

    def __init__(self, why: str, *, after: float | None = None) -> None:
        super().__init__(why)
        self.after = after


class WorkQueue:
    def __init__(self, handler: Callable[[str], Awaitable[None]], *, workers: int = 16, name: str = "work") -> None:
        self.handler = handler
        self.name = name
        self.queue: asyncio.Queue[str] = asyncio.Queue()
        self.waiting: set[str] = set()  # in the queue
        self.running: set[str] = set()  # being handled
        self.again: set[str] = set()  # requested while running
        self.failures: dict[str, int] = {}
        self.timers: dict[str, asyncio.TimerHandle] = {}
        self.workers = workers
        self.tasks: list[asyncio.Task[None]] = []
        self.handled = 0

    def start(self) -> None:
        self.tasks = [asyncio.create_task(self._work(), name=f"{self.name}-{i}") for i in range(self.workers)]

    async def stop(self) -> None:
        for timer in self.timers.values():
            timer.cancel()
        self.timers.clear()
        await stop_workers(self.tasks)
        self.tasks = []

    def request(self, key: str) -> None:
        if key in self.running:
            self.again.add(key)
        elif key not in self.waiting:
            self.waiting.add(key)
            self.queue.put_nowait(key)

    def idle(self) -> bool:
        return not (self.waiting or self.running or self.timers)

    def request_after(self, key: str, delay: float) -> None:
        """Request ``key`` again in ``delay`` seconds (once: a later call while one waits is a no-op)."""
        self._later(key, delay)

    def _later(self, key: str, delay: float) -> None:
        if key in self.timers:
            return

        def fire() -> None:
            self.timers.pop(key, None)
            self.request(key)

        self.timers[key] = asyncio.get_running_loop().call_later(delay, fire)

    async def _work(self) -> None:
        while True:
            key = await self.queue.get()
            self.waiting.discard(key)
            self.running.add(key)
            try:
                await self.handler(key)
                self.failures.pop(key, None)
            except Retry as exc:
                self._retry(key, exc.after, str(exc), quiet=True)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.exception("%s: handling %s failed", self.name, key)
                self._retry(key, None, repr(exc), quiet=True)
            finally:
                self.handled += 1
                self.running.discard(key)
                if key in self.again:
                    self.again.discard(key)
                    self.request(key)

    def _retry(self, key: str, after: float | None, why: str, *, quiet: bool) -> None:
        n = self.failures[key] = self.failures.get(key, 0) + 1
        delay = after if after is not None else min(BACKOFF_MAX, BACKOFF_START * 2 ** (n - 1))
        if not quiet or n in (3, 10) or n % 50 == 0:
            log.warning("%s: %s failed %d times (%s); retrying in %.2fs", self.name, key, n, why, delay)
        self._later(key, delay)
