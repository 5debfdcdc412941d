"""``turnstile usage``: resource-hours from the ledger (GPU-hours first), grouped, over a window, priced.

``spec/cli.md``: ``--by namespace|clusterqueue|label:KEY``, ``--since 30d``, ``--price
FLAVOR=USD_PER_GPU_HOUR`` (repeatable; prices GPU resources of that flavor), ``-o table|json|csv``.
Turnstile's additions: each GPU row's ``gpuHours`` in whole cards (a MIG slice by its geometry, a
time-sliced replica a fraction of one, ``queues.gpus.gpu_units``; ``--fraction`` and
``TURNSTILE_GPU_FRACTIONS`` override; a MIG profile of no known card is warned of), which a
flavor's price applies to, and ``--price RESOURCE=USD`` per resource-hour.

GPU efficiency (``admission.store.usage``): each row's ``requestedHours`` (quota held),
``startedHours`` (its jobs ran) and ``usedHours`` (measured utilisation x hours; null without DCGM
data), in whole cards for GPU resources and in the row's own unit otherwise, and ``efficiency``
(mean utilisation over the measured time). ``hours`` keeps its meaning (resource-hours held) and
cost is of the hours held. ``--plot`` draws GPU-hours and efficiency per group over time
(``admission.cli.usage_plot``).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

import click
from sqlalchemy.ext.asyncio import AsyncSession

from admission.cli import usage_plot
from admission.cli.admin import _exec, database_option, parse_since
from admission.cli.ledger_report import card_fractions, group_title, grouping, print_table
from admission.store import card_fractions as recorded_fractions
from admission.store import usage as ledger
from queues.gpus import gpu_units
from queues.podsets.pod_resources import is_gpu

_FIELDS = (
    "group",
    "clusterQueue",
    "flavor",
    "resource",
    "hours",
    "gpuHours",
    "cost",
    "requestedHours",
    "startedHours",
    "usedHours",
    "efficiency",
)


def _prices(values: tuple[str, ...]) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    for value in values:
        flavor, sep, price = value.partition("=")
        try:
            amount = Decimal(price)
        except InvalidOperation:
            amount = Decimal(-1)
        if not sep or not flavor or not amount.is_finite() or amount < 0:
            raise click.BadParameter(
                f"{value!r}: write FLAVOR=USD_PER_GPU_HOUR (a100=3.20) or RESOURCE=USD_PER_HOUR "
                "(nvidia.com/mig-1g.10gb=0.50)",
                param_hint="--price",
            )
        out[flavor] = amount
    return out


BYTES = ("memory", "ephemeral-storage")  # resources counted in bytes: their hours are shown in GiB-hours
# and a DRA mapping's resource named for memory (``gpu.memory``: MIG partitions or shared GPUs charged
# by the memory they take, a counter or capacity in bytes)
MEMORY_SUFFIXES = (".memory", "/memory", "-memory")


def _held(resource: str, hours: float) -> str:
    """Resource-hours for the table: bytes as GiB-hours (the JSON keeps resource-hours, as specified)."""
    if resource in BYTES or resource.startswith("hugepages-") or resource.endswith(MEMORY_SUFFIXES):
        return f"{hours / 2**30:,.2f} GiB"
    return f"{hours:,.2f}"


def _hours(value: Decimal | None, per_unit: Decimal) -> float | None:
    return None if value is None else float(round(value * per_unit, 4))


def _rows(
    rows: list[ledger.UsageRow], prices: dict[str, Decimal], fractions: dict[str, Fraction]
) -> list[dict[str, Any]]:
    """Report rows; a resource's own price (per resource-hour) wins over its flavor's (per card-hour)."""
    ordered = sorted(rows, key=lambda r: (not is_gpu(r.resource), r.group, r.cluster_queue, r.flavor, r.resource))
    out = []
    for r in ordered:
        fraction = gpu_units.card_fraction(r.resource, fractions)
        per_unit = Decimal(1) if fraction is None else Decimal(fraction.numerator) / Decimal(fraction.denominator)
        cards = None if fraction is None else r.hours * per_unit
        if r.resource in prices:
            cost: Decimal | None = r.hours * prices[r.resource]
        elif cards is not None and r.flavor in prices:
            cost = cards * prices[r.flavor]
        else:
            cost = None
        out.append(
            {
                "group": r.group,
                "clusterQueue": r.cluster_queue,
                "flavor": r.flavor,
                "resource": r.resource,
                "hours": float(round(r.hours, 4)),
                "gpuHours": None if cards is None else float(round(cards, 4)),
                "cost": None if cost is None else float(round(cost, 2)),
                "requestedHours": _hours(r.hours, per_unit),
                "startedHours": _hours(r.started, per_unit),
                "usedHours": _hours(r.used, per_unit),
                "efficiency": None if r.efficiency is None else float(round(r.efficiency, 4)),
            }
        )
    return out


async def _read(
    session: AsyncSession, cards: dict[str, Fraction], **report: Any
) -> tuple[list[ledger.UsageRow], dict[str, Fraction]]:
    """The ledger's rows, and what they are billed with: the parts of a card the leader read off the
    cluster's DRA devices, under ``cards`` (TURNSTILE_GPU_FRACTIONS and --fraction)."""
    return await ledger.report(session, **report), await recorded_fractions.billed(session, cards)


def _warn_guesses(rows: list[ledger.UsageRow], fractions: dict[str, Fraction]) -> None:
    """One warning on stderr per GPU resource whose part of a card is a guess (an unknown MIG profile)."""
    for resource in sorted({r.resource for r in rows}):
        if (why := gpu_units.guessed(resource, fractions)) is not None:
            click.echo(f"warning: {why}", err=True)


@click.command("usage")
@click.option(
    "--by",
    "by",
    default="namespace",
    show_default=True,
    help="Group by namespace, clusterqueue, or a recorded job label: label:team, label:project.",
)
@click.option("--since", default="30d", show_default=True, help="Window: from this long ago until now (12h, 7d, 4w).")
@click.option(
    "--price",
    "prices",
    multiple=True,
    metavar="FLAVOR=USD",
    help="USD per GPU-hour (whole card) of a flavor; or RESOURCE=USD per hour of that resource.",
)
@click.option(
    "--fraction",
    "fractions",
    multiple=True,
    metavar="RESOURCE=F",
    help="A card's fraction one unit of a resource is (nvidia.com/mig-1g.6gb=1/4); over TURNSTILE_GPU_FRACTIONS.",
)
@click.option("-o", "--output", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)
@click.option(
    "--plot",
    is_flag=True,
    help="Draw GPU-hours (started) and efficiency per group over the window instead of the table.",
)
@click.option(
    "--every",
    default=None,
    metavar="DURATION",
    help="With --plot: the length of one column (1h, 1d, 1w); by default the window in about 30.",
)
@database_option
def usage_cmd(
    by: str,
    since: str,
    prices: tuple[str, ...],
    fractions: tuple[str, ...],
    output: str,
    plot: bool,
    every: str | None,
    database_url: str | None,
) -> None:
    """Resource-hours from the usage ledger (GPU-hours first), with cost where priced.

    Hours are exact: an interval cut short by a preemption counts what ran, and one still open
    counts up to now.
    """
    by = grouping(by)
    priced = _prices(prices)
    cards = card_fractions(fractions)
    start, until = parse_since(since), dt.datetime.now(dt.UTC)
    if plot:
        step = usage_plot.bucket_of(start, until, every)
        found, cards = _exec(
            lambda s: _read(s, cards, by=by, since=start, until=until, bucket=step), database_url=database_url
        )
        _warn_guesses(found, cards)
        click.echo(usage_plot.draw(found, by=by, since=start, until=until, bucket=step, fractions=cards), nl=False)
        return
    found, cards = _exec(lambda s: _read(s, cards, by=by, since=start, until=until), database_url=database_url)
    _warn_guesses(found, cards)
    rows = _rows(found, priced, cards)
    if output == "json":
        click.echo(
            json.dumps({"by": by, "since": start.isoformat(), "until": until.isoformat(), "rows": rows}, indent=2)
        )
        return
    if output == "csv":
        buffer = io.StringIO()
        fields = list(rows[0]) if rows else [*_FIELDS]
        writer = csv.DictWriter(buffer, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
        click.echo(buffer.getvalue(), nl=False)
        return
    if not rows:
        click.echo(f"no usage recorded between {start:%Y-%m-%d %H:%M} and {until:%Y-%m-%d %H:%M} UTC")
        return
    title = group_title(by)
    table = [
        [title, "CLUSTERQUEUE", "FLAVOR", "RESOURCE", "HOURS", "GPU-HOURS", "STARTED", "USED", "EFF", "COST (USD)"]
    ]
    for r in rows:
        cost = "-" if r["cost"] is None else f"{r['cost']:,.2f}"
        whole = "-" if r["gpuHours"] is None else f"{r['gpuHours']:,.2f}"
        used = "-" if r["usedHours"] is None else f"{r['usedHours']:,.2f}"
        eff = "-" if r["efficiency"] is None else f"{r['efficiency']:.0%}"
        table.append(
            [r["group"], r["clusterQueue"], r["flavor"], r["resource"], _held(r["resource"], r["hours"]), whole,
             _held(r["resource"], r["startedHours"]), used, eff, cost]
        )  # fmt: skip
    print_table(table, numeric=range(4, len(table[0])))
    gpu_hours = sum(r["gpuHours"] for r in rows if r["gpuHours"] is not None)
    costs = [r["cost"] for r in rows if r["cost"] is not None]
    gpu_rows = [r for r in rows if r["gpuHours"] is not None]
    started = sum(r["startedHours"] for r in gpu_rows)
    measured = [r for r in gpu_rows if r["usedHours"] is not None]
    total = f"{gpu_hours:,.2f} GPU-hours held, {started:,.2f} started"
    if measured:
        total += f", {sum(r['usedHours'] for r in measured):,.2f} used where measured"
    if costs:
        total += f", {sum(costs):,.2f} USD"
    click.echo(f"total: {total}  ({start:%Y-%m-%d %H:%M} to {until:%Y-%m-%d %H:%M} UTC)")
