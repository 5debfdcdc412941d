"""A real Prometheus on loopback, scraping the simulated cluster's dcgm-exporter.

Why: the controller reads GPU utilisation through a Prometheus-compatible API, never from the
nodes (``admission.controller.features.utilisation``). ``turnstile sim up`` starts Debian's (or any)
``prometheus`` binary found on PATH against the simulated exporter and points the controller at
it, so idle reclaim and the ledger's used GPU-hours work in the playground as in a cluster; the
tests use the same code. The scrape renames the target's ``pod``/``namespace`` labels to
``exported_pod``/``exported_namespace`` unless ``honor_labels`` (as scraping dcgm-exporter
through a ServiceMonitor does), so the controller's join is exercised as in production.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import subprocess
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path


class PrometheusError(Exception):
    """Prometheus could not be started; the message says why (its log's tail)."""


def binary() -> str | None:
    return shutil.which("prometheus")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@contextlib.asynccontextmanager
async def running(
    workdir: Path, target: str, metrics_path: str, *, honor_labels: bool = True, interval: str = "1s"
) -> AsyncIterator[str]:
    """A Prometheus scraping ``target`` (``host:port``) at ``metrics_path`` every ``interval``,
    its data and log in ``workdir``; yields its URL and stops it on exit."""
    found = binary()
    if found is None:
        raise PrometheusError("prometheus is not on PATH (apt-get install prometheus)")
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "prometheus.yml"
    config.write_text(
        f"global: {{scrape_interval: {interval}, evaluation_interval: {interval}}}\n"
        "scrape_configs:\n"
        f"  - job_name: dcgm\n    metrics_path: {metrics_path}\n    honor_labels: {str(honor_labels).lower()}\n"
        f"    static_configs: [{{targets: ['{target}'], labels: {{pod: dcgm-exporter-x1, namespace: gpu-operator}}}}]\n"
    )
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = workdir / "prometheus.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [found, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            for _ in range(300):
                if await asyncio.to_thread(_ready, url):
                    break
                if process.poll() is not None:
                    raise PrometheusError(f"prometheus exited: {log_path.read_text()[-2000:]}")
                await asyncio.sleep(0.1)
            else:
                raise PrometheusError(f"prometheus did not become ready in 30 s; its log: {log_path}")
            yield url
        finally:
            process.terminate()
            try:
                await asyncio.to_thread(process.wait, 10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
