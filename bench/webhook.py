"""Webhook figures (``python -m bench webhook``): issue 6's latency at 200 AdmissionReviews/s and
the maximum sustainable rate.

The webhook runs as it does in a replica: ``WebhookServer`` over TLS, in a process of its own,
answering from the in-memory configuration of ``examples/gpu-teams.yaml``. This process plays
the API server: one kept-alive HTTPS connection pool, AdmissionReviews of a GPU Job alternating
between ``/mutate`` and ``/validate``.

- open loop at 200/s for 60 s: requests leave on schedule whether or not earlier ones have
  been answered (as an API server under load sends them), so a slow server shows as latency,
  not as a lower rate. Target: p99 <= 5 ms, no errors.
- maximum sustainable rate: 8 concurrent callers, back to back, for 10 s.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from admission.webhook import certs
from bench.procs import cpu_seconds, free_port

SERVER = """
import asyncio, sys
from pathlib import Path
import yaml
from aiohttp import web
from admission.webhook import certs
from admission.webhook.server import WebhookServer
from queues.kueue import api
from queues.model import Config

folder, port = Path(sys.argv[1]), int(sys.argv[2])
doc = yaml.safe_load(open(sys.argv[3]))
config = Config.of([codec.parse(m) for m in doc["manifests"]])
bundle = certs.read(folder)
web.run_app(WebhookServer(lambda: config).app, host="127.0.0.1", port=port,
            ssl_context=bundle.server_context(folder), print=None, access_log=None)
"""

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "gpu-teams.yaml"


def _review(i: int) -> bytes:
    job: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"train-{i}", "namespace": "ml-vision", "labels": {"kueue.x-k8s.io/queue-name": "vision"}},
        "spec": {
            "parallelism": 2,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "train",
                            "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                            "resources": {"requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "4"}},
                        }
                    ],
                }
            },
        },
    }
    request = {"uid": f"u-{i}", "operation": "CREATE", "namespace": "ml-vision", "object": job}
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()


async def _call(session: aiohttp.ClientSession, url: str, body: bytes) -> float:
    start = time.perf_counter()
    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as response:
        answer = await response.read()
        if response.status != 200 or b'"allowed"' not in answer:
            raise RuntimeError(f"{response.status}: {answer[:200]!r}")
    return time.perf_counter() - start


async def _run(rate: float, seconds: float, port: int, ca: bytes, _review: Callable[[int], bytes] = _review) -> None:
    tls = ssl.create_default_context(cadata=ca.decode())
    connector = aiohttp.TCPConnector(ssl=tls, limit=64)
    base = f"https://127.0.0.1:{port}"
    async with aiohttp.ClientSession(connector=connector) as session:
        for i in range(50):  # warm up the connections
            await _call(session, f"{base}/validate", _review(i))
        latencies: list[float] = []
        errors = 0

        async def one(i: int) -> None:
            nonlocal errors
            try:
                latencies.append(await _call(session, f"{base}/{'mutate' if i % 2 else 'validate'}", _review(i)))
            except (aiohttp.ClientError, RuntimeError):
                errors += 1

        tasks = []
        start = time.perf_counter()
        n = int(rate * seconds)
        for i in range(n):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks)
        latencies.sort()
        p99 = latencies[int(0.99 * (len(latencies) - 1))]
        print(
            f"open loop {rate:.0f}/s for {seconds:.0f} s: {len(latencies)} answered, {errors} errors; "
            f"p50 {statistics.median(latencies) * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms, "
            f"max {latencies[-1] * 1000:.1f} ms (target p99 <= 5 ms, no errors)"
        )

        done = 0
        deadline = time.perf_counter() + 10

        async def caller(k: int) -> None:
            nonlocal done
            i = k
            while time.perf_counter() < deadline:
                await _call(session, f"{base}/{'mutate' if i % 2 else 'validate'}", _review(i))
                done += 1
                i += 8

        start = time.perf_counter()
        await asyncio.gather(*(caller(k) for k in range(8)))
        print(f"maximum sustainable: {done / (time.perf_counter() - start):.0f} reviews/s (8 concurrent callers)")


def main(rate: float = 200.0, seconds: float = 60.0, review: Callable[[int], bytes] = _review) -> None:
    """``review``: the AdmissionReview body of request ``i`` (a GPU Job's by default)."""
    if review is _review:
        print("== webhook (its own process, TLS) ==")
    folder = Path(tempfile.mkdtemp(prefix="turnstile-webhook-bench-"))
    bundle = certs.issue(folder, ["127.0.0.1"])
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(folder), str(port), str(EXAMPLE)])
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        cpu0 = cpu_seconds(server.pid)
        wall0 = time.perf_counter()
        asyncio.run(_run(rate, seconds, port, bundle.ca_crt, review))
        wall = time.perf_counter() - wall0
        print(f"webhook process CPU over the run: {(cpu_seconds(server.pid) - cpu0) / wall * 100:.0f}% of a core")
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
