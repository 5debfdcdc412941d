"""The human report of ``turnstile simulate --output table`` and the optional ``--plot``."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from queues.placement import locality
from queues.simulation.simulator import Result


def console() -> Console:
    """A terminal console; when piped or logged, wide enough that nothing is folded."""
    probe = Console()
    return probe if probe.is_terminal else Console(width=200)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


def render(result: Result, console: Console, *, engine: str = "core") -> None:
    data = result.to_json(engine)
    summary = data["summary"]
    console.print(
        f"[bold]{data['scenario']}[/bold]  engine {engine}  makespan {summary['makespan']} s  "
        f"{len(data['workloads'])} workloads"
    )
    queues = Table(title="ClusterQueues", title_justify="left")
    queues.add_column("ClusterQueue", overflow="fold", min_width=12)
    for col in ("admitted", "finished", "pending", "preempted", "wait mean", "p50", "p90", "max"):
        queues.add_column(col, justify="right")
    util = Table(title="Utilization (used quota-seconds / nominal quota x makespan)", title_justify="left")
    util.add_column("ClusterQueue", overflow="fold")
    util.add_column("resource", overflow="fold")
    util.add_column("utilization", justify="right")
    for name, cq in summary["clusterQueues"].items():
        w = cq["wait"]
        queues.add_row(
            name,
            str(cq["admitted"]),
            str(cq["finished"]),
            str(cq["pending"]),
            str(cq["preempted"]),
            _fmt(w["mean"]),
            _fmt(w["p50"]),
            _fmt(w["p90"]),
            _fmt(w["max"]),
        )
        for res, value in cq["utilization"].items():
            util.add_row(name, res, f"{value:.1%}")
    console.print(queues)
    console.print(util)
    if result.shares is not None:
        shares = Table(title="Fair sharing (weighted share: borrowed / lendable per mille, / weight)")
        shares.title_justify = "left"
        shares.add_column("ClusterQueue", overflow="fold")
        for col in ("mean", "max", "final"):
            shares.add_column(col, justify="right")
        for name, cq in summary["clusterQueues"].items():
            shares.add_row(name, *(_fmt(cq[k]) for k in ("weightedShareMean", "weightedShareMax", "weightedShare")))
        console.print(shares)
    if "placement" in summary:
        _placement(summary["placement"], console)
    if "reclaim" in summary:  # (docs/gpu-efficiency.md)
        r = summary["reclaim"]
        console.print(
            f"Idle reclaim: {r['warned']} warned, {r['requeued']} requeued, {r['deactivated']} deactivated "
            f"(GPUIdle evictions below; warnings in -o json)"
        )
    for b in summary.get("budgets", []):
        state = "exhausted" if b["exhausted"] else "open"
        console.print(
            f"Budget {escape(b['budget'])}: {b['usedThisPeriod']:g} of {b['gpuHours']:g} GPU-hours "
            f"this period ({state})"
        )
    preemptions = [e for e in data["events"] if e["type"] == "Evicted"]
    if preemptions:
        table = Table(title="Evictions", title_justify="left")
        for col in ("t", "workload", "reason", "detail", "by"):
            table.add_column(col, overflow="fold")
        for e in preemptions:
            table.add_row(str(e["t"]), e["workload"], e["reason"], e.get("detail", ""), e.get("by", "-"))
        console.print(table)
    if data.get("refused"):
        table = Table(title="Refused by the API server (never created)", title_justify="left")
        for col in ("workload", "message"):
            table.add_column(col, overflow="fold")
        for r in data["refused"]:
            table.add_row(escape(r["workload"]), escape(r["message"]))
        console.print(table)
    pending = {k: w for k, w in data["workloads"].items() if w["state"] == "Pending"}
    if pending:
        table = Table(title="Still pending", title_justify="left")
        for col in ("workload", "ClusterQueue", "reason", "message"):
            table.add_column(col, overflow="fold")
        for key, w in pending.items():
            table.add_row(escape(key), w["clusterQueue"] or "-", w.get("reason", ""), escape(w.get("message", "")))
        console.print(table)
    else:
        console.print("No workload is left pending.")


def _placement(placement: dict[str, Any], console: Console) -> None:
    """Where GPU jobs landed (``queues.placement.locality``): why topology-aware placement helps, per job size."""
    util, frag = placement["gpuUtilization"], placement["fragmentation"]
    title = (
        f"Placement (GPU utilisation {_fmt(None if util is None else util * 100)}%; while jobs waited, "
        f"{frag:.1%} of GPUs sat free on partly used nodes)"
    )
    table = Table(title=title, title_justify="left")
    table.add_column("job GPUs", justify="right")
    table.add_column("jobs", justify="right")
    table.add_column("on one node", justify="right")
    labels = sorted({k for row in placement["bySize"].values() for k in row["withinOne"]})
    for label in labels:
        table.add_column(f"within one {escape(label.rsplit('/', 1)[-1])}", justify="right")
    for size, row in placement["bySize"].items():
        within = [f"{row['withinOne'].get(label, 0):.0%}" for label in labels]
        table.add_row(size, str(row["jobs"]), f"{row['onOneNode']:.0%}", *within)
    console.print(table)


def plot(result: Result, path: str) -> None:
    """Queue depth and GPUs in use over time, as a PNG (needs the ``plot`` extra: matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    times = [s[0] for s in result.series]
    placed = bool(result.nodes) and any("placement" in e for e in result.events)
    rows = 2 + (result.shares is not None) + placed
    fig, axes = plt.subplots(rows, 1, sharex=True, figsize=(9, 2.5 * rows + (1.5 if placed else 0)))
    ax1, ax2 = axes[0], axes[1]
    ax1.step(times, [s[1] for s in result.series], where="post")
    ax1.set_ylabel("pending workloads")
    ax1.yaxis.get_major_locator().set_params(integer=True)
    ax2.step(times, [s[2] for s in result.series], where="post", color="tab:green")
    ax2.set_ylabel("GPUs in use")
    if result.shares is not None:  # each ClusterQueue's weighted share over time (fair sharing)
        ax3 = axes[2]
        for name, (ts, values) in sorted(_share_lines(result).items()):
            ax3.step(ts, values, where="post", label=name)
        ax3.set_ylabel("weighted share")
        if len(result.shares.now) <= 12:
            ax3.legend(fontsize="small", loc="upper right")
    if placed:  # each node's share of GPUs in use over time (topology-aware placement)
        names, grid = locality.occupancy(result.events, result.tracks, result.nodes, result.makespan)
        ax = axes[-1]
        ax.imshow(grid, aspect="auto", interpolation="nearest", cmap="Greens", vmin=0, vmax=1,
                  extent=(0, result.makespan, len(names), 0))  # fmt: skip
        ax.set_ylabel("nodes (GPUs in use)")
        if len(names) <= 32:
            ax.set_yticks([i + 0.5 for i in range(len(names))], names, fontsize="x-small")
    axes[-1].set_xlabel("scenario seconds")
    fig.suptitle(result.scenario)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _share_lines(result: Result) -> dict[str, tuple[list[float], list[float]]]:
    """Each ClusterQueue's weighted share as a step line (infinite shares drawn at the top)."""
    assert result.shares is not None
    finite = [v for _, changed in result.shares.series for v in changed.values() if v != float("inf")]
    top = max(finite, default=1.0) * 1.1 or 1.0
    lines: dict[str, tuple[list[float], list[float]]] = {}
    for t, changed in result.shares.series:
        for name, value in changed.items():
            ts, values = lines.setdefault(name, ([0.0], [0.0]))
            ts.append(t)
            values.append(top if value == float("inf") else value)
    end = result.makespan
    for ts, values in lines.values():
        ts.append(end)
        values.append(values[-1])
    return lines
