"""The ``turnstile`` command: entry point and the command groups.

Exit status (``spec/cli.md``): 0 success, 1 the operation was refused or failed, 2 bad usage
or unreadable input. Errors go to stderr, one line per problem; never a traceback for a
user's mistake.
"""

from __future__ import annotations

import contextlib
import gc
import json
import sys
from typing import Any

import click

from admission.cli import bounds
from admission.cli.command_table import LazyGroup


def fail(lines: list[str], code: int) -> None:
    for line in lines:
        click.echo(line, err=True)
    sys.exit(code)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="turnstile")
def cli() -> None:
    """Turnstile: a Kueue-compatible admission queue for GPU jobs, with quotas and GPU-hours in PostgreSQL."""


@cli.command()
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.option(
    "--engine",
    type=click.Choice(["core", "cluster"]),
    default="core",
    show_default=True,
    help="core: the scheduling core in virtual time; cluster: the real controller over a simulated cluster.",
)
@click.option("--output", "-o", "output", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option(
    "--time-scale",
    type=float,
    default=0.02,
    show_default=True,
    help="engine cluster: wall seconds per scenario second.",
)
@click.option("--database-url", default=None, help="engine cluster: PostgreSQL to use instead of an embedded one.")
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also draw queue depth and GPUs in use over time to this PNG (needs matplotlib).",
)
@bounds.options(seconds=1800, memory_gib=4)
def simulate(
    file: str,
    engine: str,
    output: str,
    time_scale: float,
    database_url: str | None,
    plot_path: str | None,
    max_seconds: float,
    max_memory: float,
) -> None:
    """Replay a scenario FILE and report what the admission controller decided (docs/scenario-format.md)."""
    limit = bounds.Bounds(max_seconds, int(max_memory * bounds.GIB))
    hint = "simulate fewer jobs (or a shorter timeline), or raise the bound"
    # (engine cluster is bounded in time by its own cancellation, which stops its processes on the way out)
    with contextlib.nullcontext() if engine == "cluster" else bounds.bounded(f"simulate {file}", limit, hint=hint):
        _simulate(file, engine, output, time_scale, database_url, plot_path, limit)


def _simulate(
    file: str,
    engine: str,
    output: str,
    time_scale: float,
    database_url: str | None,
    plot_path: str | None,
    limit: bounds.Bounds,
) -> None:
    from admission.app import collector
    from admission.cli import documents  # the simulator loads only for the commands that need it
    from queues import errors
    from queues.kueue import validation
    from queues.podsets import jobs
    from queues.simulation import scenario, simulator

    gc.disable()  # (reading builds the scenario's objects, which live for the whole run: see below)
    try:
        doc = documents.load_single(file)
        parsed = scenario.parse(doc)
    except documents.Unreadable as exc:
        fail(exc.lines, 2)
        return
    except errors.Invalid as exc:
        fail(documents.invalid_lines(file, exc), 2)
        return
    if time_scale <= 0:
        fail([f"--time-scale {time_scale}: must be > 0 (wall seconds per scenario second)"], 2)
    afs = parsed.admission_fair_sharing is not None
    if engine == "cluster" and (unsupported := _core_only(parsed)):
        fail([f"{file}: {unsupported}; run this scenario with --engine core"], 2)
    for obj in parsed.manifests:  # a field accepted but not acted on is said, never silently ignored
        for unused in validation.unused_fields(obj, admission_fair_sharing=afs):
            click.echo(f"warning: {file}: {obj.kind}/{obj.key}: {unused}", err=True)
    for entry in parsed.jobs:  # (Kueue's job annotations not acted on: said too)
        for said in jobs.unsupported_markings(entry.object):
            meta = entry.object.get("metadata") or {}
            click.echo(
                f"warning: {file}: jobs[{entry.index}] {meta.get('namespace')}/{meta.get('name')}: {said}", err=True
            )
    # The scenario lives for the whole run: frozen, the cyclic collector stops walking its objects
    # at every collection (a fifth of the run on Kueue's 15,000-job baseline). Nor does it run while
    # the scenario is read (nine full collections of a growing heap, ~0.5 s of that baseline), and
    # engine core's run, which makes little cyclic garbage, collects every 100,000 allocations
    # rather than every 700 (another ~0.6 s); the decisions are the same, byte for byte.
    del doc
    collector.freeze(collect=False)  # (nothing collected while reading: little garbage to keep)
    if engine != "cluster":  # (the whole system in this process: the interpreter's defaults)
        collector.tune(100_000, 50, 100)
    gc.enable()
    if engine == "cluster":
        result = _run_cluster(
            parsed, time_scale=time_scale, database_url=database_url, seconds=limit.seconds, file=file
        )
    else:
        result = simulator.Simulation(parsed).run()
    if output == "json":
        _write_json(result.to_json(engine))
    else:
        from admission.cli import report  # (rich: only for the text report)

        report.render(result, report.console(), engine=engine)
    if plot_path:
        try:
            from admission.cli import report

            report.plot(result, plot_path)
        except ImportError:
            fail(["--plot needs matplotlib: pip install 'turnstile[plot]'"], 2)


def _write_json(body: Any) -> None:
    """The report as indented JSON, written by pydantic-core's serializer: the standard library's
    indenting encoder is pure Python (0.8 s of the 15,000-workload baseline's 12.6 MB, against
    0.1 s). JSON has no Infinity or NaN; the scenario's bounds keep every number finite, and were
    one not, ``json.dumps(allow_nan=False)`` refuses it as before (a name that merely contains
    those words takes the slow path and gives the same text)."""
    import pydantic_core

    text = pydantic_core.to_json(body, indent=2)
    if b"Infinity" in text or b"NaN" in text:
        text = json.dumps(body, indent=2, allow_nan=False).encode()
    sys.stdout.flush()
    sys.stdout.buffer.write(text + b"\n")
    sys.stdout.buffer.flush()


def _run_cluster(parsed: Any, *, time_scale: float, database_url: str | None, seconds: float, file: str) -> Any:
    """Engine cluster; its logs go to stderr (warnings only), so stdout stays the report alone. Past
    ``seconds`` it is cancelled, so its PostgreSQL and simulated cluster are stopped on the way out."""
    import asyncio
    import logging

    from admission.policy import Policy
    from admission.settings import Settings, normalise_database_url
    from admission.sim import engine as cluster_engine
    from admission.store.embedded import EmbeddedPostgresError

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    try:
        url = normalise_database_url(database_url) if database_url else None
    except ValueError as exc:
        fail([f"--database-url: {exc}"], 2)
    try:
        policy = Policy.from_settings(Settings(), lambda _ns: None)  # the webhook answers as the install's would

        async def bounded() -> Any:
            async with asyncio.timeout(seconds):
                return await cluster_engine.simulate(parsed, time_scale=time_scale, database_url=url, policy=policy)

        return asyncio.run(bounded())
    except TimeoutError:
        fail([f"simulate {file}: stopped after {seconds:g} s (--max-seconds); raise it or lower --time-scale"], 1)
    except EmbeddedPostgresError as exc:
        fail([str(exc)], 1)
    except OSError as exc:
        fail([f"engine cluster could not reach PostgreSQL: {exc}"], 1)
    return None


@cli.command()
def crds() -> None:
    """Print the CustomResourceDefinitions of Kueue's configuration kinds and its Workload
    (kueue.x-k8s.io/v1beta2) as Turnstile serves them: `turnstile crds | kubectl apply -f -` (the
    install ships them too)."""
    import yaml

    from queues.kueue import workload_crd

    header = (
        "# Kueue's configuration kinds and its Workload, v1beta2, as Turnstile serves them "
        "(written by `turnstile crds`).\n"
    )
    sys.stdout.write(header + yaml.safe_dump_all(workload_crd.installed(), sort_keys=False))


@cli.command()
@click.option("--seconds", type=float, default=60.0, show_default=True, help="About how long the run takes.")
def demo(seconds: float) -> None:
    """Run examples/gpu-teams.yaml through the whole system (engine cluster) with a live view, then the report."""
    import logging

    from admission.cli import demo as demo_module

    if seconds <= 0:
        fail([f"--seconds {seconds}: must be > 0"], 2)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    demo_module.run(seconds=seconds)


def _core_only(parsed: Any) -> str:
    """What of a scenario engine cluster cannot run here (empty: nothing): it refuses it rather
    than run it differently. Idle reclaim and utilisation need a real Prometheus on PATH."""
    from admission.sim import efficiency

    if efficiency.needs_prometheus(parsed) and (why := efficiency.missing()):
        field = (
            "reclaim"
            if parsed.reclaim
            else "jobs[].utilization"
            if parsed.utilization
            else "jobs[].gpuMemoryUsed"
            if parsed.gpu_memory
            else "edits[].gpuXid"
        )
        return f"{field}: {why}"
    return ""


def main() -> None:
    try:
        cli()
    except Exception as exc:
        from pydantic import ValidationError  # (imported only here: --version and --help need none of it)

        if not isinstance(exc, ValidationError):  # a TURNSTILE_* setting from the environment is not valid
            raise
        for error in exc.errors():
            where = "TURNSTILE_" + str(error["loc"][0]).upper() if error["loc"] else "settings"
            click.echo(f"error: {where}: {error['msg'].removeprefix('Value error, ')}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
