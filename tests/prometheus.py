"""A real Prometheus for tests (Debian's ``prometheus`` package), on loopback, scraping targets.

Tests that read metrics through Prometheus use it rather than a fake: the query language, the
scrape (relabelling ``pod`` to ``exported_pod`` where ``honor_labels`` is off, as a
ServiceMonitor's scrape does) and the HTTP API are the real ones. Skipped with a clear message
only where the binary is absent (``.ci/run`` installs it).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.e2e.test_install import free_port

BINARY = shutil.which("prometheus")
needs_prometheus = pytest.mark.skipif(
    BINARY is None, reason="prometheus is not on PATH (apt-get install prometheus; .ci/run installs it)"
)


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


@contextlib.asynccontextmanager
async def running(
    tmp: Path, target: str, metrics_path: str, *, honor_labels: bool = True, interval: str = "1s"
) -> AsyncIterator[str]:
    """A Prometheus scraping ``target`` (``host:port``) at ``metrics_path`` every ``interval``;
    yields its URL. ``honor_labels=False`` renames the target's ``pod``/``namespace`` labels to
    ``exported_pod``/``exported_namespace``, as scraping through a ServiceMonitor does."""
    assert BINARY is not None
    tmp.mkdir(parents=True, exist_ok=True)
    config = tmp / "prometheus.yml"
    config.write_text(
        f"global: {{scrape_interval: {interval}, evaluation_interval: {interval}}}\n"
        "scrape_configs:\n"
        f"  - job_name: dcgm\n    metrics_path: {metrics_path}\n    honor_labels: {str(honor_labels).lower()}\n"
        f"    static_configs: [{{targets: ['{target}'], labels: {{pod: dcgm-exporter-x1, namespace: gpu-operator}}}}]\n"
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (tmp / "prometheus.log").open("w")
    process = subprocess.Popen(
        [BINARY, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        for _ in range(300):
            if await asyncio.to_thread(_ready, url):
                break
            if process.poll() is not None:
                raise AssertionError(f"prometheus exited: {(tmp / 'prometheus.log').read_text()[-2000:]}")
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("prometheus did not become ready in 30 s")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
