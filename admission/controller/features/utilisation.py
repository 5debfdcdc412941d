"""Reading GPU utilisation from a Prometheus-compatible API (dcgm-exporter's series).

Why through Prometheus: dcgm-exporter runs on every GPU node and Prometheus (or Thanos, Mimir,
VictoriaMetrics: anything serving ``/api/v1/query``) already scrapes it in a GPU cluster; asking it
for each series' mean over a window is one request however many GPUs there are, and the
controller needs no access to the nodes.

Each look asks two instant queries per window, ``avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE[w])``
and ``avg_over_time(DCGM_FI_DEV_GPU_UTIL[w]) / 100``, each averaged per pod by Prometheus, and
joins the answers to pods (``queues.gpus.gpu_metrics``). The ledger's read (``with_memory``) also
asks for each pod's busiest GPU's memory: its peak, mean and size (``DCGM_FI_DEV_FB_USED`` and
``_FB_FREE``, for right-sizing). When runs end, ``measure`` asks for their whole
intervals with range queries of the same series (``query_range``, POSTed: the pods' names are
in the query; past a thousand pods, every pod's series, which costs Prometheus less than a regex
of thousands of names), batched: runs of a like length share one query whose step is about a
sixtieth of their length (at least a second), so ten thousand runs ending in a minute are a few
requests.
A Prometheus that is down, slow (``timeout``) or answers something
that is not a query result raises ``Unavailable`` with what went wrong: the caller reclaims
nothing on it (missing data is unknown, never idle) and says so in readiness and a metric.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from queues.gpus import gpu_health
from queues.gpus.gpu_health import ECC_DBE, ROW_REMAP_FAILURE, XID_ERRORS, Fault
from queues.gpus.gpu_metrics import (
    ENGINE_ACTIVE,
    FB_FREE,
    FB_USED,
    GPU_UTIL,
    Memory,
    PodKey,
    Reading,
    Samples,
    combine,
    combine_ranges,
    memory,
)

POD_LABELS = "namespace, pod, exported_namespace, exported_pod"  # what ``queues.gpus.gpu_metrics.pod_of`` reads


POD = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
MAX_POINTS = 10_000  # points per series one range query may ask for (Prometheus refuses above 11,000)
POINTS_PER_RUN = 60  # a run is measured at about this many points: its length / 60, at least a second
MAX_NAMED = 1_000  # pods one range query names; a batch with more asks for every pod's series
LARGE = 1 << 20  # bytes of an answer decoded in a thread rather than on the event loop


@dataclass(frozen=True, slots=True)
class RunWindow:
    """A run that ended: its ledger row (workload id), its pods, and when it ran (wall seconds)."""

    row_id: int
    pods: frozenset[PodKey]
    since: float
    until: float

    @property
    def step(self) -> float:
        """The query step it is measured at: a power of two seconds near a sixtieth of its length."""
        return float(2 ** max(0, math.ceil(math.log2(max(1.0, (self.until - self.since) / POINTS_PER_RUN)))))


@dataclass(frozen=True, slots=True)
class RunFigures:
    """What a run's whole interval shows: its mean utilisation and its GPU memory (None: no point)."""

    busy: float | None
    memory: Memory | None


def batches(runs: Sequence[RunWindow]) -> list[tuple[float, list[RunWindow]]]:
    """Runs grouped by step, each group cut so that its window is at most ``MAX_POINTS`` steps."""
    by_step: dict[float, list[RunWindow]] = {}
    for run in sorted(runs, key=lambda r: r.since):
        by_step.setdefault(run.step, []).append(run)
    out: list[tuple[float, list[RunWindow]]] = []
    for step, group in sorted(by_step.items()):
        batch: list[RunWindow] = []
        until = 0.0  # the latest end in the batch
        for run in group:
            if batch and (max(run.until, until) - batch[0].since) / step > MAX_POINTS:
                out.append((step, batch))
                batch, until = [], 0.0
            batch.append(run)
            until = max(until, run.until)
        out.append((step, batch))
    return out


def _for_pods(metrics: Sequence[str], names: str | None) -> str:
    """The sum of ``metrics`` for the pods the regex ``names`` names, by ``exported_pod`` or by
    ``pod`` (where the scrape honours the exporter's labels); every pod's with None."""
    if names is None:
        return " + ".join(metrics)
    exported = " + ".join(f'{m}{{exported_pod=~"{names}"}}' for m in metrics)
    own = " + ".join(f'{m}{{pod=~"{names}"}}' for m in metrics)
    return f"({exported}) or ({own})"


def _figures(batch: Sequence[RunWindow], *results: list[Any]) -> dict[int, RunFigures]:
    """Each run's figures from the four range queries' results (in a thread: it is the bulk of
    the work when thousands of runs end)."""
    active, util, used, total = results
    samples: Samples = combine_ranges(active, util)
    samples.add_memory(used, total)
    out: dict[int, RunFigures] = {}
    for run in batch:
        figures = RunFigures(
            samples.run_mean(run.pods, run.since, run.until), samples.run_memory(run.pods, run.since, run.until)
        )
        if figures.busy is not None or figures.memory is not None:
            out[run.row_id] = figures
    return out


class Unavailable(Exception):
    """Prometheus could not be read; the message says why (for readiness and logs)."""


class Prometheus:
    def __init__(self, url: str, *, timeout: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def read(self, window: float, *, with_memory: bool = False) -> Reading:
        """Each pod's mean utilisation over the last ``window`` seconds (and, ``with_memory``, its
        busiest GPU's memory: peak, mean and size)."""
        span = f"{max(1, round(window))}s"
        # averaged per pod by Prometheus (a pod's GPUs are one figure anyway): the answer carries
        # four labels a series instead of a dozen, a third of the bytes to send and parse
        by = f"avg by ({POD_LABELS})"
        queries = [
            f"{by} (avg_over_time({ENGINE_ACTIVE}[{span}]))",
            f"{by} (avg_over_time({GPU_UTIL}[{span}])) / 100",
        ]
        if with_memory:
            top = f"max by ({POD_LABELS})"
            queries += [
                f"{top} (max_over_time({FB_USED}[{span}]))",
                f"{top} (avg_over_time({FB_USED}[{span}]))",
                f"{top} (max_over_time({FB_USED}[{span}]) + max_over_time({FB_FREE}[{span}]))",
            ]
        results = await asyncio.gather(*(self._query(q) for q in queries))
        reading = combine(results[0], results[1])
        if with_memory:
            reading.memory = memory(results[2], results[3], results[4])
        return reading

    async def faults(self) -> dict[str, list[Fault]]:
        """Each node's GPUs' fatal faults now (``queues.gpus.gpu_health``): the last Xid, uncorrectable
        ECC errors and row-remap failures of every GPU reporting one."""
        xids, dbe, remap = await asyncio.gather(
            self._query(f"{XID_ERRORS} > 0"), self._query(f"{ECC_DBE} > 0"), self._query(f"{ROW_REMAP_FAILURE} > 0")
        )
        return gpu_health.faults(xids, dbe, remap)

    async def measure(self, runs: Sequence[RunWindow]) -> dict[int, RunFigures]:
        """Each ended run's mean utilisation and GPU memory over its whole interval (row id ->
        figures); a run none of whose pods has a point in it is left out (unknown, never idle)."""
        out: dict[int, RunFigures] = {}
        for step, batch in batches(runs):
            # (pod names are DNS subdomains: only a dot needs escaping, as \\. inside a PromQL string)
            pods_named = {pod for run in batch for _, pod in run.pods if POD.match(pod)}
            names = "|".join(sorted(pod.replace(".", "\\\\.") for pod in pods_named))
            if not names:
                continue
            start, end = min(r.since for r in batch), max(r.until for r in batch)
            window = {"start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}s"}
            by, top = f"avg by ({POD_LABELS})", f"max by ({POD_LABELS})"
            # past MAX_NAMED pods, every pod's series: a regex of thousands of names costs
            # Prometheus more than the larger answer costs here
            named = names if len(pods_named) <= MAX_NAMED else None
            active, util, used, total = await asyncio.gather(
                self._query(f"{by} ({_for_pods([ENGINE_ACTIVE], named)})", window),
                self._query(f"{by} ({_for_pods([GPU_UTIL], named)}) / 100", window),
                self._query(f"{top} ({_for_pods([FB_USED], named)})", window),
                self._query(f"{top} ({_for_pods([FB_USED, FB_FREE], named)})", window),
            )
            out.update(await asyncio.to_thread(_figures, batch, active, util, used, total))
        return out

    async def _query(self, query: str, window: dict[str, str] | None = None) -> list[Any]:
        """An instant query (a vector), or with ``window`` a range query (a matrix), POSTed."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
        path, kind = ("query", "vector") if window is None else ("query_range", "matrix")
        shown = query if len(query) < 300 else query[:300] + "..."
        try:
            async with self._session.post(
                f"{self.url}/api/v1/{path}", data={"query": query, **(window or {})}
            ) as response:
                if response.status != 200:
                    text = (await response.text())[:200]
                    raise Unavailable(f"{self.url} answered {response.status} to {shown}: {text}")
                raw = await response.read()
            # (a large answer is decoded off the event loop: ten thousand runs' points take seconds)
            body = json.loads(raw) if len(raw) < LARGE else await asyncio.to_thread(json.loads, raw)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise Unavailable(f"{self.url}: {type(exc).__name__}: {exc}".rstrip(": ")) from exc
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, dict) or body.get("status") != "success" or data.get("resultType") != kind:
            raise Unavailable(f"{self.url} did not answer {shown} with a {kind}: {str(body)[:200]}")
        result = data.get("result")
        return result if isinstance(result, list) else []
