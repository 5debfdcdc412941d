"""Processes the end-to-end benches measure: CPU seconds and memory read from ``/proc``.

The bench process holds the simulated cluster (and the benchmark's client); the controller
runs as ``turnstile controller`` in its own process, as in a real install; PostgreSQL is its
own set of processes. Reading ``/proc`` gives each one's share of the machine exactly, with
no sampling.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from admission.webhook import configurations

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process (0 once it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(stat[11]) + int(stat[12])) / _TICK


def postgres_cpu() -> float:
    """CPU seconds of every PostgreSQL process on the machine (postmasters and backends: a
    backend's command line does not name its data directory, so the idle system server counts too)."""
    total = 0.0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"postgres" in cmd:
            total += cpu_seconds(int(pid))
    return total


class PostgresMeter:
    """PostgreSQL's CPU seconds over a run whose own server stops before the run returns: a thread
    reads every PostgreSQL process twice a second and keeps each one's last reading."""

    def __init__(self) -> None:
        self.start: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _read(self) -> dict[int, float]:
        out = {}
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    if b"postgres" in Path(f"/proc/{pid}/cmdline").read_bytes():
                        out[int(pid)] = cpu_seconds(int(pid))
                except OSError:
                    continue
        return out

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.last.update(self._read())

    def __enter__(self) -> PostgresMeter:
        self.start = self._read()
        self.last = dict(self.start)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.last.update(self._read())

    @property
    def seconds(self) -> float:
        return sum(v - self.start.get(pid, 0.0) for pid, v in self.last.items())


def memory_mb(pid: int) -> tuple[float, float]:
    """(resident, peak resident) MiB of a process."""
    rss = hwm = 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) / 1024
        elif line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) / 1024
    return rss, hwm


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ControllerProcess:
    """``turnstile controller`` as a child process, against a kubeconfig and a database."""

    process: subprocess.Popen[bytes]
    metrics_port: int

    @classmethod
    def start(
        cls,
        kubeconfig: Path,
        database_url: str,
        workdir: Path,
        *,
        webhook_port: int | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ControllerProcess:
        metrics_port = free_port()
        log = (workdir / "controller.log").open("wb")
        process = subprocess.Popen(
            [
                sys.executable, "-m", "admission.cli.main", "controller",
                "--kubeconfig", str(kubeconfig), "--database-url", database_url,
                "--webhook-port", str(webhook_port or free_port()), "--metrics-port", str(metrics_port),
                "--cert-dir", str(workdir / "certs"), "--log-level", "warning", "--ui-port", "0",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )  # fmt: skip
        return cls(process, metrics_port)

    @property
    def pid(self) -> int:
        return self.process.pid

    def scrape(self) -> bytes:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=30) as r:
            return bytes(r.read())

    def metric(self, name: str) -> float | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=2) as r:
                text = r.read().decode()
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        return None

    async def leading(self, timeout: float = 60.0) -> None:
        """Wait until this replica holds the lease (its scheduler runs)."""
        deadline = time.monotonic() + timeout
        while await asyncio.to_thread(self.metric, "turnstile_leader") != 1.0:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"controller did not start leading (exit code {self.process.poll()})")
            await asyncio.sleep(0.1)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


SERVICE = {"name": "turnstile-webhook", "namespace": "turnstile-system", "port": 443}


async def route_webhook(host: Any, kube: Any, namespaces: tuple[str, ...]) -> int:
    """Register Turnstile's webhook configurations in the simulated cluster ``host`` as the install's
    manifests do (calling the Service), route the Service to a free local port, create ``namespaces``
    (and Turnstile's); returns the port the controller's webhook must listen on."""
    from admission.jobs import INTEGRATIONS
    from admission.kube import client as kube_client

    port = free_port()
    host.route_service(str(SERVICE["namespace"]), str(SERVICE["name"]), 443, f"https://127.0.0.1:{port}")
    for ns in ("turnstile-system", *namespaces):
        await kube.create(kube_client.NAMESPACES, None, {"metadata": {"name": ns}})
    for obj in configurations.configurations({"service": SERVICE}, None, integrations=INTEGRATIONS):
        await kube.request("POST", f"/apis/admissionregistration.k8s.io/v1/{obj['kind'].lower()}s", body=obj)
    return port
