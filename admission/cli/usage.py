"""``turnstile usage``: resource-hours from the ledger (GPU-hours first), grouped, over a window, priced.

``spec/cli.md``: ``--by namespace|clusterqueue|label:KEY``, ``--since 30d``, ``--price
FLAVOR=USD_PER_GPU_HOUR`` (repeatable; prices GPU resources of that flavor), ``-o table|json|csv``.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from decimal import Decimal, InvalidOperation
from typing import Any

import click

from admission.cli.admin import _exec, database_option, parse_since
from admission.store import usage as ledger
from queues.jobs import is_gpu


def _prices(values: tuple[str, ...]) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    for value in values:
        flavor, sep, price = value.partition("=")
        try:
            amount = Decimal(price)
        except InvalidOperation:
            amount = Decimal(-1)
        if not sep or not flavor or not amount.is_finite() or amount < 0:
            raise click.BadParameter(f"{value!r}: write FLAVOR=USD_PER_GPU_HOUR, e.g. a100=3.20", param_hint="--price")
        out[flavor] = amount
    return out


def _rows(rows: list[ledger.UsageRow], prices: dict[str, Decimal]) -> list[dict[str, Any]]:
    ordered = sorted(rows, key=lambda r: (not is_gpu(r.resource), r.group, r.cluster_queue, r.flavor, r.resource))
    out = []
    for r in ordered:
        price = prices.get(r.flavor) if is_gpu(r.resource) else None
        out.append(
            {
                "group": r.group,
                "clusterQueue": r.cluster_queue,
                "flavor": r.flavor,
                "resource": r.resource,
                "hours": float(round(r.hours, 4)),
                "cost": None if price is None else float(round(r.hours * price, 2)),
            }
        )
    return out


@click.command("usage")
@click.option(
    "--by",
    "by",
    default="namespace",
    show_default=True,
    help="Group by namespace, clusterqueue, or a recorded job label: label:team, label:project.",
)
@click.option("--since", default="30d", show_default=True, help="Window: from this long ago until now (12h, 7d, 4w).")
@click.option("--price", "prices", multiple=True, metavar="FLAVOR=USD", help="USD per GPU-hour of a flavor.")
@click.option("-o", "--output", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)
@database_option
def usage_cmd(by: str, since: str, prices: tuple[str, ...], output: str, database_url: str | None) -> None:
    """Resource-hours from the usage ledger (GPU-hours first), with cost where priced.

    Hours are exact: an interval cut short by a preemption counts what ran, and one still open
    counts up to now.
    """
    try:
        by = ledger.parse_by(by)
    except ValueError as exc:
        raise click.BadParameter(str(exc).removeprefix(f"--by {by!r}: "), param_hint="--by") from exc
    priced = _prices(prices)
    start, until = parse_since(since), dt.datetime.now(dt.UTC)
    found = _exec(lambda s: ledger.report(s, by=by, since=start, until=until), database_url=database_url)
    rows = _rows(found, priced)
    if output == "json":
        click.echo(
            json.dumps({"by": by, "since": start.isoformat(), "until": until.isoformat(), "rows": rows}, indent=2)
        )
        return
    if output == "csv":
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=["group", "clusterQueue", "flavor", "resource", "hours", "cost"])
        writer.writeheader()
        writer.writerows(rows)
        click.echo(buffer.getvalue(), nl=False)
        return
    if not rows:
        click.echo(f"no usage recorded between {start:%Y-%m-%d %H:%M} and {until:%Y-%m-%d %H:%M} UTC")
        return
    title = "NAMESPACE" if by == "namespace" else "CLUSTERQUEUE" if by == "clusterqueue" else by[6:].upper()
    table = [[title, "CLUSTERQUEUE", "FLAVOR", "RESOURCE", "HOURS", "COST (USD)"]]
    for r in rows:
        cost = "-" if r["cost"] is None else f"{r['cost']:,.2f}"
        table.append([r["group"], r["clusterQueue"], r["flavor"], r["resource"], f"{r['hours']:,.2f}", cost])
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        cells = [c.ljust(w) if i < 4 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        click.echo("  ".join(cells).rstrip())
    gpu_hours = sum(r["hours"] for r in rows if is_gpu(r["resource"]))
    costs = [r["cost"] for r in rows if r["cost"] is not None]
    total = f"{gpu_hours:,.2f} GPU-hours" + (f", {sum(costs):,.2f} USD" if costs else "")
    click.echo(f"total: {total}  ({start:%Y-%m-%d %H:%M} to {until:%Y-%m-%d %H:%M} UTC)")
