"""The enactor's work queue (``admission.controller.workqueue``) on fake time: retries and their
backoff, one handler per key at a time, requests coalesced. ``looptime`` runs the event loop on a
virtual clock, so a ten-second backoff takes no wall time and every instant is exact (times are
taken from each test's start)."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from admission.controller.workqueue import BACKOFF_MAX, BACKOFF_START, Retry, WorkQueue

# A loop of its own per test: on the session's loop, tasks earlier tests left running keep real time going
pytestmark = [pytest.mark.looptime, pytest.mark.asyncio(loop_scope="function")]


class Recorder:
    """A handler that notes when each key is handled, failing its first ``failures[key]`` calls."""

    def __init__(self, failures: dict[str, int] | None = None, *, takes: float = 0.0, error: type = Retry) -> None:
        self.failures = dict(failures or {})
        self.takes = takes  # virtual seconds one handling lasts
        self.error = error
        self.calls: list[tuple[str, float]] = []
        self.running: set[str] = set()
        self.overlaps: list[str] = []  # keys found running twice at once (must stay empty)
        self.most_at_once = 0
        self.start = asyncio.get_running_loop().time()

    async def __call__(self, key: str) -> None:
        loop = asyncio.get_running_loop()
        if key in self.running:
            self.overlaps.append(key)
        self.running.add(key)
        self.most_at_once = max(self.most_at_once, len(self.running))
        self.calls.append((key, loop.time() - self.start))
        try:
            if self.takes:
                await asyncio.sleep(self.takes)
            if self.failures.get(key, 0) > 0:
                self.failures[key] -= 1
                raise self.error("not yet")
        finally:
            self.running.discard(key)

    def times(self, key: str) -> list[float]:
        return [t for k, t in self.calls if k == key]


async def _drain(queue: WorkQueue, seconds: float) -> None:
    await asyncio.sleep(seconds)
    await queue.stop()


def _gaps(times: list[float]) -> list[float]:
    return [round(b - a, 6) for a, b in itertools.pairwise(times)]


async def test_a_failing_key_is_retried_with_a_doubling_backoff_until_it_succeeds() -> None:
    handler = Recorder({"job": 5})
    queue = WorkQueue(handler, workers=2)
    queue.start()
    queue.request("job")
    await _drain(queue, 5)
    assert len(handler.times("job")) == 6  # five failures, then the success
    assert _gaps(handler.times("job")) == [BACKOFF_START * 2**n for n in range(5)]
    assert queue.failures == {}  # a success forgets the failures


async def test_the_backoff_stops_growing_at_its_maximum() -> None:
    handler = Recorder({"job": 12})
    queue = WorkQueue(handler, workers=1)
    queue.start()
    queue.request("job")
    await _drain(queue, 100)
    gaps = _gaps(handler.times("job"))
    assert gaps[-3:] == [BACKOFF_MAX] * 3 and max(gaps) == BACKOFF_MAX
    assert len(gaps) == 12


async def test_a_retry_may_say_when_and_any_error_is_retried_like_a_retry() -> None:
    class Later(Recorder):
        async def __call__(self, key: str) -> None:
            await super().__call__(key)
            if len(self.times(key)) == 1:
                raise Retry("its pods are still stopping", after=7.0)

    later = Later()
    queue = WorkQueue(later, workers=1)
    queue.start()
    queue.request("job")
    await _drain(queue, 20)
    assert _gaps(later.times("job")) == [7.0]

    broken = Recorder({"job": 2}, error=RuntimeError)  # a bug in one object's handling
    queue = WorkQueue(broken, workers=1)
    queue.start()
    queue.request("job")
    await _drain(queue, 5)
    assert _gaps(broken.times("job")) == [BACKOFF_START, BACKOFF_START * 2]


async def test_one_handler_per_key_at_a_time_and_requests_while_it_runs_are_one_more_pass() -> None:
    handler = Recorder(takes=1.0)
    queue = WorkQueue(handler, workers=4)
    queue.start()
    for key in ("a", "b", "c"):
        queue.request(key)
    await asyncio.sleep(0.5)  # all three run now, in parallel
    for _ in range(5):
        queue.request("a")  # while "a" runs: handled once more, afterwards
    await _drain(queue, 5)
    assert handler.overlaps == []
    assert handler.most_at_once == 3
    assert [round(t, 6) for t in handler.times("a")] == [0.0, 1.0]
    assert len(handler.times("b")) == len(handler.times("c")) == 1


async def test_requests_for_a_waiting_key_are_coalesced_and_a_later_request_waits_its_delay() -> None:
    handler = Recorder(takes=1.0)
    queue = WorkQueue(handler, workers=1)
    queue.start()
    queue.request("busy")
    for _ in range(3):
        queue.request("waiting")  # queued behind "busy": three requests, one handling
    queue.request_after("later", 4.0)
    queue.request_after("later", 0.5)  # (one timer per key: the first stands)
    await _drain(queue, 10)
    assert len(handler.times("waiting")) == 1
    assert [round(t, 6) for t in handler.times("later")] == [4.0]


async def test_stopping_cancels_what_waits_for_a_retry_and_takes_no_wall_time() -> None:
    handler = Recorder({"job": 100})
    queue = WorkQueue(handler, workers=1)
    queue.start()
    queue.request("job")
    started = time.monotonic()
    await asyncio.sleep(60)
    await queue.stop()
    calls = len(handler.times("job"))
    await asyncio.sleep(60)
    assert len(handler.times("job")) == calls  # (nothing handled once stopped)
    assert queue.timers == {}
    assert time.monotonic() - started < 5  # (a minute of backoffs on the virtual clock)
