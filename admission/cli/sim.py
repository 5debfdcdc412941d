"""``turnstile sim serve``: the simulated Kubernetes cluster alone, for kubectl and clients."""

from __future__ import annotations

import asyncio
import contextlib

import click

from admission.cli import running
from admission.settings import Settings


async def _serve(port: int, time_scale: float, default_runtime: float) -> None:
    from admission.sim.host import SimHost

    host = await SimHost.start(
        Settings().home / "sim" / "kubeconfig", port=port, time_scale=time_scale, default_runtime=default_runtime
    )
    click.echo(f"simulated API server on {host.url} (job operators, scheduler, kubelet, cluster-autoscaler)")
    click.echo(f"kubeconfig: {host.kubeconfig}")
    click.echo(f"GPU metrics (a simulated dcgm-exporter, for Prometheus): {host.url}/dcgm/metrics")
    click.echo(f"try: kubectl --kubeconfig {host.kubeconfig} get namespaces   (Ctrl-C stops it)")
    try:
        await asyncio.Event().wait()
    finally:
        await host.stop()


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
@running.default_runtime_option
def serve(port: int, time_scale: float, default_runtime: float) -> None:
    """Run the simulated cluster (API server, job operators, scheduler, kubelet, cluster-autoscaler) on
    plain HTTP at 127.0.0.1 and write a kubeconfig for it."""
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(port, time_scale, default_runtime))


sim.add_command(running.up_cmd)
