"""``turnstile rightsize``: measured GPU work that a smaller MIG slice or GPU the install offers would have held.

``spec/cli.md``: ``turnstile rightsize [--since 30d] [--by ...] [-o table|json]``. Each workload
whose GPU memory was measured (the ledger's peak and size of its busiest GPU, and its mean
utilisation; ``admission.store.rightsizing``) is judged by ``queues.gpus.rightsizing``:

    ml-a/train-small  team-a  nvidia.com/gpu  12.00  10.29  peaked at 9.1 GiB of 141 GiB, 31 % busy:
                                                             a 1g.18gb slice would do; 6/7 of a card freed

The list has the workloads a slice would have fitted, most GPU-hours saved first (``--limit``;
``--all`` adds every measured workload with its verdict); ``--by namespace|clusterqueue|label:KEY``
adds totals per group. GPU-hours are whole cards (``queues.gpus.gpu_units``; ``--fraction`` and
``TURNSTILE_GPU_FRACTIONS`` as for ``turnstile usage``). Workloads without memory data are not
judged: never a suggestion without data.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import click

from admission.cli.admin import _exec, database_option, parse_since
from admission.cli.ledger_report import card_fractions, group_title, grouping, print_table
from admission.store import card_fractions as recorded_fractions
from admission.store import rightsizing as store
from admission.store.rightsizing import Judged
from queues.gpus.rightsizing import Offers


def as_json(item: Judged) -> dict[str, Any]:
    use, v = item.use, item.verdict
    return {
        "namespace": use.namespace,
        "workload": use.workload.partition("/")[2] or use.workload,
        "clusterQueue": use.cluster_queue,
        "resource": use.resource,
        "gpuHours": round(item.card_hours, 6),
        "peakGiB": round(use.peak_mib / 1024, 2),
        "gpuMemoryGiB": None if use.total_mib is None else round(use.total_mib / 1024, 2),
        "meanGiB": None if use.mean_mib is None else round(use.mean_mib / 1024, 2),
        "busy": None if use.busy is None else round(use.busy, 4),
        "suggestion": v.profile,
        "suggestedFlavor": v.flavor,
        "freedPerGpu": str(v.freed) if v.suggests else None,
        "gpuHoursSaved": round(v.saved_hours, 6),
        "message": v.line,
    }


@click.command("rightsize")
@click.option("--since", default="30d", show_default=True, help="How far back: 12h, 7d, 30d.")
@click.option("--by", default=None, help="Also total per group: namespace, clusterqueue or label:KEY (label:team).")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True, help="Workloads listed at most.")
@click.option("--all", "show_all", is_flag=True, help="List every measured workload, with or without a suggestion.")
@click.option(
    "--fraction",
    "fractions",
    multiple=True,
    metavar="RESOURCE=FRACTION",
    help="A GPU resource's part of a card (nvidia.com/mig-1g.10gb=1/4), as for turnstile usage.",
)
@database_option
def rightsize_cmd(
    since: str,
    by: str | None,
    output: str,
    limit: int,
    show_all: bool,
    fractions: tuple[str, ...],
    database_url: str | None,
) -> None:
    """Workloads (and groups) whose measured GPU memory and utilisation fit a smaller MIG slice or
    GPU the install offers, with the GPU-hours that would have been saved."""
    by = grouping(by) if by is not None else None
    cards = card_fractions(fractions)
    start, until = parse_since(since), dt.datetime.now(dt.UTC)

    async def read(session: Any) -> tuple[store.Report, Offers]:
        offers = await store.offers(session)
        billed = await recorded_fractions.billed(session, cards)
        found = await store.report(
            session, since=start, until=until, by=by, offers=offers, fractions=billed, limit=limit, show_all=show_all
        )
        return found, offers

    found, offers = _exec(read, database_url=database_url)
    listed, groups, total = found.listed, found.groups, found.total
    if output == "json":
        body = {
            "since": start.isoformat(),
            "until": until.isoformat(),
            "offered": list(offers.mig),
            "offeredFlavors": dict(offers.cards),
            "workloads": [as_json(j) for j in listed],
            "total": total,
        }
        if by is not None:
            body["by"], body["groups"] = by, groups
        click.echo(json.dumps(body, indent=2))
        return
    window = f"{start:%Y-%m-%d %H:%M} to {until:%Y-%m-%d %H:%M} UTC"
    if not total["workloadsMeasured"]:
        click.echo(
            f"no GPU memory measured between {window}: the controller reads it from dcgm-exporter "
            "(DCGM_FI_DEV_FB_USED) through TURNSTILE_PROMETHEUS_URL; without data nothing is suggested"
        )
        return
    if not offers:
        click.echo(
            "note: no ClusterQueue covers a MIG resource (nvidia.com/mig-*) nor a GPU flavor whose nodeLabels say its "
            "memory (nvidia.com/gpu.memory): there is nothing smaller to suggest"
        )
    table = [["WORKLOAD", "CLUSTERQUEUE", "RESOURCE", "GPU-HOURS", "SAVED", "VERDICT"]]
    for j in listed:
        table.append(
            [j.use.workload, j.use.cluster_queue, j.use.resource, f"{j.card_hours:,.2f}",
             f"{j.verdict.saved_hours:,.2f}", j.verdict.line]
        )  # fmt: skip
    if len(table) > 1:
        print_table(table, numeric=(3, 4))
    if groups:
        click.echo("")
        rows = [[group_title(str(by)), "WORKLOADS", "FITTING", "GPU-HOURS", "SAVED"]]
        rows += [
            [g["group"], str(g["workloads"]), str(g["fitting"]), f"{g['gpuHours']:,.2f}", f"{g['gpuHoursSaved']:,.2f}"]
            for g in groups
        ]
        print_table(rows, numeric=(1, 2, 3, 4))
    shown = f" (the {limit} saving most listed)" if total["workloadsFitting"] > limit else ""
    click.echo(
        f"total: {total['workloadsFitting']} of {total['workloadsMeasured']} measured workloads would fit a smaller "
        f"slice{shown}; {total['gpuHoursSaved']:,.2f} of {total['gpuHours']:,.2f} GPU-hours would have been freed "
        f"({window})"
    )
