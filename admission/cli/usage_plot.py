"""``turnstile usage --plot``: GPU-hours and efficiency per group over time, in the terminal.

Why a text plot: the usage report is read where the CLI runs (a bastion, a CI log, an SSH
session), with no browser or plotting library at hand; one line of block characters per group
shows who used the GPUs when, and how busy they kept them, at a glance. The dashboard
(``/ui/``) is the graphical view.

Each column is one bucket of the window (``--every``, or the window cut into about 30). The
first plot is GPU-hours *started* in whole cards (MIG slices and time-sliced replicas as their
fraction of a card, as the table bills them), all groups on one scale so they compare; the
second is *efficiency*, used / measured hours in the bucket, from ▁ (0 %) to █ (100 %), with
``·`` where the group ran but DCGM measured nothing (unknown, never idle).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from fractions import Fraction

import click

from admission.cli import admin
from admission.cli.ledger_report import group_title
from admission.store import usage as ledger
from queues.gpus import gpu_units

BLOCKS = "▁▂▃▄▅▆▇█"
UNMEASURED = "·"
MAX_COLUMNS = 200
_STEPS = (
    dt.timedelta(hours=1),
    dt.timedelta(hours=3),
    dt.timedelta(hours=6),
    dt.timedelta(hours=12),
    dt.timedelta(days=1),
    dt.timedelta(weeks=1),
)


def bucket_of(since: dt.datetime, until: dt.datetime, every: str | None) -> dt.timedelta:
    """The length of one column: ``--every`` (checked), or the smallest usual step giving at most
    40 columns."""
    span = until - since
    if every is None:
        return next((s for s in _STEPS if span / s <= 40), span / 30)
    step = admin.span_of(every, units="mhdw")
    if step is None or not step:
        raise click.BadParameter(f"{every!r}: use a duration such as 1h, 6h, 1d or 1w", param_hint="--every")
    if span / step > MAX_COLUMNS:
        raise click.BadParameter(
            f"{every!r} cuts the window into {int(span / step)} columns (at most {MAX_COLUMNS}): "
            "use a longer --every or a shorter --since",
            param_hint="--every",
        )
    return step


def _spark(value: Decimal, peak: Decimal) -> str:
    if value <= 0 or peak <= 0:
        return " "
    level = int(min(Decimal(1), value / peak) * len(BLOCKS) - Decimal("0.000001"))
    return BLOCKS[max(0, min(len(BLOCKS) - 1, level))]


def draw(
    rows: list[ledger.UsageRow],
    *,
    by: str,
    since: dt.datetime,
    until: dt.datetime,
    bucket: dt.timedelta,
    fractions: dict[str, Fraction],
) -> str:
    """The plot of a bucketed report (``ledger.report(..., bucket=...)``), as text."""
    columns = max(1, -(-int((until - since).total_seconds()) // max(1, int(bucket.total_seconds()))))
    started: dict[str, list[Decimal]] = {}
    measured: dict[str, list[Decimal]] = {}
    busy: dict[str, list[Decimal]] = {}
    for r in rows:
        fraction = gpu_units.card_fraction(r.resource, fractions)
        if fraction is None or r.bucket is None:
            continue  # (not a GPU resource: GPU-hours only)
        col = min(columns - 1, max(0, int((r.bucket - since) / bucket)))
        per_card = Decimal(fraction.numerator) / Decimal(fraction.denominator)
        for table, value in ((started, r.started), (measured, r.measured), (busy, r.busy)):
            table.setdefault(r.group, [Decimal(0)] * columns)[col] += value * per_card
    title = group_title(by)
    every = _duration(bucket)
    head = (
        f"GPU-hours started and GPU efficiency by {title.lower()}, one column per {every}, "
        f"{since:%Y-%m-%d %H:%M} to {until:%Y-%m-%d %H:%M} UTC\n"
    )
    groups = sorted(g for g, values in started.items() if any(values))
    if not groups:
        return head + "no GPU workload ran in this window\n"
    peak = max(max(started[g]) for g in groups)
    head += (
        f"GPU-HOURS: all on one scale, █ = {peak:,.2f} GPU-hours in a column; "
        f"EFFICIENCY: ▁ 0 % .. █ 100 %, {UNMEASURED} ran but not measured\n\n"
    )
    width = max(len(title), *(len(g) for g in groups))
    pad = max(columns, len("GPU-HOURS"))
    lines = [f"{title:<{width}}  {'GPU-HOURS':<{pad}}  {'TOTAL':>10}  {'EFFICIENCY':<{pad}}  MEAN"]
    for g in groups:
        hours = "".join(_spark(v, peak) for v in started[g])
        eff_cells = []
        for ran, seen, used in zip(started[g], measured[g], busy[g], strict=True):
            if ran <= 0:
                eff_cells.append(" ")
            elif seen <= 0:
                eff_cells.append(UNMEASURED)
            else:
                level = int(used / seen * len(BLOCKS) + Decimal("0.000001"))  # (measured in floats)
                eff_cells.append(BLOCKS[min(len(BLOCKS) - 1, level)])
        seen_total = sum(measured[g])
        mean = f"{sum(busy[g]) / seen_total:.0%}" if seen_total > 0 else "-"
        total = f"{sum(started[g]):,.2f}"
        lines.append(f"{g:<{width}}  {hours:<{pad}}  {total:>10}  {''.join(eff_cells):<{pad}}  {mean}")
    return head + "\n".join(lines) + "\n"


def _duration(step: dt.timedelta) -> str:
    seconds = int(step.total_seconds())
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
