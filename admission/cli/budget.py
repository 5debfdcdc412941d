"""``turnstile budget``: GPU-hour budgets per ClusterQueue or team label (``admission.store.budgets``).

``set`` creates or changes one (``--cluster-queue NAME`` or ``--label team=alg-2``, ``--gpu-hours``,
``--period monthly|720h``, ``--when-exhausted wait|lower-priority --priority N``), ``list`` shows
each with what it used this period, ``delete`` removes one. Every edit is audited (``turnstile
history``, kind ``GPUBudget``); the controller enforces them (new work of an exhausted budget waits
with reason ``BudgetExhausted``, or runs at the budget's priority: ``queues.cycle.budget_priority``).
"""

from __future__ import annotations

import datetime as dt
import json
import sys

import click
from sqlalchemy.ext.asyncio import AsyncSession

from admission.cli.admin import _exec, _settings, database_option
from admission.cli.store_commands import actor
from admission.store import budgets as store
from admission.store import card_fractions as recorded_fractions
from admission.views import print_columns

WHICH = ("--cluster-queue", "--label")


def _labels(values: tuple[str, ...], known: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for value in values:
        key, sep, val = value.partition("=")
        if not sep or not key or not val:
            raise click.BadParameter(f"{value!r}: write KEY=VALUE (team=alg-2)", param_hint="--label")
        if key not in known:
            raise click.BadParameter(
                f"{key!r} is not a ledger label ({', '.join(known)}): budgets are measured from the usage "
                "ledger, which records only TURNSTILE_LEDGER_LABELS; add it there first",
                param_hint="--label",
            )
        out[key] = val
    return out


@click.group("budget")
def budget() -> None:
    """GPU-hour budgets per ClusterQueue or team label, per period (audited)."""


@budget.command("set")
@click.option("--cluster-queue", default=None, help="The ClusterQueue whose workloads it caps.")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", help="The jobs it caps (a ledger label).")
@click.option("--gpu-hours", type=float, required=True, help="GPU-hours per period (whole cards; >= 0).")
@click.option("--period", default=store.MONTHLY, show_default=True, help="monthly (calendar, UTC) or a duration.")
@click.option(
    "--when-exhausted",
    type=click.Choice(["wait", "lower-priority"]),
    default="wait",
    show_default=True,
    help="Once spent: new work waits (BudgetExhausted), or runs at --priority (preemptible by higher).",
)
@click.option("--priority", type=int, default=None, help="With --when-exhausted lower-priority: the priority.")
@database_option
def set_cmd(
    cluster_queue: str | None,
    labels: tuple[str, ...],
    gpu_hours: float,
    period: str,
    when_exhausted: str,
    priority: int | None,
    database_url: str | None,
) -> None:
    """Create or change a budget."""
    settings = _settings()
    if (when_exhausted == "lower-priority") != (priority is not None):
        click.echo(
            "error: --priority N goes with --when-exhausted lower-priority (the priority the budget's new work "
            "runs at once it is spent), and only with it",
            err=True,
        )
        sys.exit(2)
    try:
        stored = store.make(
            cluster_queue=cluster_queue,
            labels=_labels(labels, settings.ledger_label_keys),
            gpu_hours=gpu_hours,
            period=period,
            lower_priority=priority,
        )
    except ValueError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    who = actor(settings)

    async def go(session: AsyncSession) -> str:
        return await store.put(session, stored, actor=who)

    result = _exec(go, database_url=database_url)
    click.echo(f"budget/{stored.name} {result}")


@budget.command("delete")
@click.argument("name")
@database_option
def delete_cmd(name: str, database_url: str | None) -> None:
    """Delete a budget by its name (as `turnstile budget list` shows it)."""
    who = actor(_settings())

    async def go(session: AsyncSession) -> bool:
        return await store.delete(session, name, actor=who)

    if not _exec(go, database_url=database_url):
        click.echo(f"error: budget/{name} not found (see turnstile budget list)", err=True)
        sys.exit(1)
    click.echo(f"budget/{name} deleted")


@budget.command("list")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True)
@database_option
def list_cmd(output: str, database_url: str | None) -> None:
    """Every budget, with the GPU-hours it used this period."""
    now = dt.datetime.now(dt.UTC)
    overrides = _settings().card_fractions

    async def go(session: AsyncSession) -> list[dict[str, object]]:
        fractions = await recorded_fractions.billed(session, overrides)
        rows = []
        for b in await store.load(session):
            used = await store.used_hours(session, b, now, fractions=fractions)
            _, end = store.current_period(b.period, now)
            limit = b.budget.gpu_hours
            rows.append(
                {
                    "name": b.name,
                    "gpuHours": limit,
                    "period": b.period,
                    "usedThisPeriod": round(used, 2),
                    "periodEnds": end.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "exhausted": used >= limit,
                    "whenExhausted": "Wait" if b.budget.lower_priority is None else "LowerPriority",
                    "priority": b.budget.lower_priority,
                }
            )
        return rows

    rows = _exec(go, database_url=database_url)
    if output == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    print_columns(
        ["NAME", "GPU-HOURS", "PERIOD", "USED", "ENDS", "STATE", "WHEN-EXHAUSTED"],
        [
            [str(r["name"]), f"{r['gpuHours']:g}", str(r["period"]), f"{r['usedThisPeriod']:g}", str(r["periodEnds"]),
             "exhausted" if r["exhausted"] else "ok",
             "wait" if r["priority"] is None else f"priority {r['priority']}"]
            for r in rows
        ],
    )  # fmt: skip
