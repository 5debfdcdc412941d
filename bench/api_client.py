"""The Kubernetes client's own CPU per request and per watch event (``python -m bench client``).

Why: the controller's CPU per admission (``bench controller``, ``bench dra``) has a floor that no
change to its decisions moves: the requests an admission takes (a job's unsuspend patch, its
Workload object's status patch, Kueue's Events) and the watch events they cause, each through
``admission.kube.client`` on aiohttp. This bench measures that floor alone: the simulated cluster
runs in its own process (``turnstile sim serve``), so the CPU counted is this process's, the
client's. Requests are merge patches of a 1.5 KB ConfigMap, 16 at a time, as the controller's
workers send them; the watch figure is this process's CPU per event while it only watches those
ConfigMaps and a third process patches them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from admission.kube import client as kube_client
from admission.kube.client import NAMESPACES, Kube, KubeError, ResourceRef
from bench.procs import free_port

CONFIGMAPS = ResourceRef("v1", "ConfigMap", "configmaps")
REQUESTS = 4000
AT_ONCE = 16
# What one admission of bench dra's load sends, counted there (2026-12-07): one job patch, 1.4 status
# patches of its Workload object, 0.5 Events; and the watch events the controller reads of it: 3 of
# its job (the unsuspend, then the job controller's status), 1.4 of its Workload object.
PER_ADMISSION = {"requests": 2.9, "watch events": 4.4}


async def _sim(home: Path) -> tuple[subprocess.Popen[bytes], Path]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "admission.cli.main", "sim", "serve", "--port", str(port)],
        env={**os.environ, "TURNSTILE_HOME": str(home), "HOME": str(home)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(300):
        found = list(home.rglob("kubeconfig"))
        if found:
            return process, found[0]
        await asyncio.sleep(0.1)
    process.kill()
    raise RuntimeError("turnstile sim serve wrote no kubeconfig")


async def _timed(label: str, call: Callable[[int], Awaitable[object]], *, warm: bool = True) -> float:
    gate = asyncio.Semaphore(AT_ONCE)

    async def one(i: int) -> None:
        async with gate:
            await call(i)

    if warm:
        await asyncio.gather(*(one(i) for i in range(200)))  # (connections opened, caches warm)
    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one(i) for i in range(REQUESTS)))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    per = cpu / REQUESTS * 1e6
    print(f"  {label:58s} {per:5.0f} core-us each ({REQUESTS / wall:,.0f}/s)")
    return per


async def _run() -> None:
    with tempfile.TemporaryDirectory(prefix="turnstile-bench-client-") as folder:
        process, kubeconfig = await _sim(Path(folder))
        kube = Kube(await kube_client.connect(kubeconfig))
        try:
            with contextlib.suppress(KubeError):
                await kube.create(NAMESPACES, None, {"metadata": {"name": "bench"}})
            for i in range(AT_ONCE):
                await kube.create(CONFIGMAPS, "bench", {"metadata": {"name": f"c{i}"}, "data": {"x": ""}})

            def body(i: int) -> dict[str, object]:
                return {"data": {"x": str(i), "pad": "x" * 1400}}

            def patch(i: int) -> Awaitable[object]:
                return kube.patch(CONFIGMAPS, "bench", f"c{i % 16}", body(i))

            await _timed("merge patch, answer decoded (Kube.patch)", patch)
            path = [CONFIGMAPS.path("bench", f"c{i}") for i in range(AT_ONCE)]
            sent = await _timed(
                "merge patch, answer dropped (Kube.send)",
                lambda i: kube.send("PATCH", path[i % 16], body=body(i), content_type=kube_client.MERGE_PATCH),
            )
            per_event = await _watch_cost(kube, kubeconfig)
            floor = (sent * PER_ADMISSION["requests"] + per_event * PER_ADMISSION["watch events"]) / 1000
            requests, events_each = PER_ADMISSION["requests"], PER_ADMISSION["watch events"]
            print(
                f"  floor per admission ({requests} requests, {events_each} watch events, nothing decided): "
                f"{floor:.2f} core-ms (issue 32's target: <= 0.5)"
            )
        finally:
            await kube.close()
            process.terminate()
            process.wait(10)


async def _watch_cost(kube: Kube, kubeconfig: Path) -> float:
    """This process watches the ConfigMaps while another one patches them: its CPU per event."""
    events, done = 0, asyncio.Event()

    async def watch() -> None:
        nonlocal events
        async for event in kube.watch(CONFIGMAPS, resource_version="0", timeout_seconds=600):
            events += event.get("type") == "MODIFIED"
            if events >= REQUESTS:
                done.set()

    watching = asyncio.create_task(watch())
    await asyncio.sleep(0.5)
    cpu, events = time.process_time(), 0
    writer = await asyncio.create_subprocess_exec(sys.executable, "-m", "bench.api_client", "write", str(kubeconfig))
    try:
        await asyncio.wait_for(done.wait(), timeout=300)
    finally:
        await writer.wait()
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
    per = (time.process_time() - cpu) / events * 1e6
    print(f"  {'a watch event read (another process patching)':58s} {per:5.0f} core-us each")
    return per


async def _write(kubeconfig: Path) -> None:
    """The other process: REQUESTS patches of the ConfigMaps, AT_ONCE at a time."""
    kube = Kube(await kube_client.connect(kubeconfig))
    gate = asyncio.Semaphore(AT_ONCE)

    async def one(i: int) -> None:
        async with gate:
            await kube.patch(CONFIGMAPS, "bench", f"c{i % AT_ONCE}", {"data": {"x": f"w{i}", "pad": "x" * 1400}})

    try:
        await asyncio.gather(*(one(i) for i in range(REQUESTS)))
    finally:
        await kube.close()


def main() -> None:
    print("== the Kubernetes client alone, against the simulated cluster in its own process ==")
    asyncio.run(_run())


if __name__ == "__main__":
    if sys.argv[1:2] == ["write"]:
        asyncio.run(_write(Path(sys.argv[2])))
    else:
        main()
