"""Reading GPU utilisation from a Prometheus-compatible API (dcgm-exporter's series).

Why through Prometheus: dcgm-exporter runs on every GPU node and Prometheus (or Thanos, Mimir,
VictoriaMetrics: anything serving ``/api/v1/query``) already scrapes it in a GPU cluster; asking it
for each series' mean over a window is one request however many GPUs there are, and the
controller needs no access to the nodes.

Each look asks two instant queries per window, ``avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE[w])``
and ``avg_over_time(DCGM_FI_DEV_GPU_UTIL[w]) / 100``, each averaged per pod by Prometheus, and
joins the answers to pods (``queues.gpu_metrics``). A Prometheus that is down, slow (``timeout``) or answers something
that is not a query result raises ``Unavailable`` with what went wrong: the caller reclaims
nothing on it (missing data is unknown, never idle) and says so in readiness and a metric.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from queues.gpu_metrics import ENGINE_ACTIVE, GPU_UTIL, Reading, combine

POD_LABELS = "namespace, pod, exported_namespace, exported_pod"  # what ``queues.gpu_metrics.pod_of`` reads


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

    async def read(self, window: float) -> Reading:
        """Each pod's mean utilisation over the last ``window`` seconds."""
        span = f"{max(1, round(window))}s"
        # averaged per pod by Prometheus (a pod's GPUs are one figure anyway): the answer carries
        # four labels a series instead of a dozen, a third of the bytes to send and parse
        by = f"avg by ({POD_LABELS})"
        active, util = await asyncio.gather(
            self._query(f"{by} (avg_over_time({ENGINE_ACTIVE}[{span}]))"),
            self._query(f"{by} (avg_over_time({GPU_UTIL}[{span}])) / 100"),
        )
        return combine(active, util)

    async def _query(self, query: str) -> list[Any]:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
        try:
            async with self._session.get(f"{self.url}/api/v1/query", params={"query": query}) as response:
                if response.status != 200:
                    text = (await response.text())[:200]
                    raise Unavailable(f"{self.url} answered {response.status} to {query}: {text}")
                body = await response.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise Unavailable(f"{self.url}: {type(exc).__name__}: {exc}".rstrip(": ")) from exc
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, dict) or body.get("status") != "success" or data.get("resultType") != "vector":
            raise Unavailable(f"{self.url} did not answer {query} with a vector: {str(body)[:200]}")
        result = data.get("result")
        return result if isinstance(result, list) else []
