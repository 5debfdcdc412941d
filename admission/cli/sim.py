"""``turnstile sim serve``: the simulated Kubernetes API server alone, for kubectl and clients."""

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


async def _serve(port: int) -> None:
    from aiohttp import web

    from admission.sim.apiserver import ApiServer

    runner = web.AppRunner(ApiServer().app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    kubeconfig = write_kubeconfig(Settings().home / "sim" / "kubeconfig", f"http://127.0.0.1:{port}")
    click.echo(f"simulated API server on http://127.0.0.1:{port}")
    click.echo(f"kubeconfig: {kubeconfig}")
    click.echo(f"try: kubectl --kubeconfig {kubeconfig} get namespaces   (Ctrl-C stops it)")
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


@click.group("sim")
def sim() -> None:
    """The simulated Kubernetes cluster (so far: its API server)."""


@sim.command("serve")
@click.option("--port", type=int, default=6443, show_default=True)
def serve(port: int) -> None:
    """Run the simulated API server alone (plain HTTP on 127.0.0.1) and write a kubeconfig for it."""
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(port))
