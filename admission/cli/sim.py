"""``turnstile sim serve``: the simulated Kubernetes cluster alone, for kubectl and clients."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import click
import yaml

from admission.settings import Settings


def write_kubeconfig(path: Path, server: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "turnstile-sim",
        "clusters": [{"name": "turnstile-sim", "cluster": {"server": server}}],
        "users": [{"name": "turnstile-sim", "user": {"token": "turnstile-sim"}}],
        "contexts": [
            {
                "name": "turnstile-sim",
                "context": {"cluster": "turnstile-sim", "user": "turnstile-sim", "namespace": "default"},
            }
        ],
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


async def _serve(port: int, time_scale: float) -> None:
    from aiohttp import web

    from admission.sim.apiserver import ApiServer
    from admission.sim.cluster import Cluster

    server = ApiServer()
    cluster = Cluster(server.store, time_scale=time_scale)
    await cluster.start()
    runner = web.AppRunner(server.app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    kubeconfig = write_kubeconfig(Settings().home / "sim" / "kubeconfig", f"http://127.0.0.1:{port}")
    click.echo(f"simulated API server on http://127.0.0.1:{port}")
    click.echo(f"kubeconfig: {kubeconfig}")
    click.echo(f"try: kubectl --kubeconfig {kubeconfig} get namespaces   (Ctrl-C stops it)")
    try:
        await asyncio.Event().wait()
    finally:
        await cluster.stop()
        await runner.cleanup()


@click.group("sim")
def sim() -> None:
    """The simulated Kubernetes cluster."""


@sim.command("serve")
@click.option("--port", type=int, default=6443, show_default=True)
@click.option(
    "--time-scale",
    type=float,
    default=1.0,
    show_default=True,
    help="Wall seconds per second of a job's turnstile.dev/sim-runtime.",
)
def serve(port: int, time_scale: float) -> None:
    """Run the simulated cluster (API server, job operators, scheduler, kubelet) on plain HTTP at
    127.0.0.1 and write a kubeconfig for it."""
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(port, time_scale))
