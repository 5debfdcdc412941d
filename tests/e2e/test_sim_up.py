"""``turnstile sim up`` as a newcomer runs it: the printed dashboard URL answers with the page,
and the page's data shows the queues applied with ``--manifests``; ``TURNSTILE_UI_PORT`` moves
the dashboard to a port of its own; with ``prometheus`` on PATH it starts one scraping the
simulated dcgm-exporter and prints its URL."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from admission.sim import prometheus as sim_prometheus
from tests.e2e.test_install import free_port

ROOT = Path(__file__).resolve().parents[2]


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, response.read().decode()


async def test_sim_up_prints_a_dashboard_url_that_shows_the_queues(tmp_path: Path, migrated_url: str) -> None:
    ui_port = free_port()
    env = {
        **os.environ,
        "TURNSTILE_DATABASE_URL": migrated_url,
        "TURNSTILE_HOME": str(tmp_path / "home"),
        "TURNSTILE_UI_PORT": str(ui_port),
    }
    command = [
        sys.executable, "-m", "admission.cli.main", "sim", "up",
        "--port", str(free_port()), "--webhook-port", str(free_port()), "--metrics-port", str(free_port()),
        "--manifests", str(ROOT / "examples" / "queues" / "gpu-teams.yaml"),
    ]  # fmt: skip
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = prometheus = None
        lines: list[str] = []
        assert process.stdout is not None
        for _ in range(400):
            line = await asyncio.to_thread(process.stdout.readline)
            lines.append(line)
            if line.startswith("Prometheus: "):
                prometheus = line.split()[1]
            if line.startswith("dashboard: "):
                url = line.split()[1]
                break
            if not line and process.poll() is not None:
                break
        assert url == f"http://127.0.0.1:{ui_port}/ui/", "".join(lines)
        status, page = await asyncio.to_thread(_get, url)
        assert status == 200 and "<title>Turnstile</title>" in page
        for _ in range(100):
            _, body = await asyncio.to_thread(_get, url + "api/overview")
            names = {q["name"] for q in json.loads(body)["clusterQueues"]}
            if {"team-a", "team-b"} <= names:
                break
            await asyncio.sleep(0.1)
        assert {"team-a", "team-b"} <= names, names
        if sim_prometheus.binary() is None:
            assert prometheus == "none:", "".join(lines)
            return
        assert prometheus is not None and prometheus.startswith("http://127.0.0.1:"), "".join(lines)
        query = prometheus + "/api/v1/query?query=up%7Bjob%3D%22dcgm%22%7D"
        for _ in range(150):  # (scraped every 5 s)
            result = json.loads((await asyncio.to_thread(_get, query))[1])["data"]["result"]
            if result and result[0]["value"][1] == "1":
                break
            await asyncio.sleep(0.1)
        assert result and result[0]["value"][1] == "1", result  # the simulated exporter is scraped
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
