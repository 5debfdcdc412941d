"""Quick edits and their record: ``quota set``, ``stop``/``resume`` (a queue's stopPolicy, a
workload's ``spec.active``) and ``history``, the audit log every admin edit writes.

Each edit goes through the store's audited functions; where Kubernetes declares the queues
(``source`` is ``kubernetes``), a queue edit is refused with the ``kubectl`` command that makes it
instead (``admission.cli.instead``), so the two never disagree.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Awaitable, Callable
from typing import Any

import click
import yaml
from sqlalchemy.ext.asyncio import AsyncSession

from admission.cli import instead, kinds
from admission.cli.admin import _exec, _kind_arg, _settings, database_option, parse_since
from admission.cli.store_commands import actor
from admission.store import activity, source, workload_objects
from admission.store import config as config_store
from queues import quantity

# ----- quota / stop / resume -------------------------------------------------------------------


def _qty(value: str | None, what: str) -> int | None:
    if value is None:
        return None
    try:
        milli = quantity.parse_milli(value)
    except quantity.QuantityError as exc:
        raise click.BadParameter(f"{what}: {exc}") from None
    if milli < 0:
        raise click.BadParameter(f"{what}: must be >= 0")
    return milli


@click.group("quota")
def quota() -> None:
    """Quick quota edits."""


@quota.command("set")
@click.argument("cluster_queue")
@click.argument("assignment", metavar="RESOURCE=QTY")
@click.option("--flavor", required=True, help="The ResourceFlavor whose quota to set.")
@click.option("--borrowing-limit", default=None, help="Also set the borrowing limit (needs a cohort).")
@click.option("--lending-limit", default=None, help="Also set the lending limit (needs a cohort).")
@database_option
def quota_set(
    cluster_queue: str,
    assignment: str,
    flavor: str,
    borrowing_limit: str | None,
    lending_limit: str | None,
    database_url: str | None,
) -> None:
    """Set the nominal quota of RESOURCE in one flavor of CLUSTER_QUEUE, e.g. nvidia.com/gpu=24."""
    match = re.fullmatch(r"([^=\s]+)=(\S+)", assignment)
    if not match:
        raise click.BadParameter(f"{assignment!r}: write RESOURCE=QTY, e.g. nvidia.com/gpu=24")
    resource, value = match.groups()
    nominal = _qty(value, resource)
    assert nominal is not None
    who = actor(_settings())
    borrowing, lending = _qty(borrowing_limit, "--borrowing-limit"), _qty(lending_limit, "--lending-limit")

    async def go(session: AsyncSession) -> config_store.Outcome:
        if await source.get(session) == source.KUBERNETES:
            manifest = config_store.manifest_of(await config_store.load_object(session, "ClusterQueue", cluster_queue))
            values = {"nominalQuota": nominal, "borrowingLimit": borrowing, "lendingLimit": lending}
            command = instead.quota(cluster_queue, manifest, flavor=flavor, resource=resource, values=values)
            await source.require_database(session, command)
        return await config_store.set_quota(
            session,
            cluster_queue,
            flavor=flavor,
            resource=resource,
            nominal=nominal,
            borrowing_limit=borrowing,
            lending_limit=lending,
            actor=who,
        )

    outcome = _exec(go, database_url=database_url)
    click.echo(f"clusterqueue/{outcome.name} {outcome.result}")


def _stop_target(kind: str, name: str) -> tuple[str, str]:
    resolved = _kind_arg(kind)
    if resolved not in ("ClusterQueue", "LocalQueue", "Workload"):
        raise click.BadParameter("stop and resume take clusterqueue, localqueue or workload")
    if resolved in ("LocalQueue", "Workload") and "/" not in name:
        raise click.BadParameter(f"name a {resolved} as NAMESPACE/NAME")
    return resolved, name


Edit = Callable[[AsyncSession], Awaitable[config_store.Outcome]]


def _stop_policy(kind: str, key: str, policy: str, who: str) -> Edit:
    async def go(session: AsyncSession) -> config_store.Outcome:
        if kind == "Workload":  # (workloads live in the database whatever declares the queues)
            namespace, _, name = key.partition("/")
            return await activity.request(session, namespace, name, active=policy == "None", actor=who)
        await source.require_database(session, instead.stop_policy(kind, key, policy))
        return await config_store.set_stop_policy(session, kind, key, policy, actor=who)

    return go


@click.command("stop")
@click.argument("kind")
@click.argument("name")
@click.option("--drain", is_flag=True, help="Also evict admitted workloads (HoldAndDrain); default: let them finish.")
@database_option
def stop_cmd(kind: str, name: str, drain: bool, database_url: str | None) -> None:
    """Stop admitting from a ClusterQueue or LocalQueue (stopPolicy Hold, or HoldAndDrain), or stop
    one workload (NAMESPACE/NAME: Kueue's spec.active false; it releases its quota and waits)."""
    resolved, key = _stop_target(kind, name)
    if resolved == "Workload" and drain:
        raise click.BadParameter("--drain is for queues: a stopped workload always releases its quota")
    who = actor(_settings())
    policy = "HoldAndDrain" if drain else "Hold"
    outcome = _exec(_stop_policy(resolved, key, policy, who), database_url=database_url)
    unchanged = "" if outcome.result != "unchanged" else ", unchanged"
    if resolved == "Workload":
        click.echo(f"workload/{outcome.name} stopped (spec.active: false){unchanged}")
        return
    click.echo(f"{kinds.singular(resolved)}/{key} stopped ({policy}){unchanged}")


@click.command("resume")
@click.argument("kind")
@click.argument("name")
@database_option
def resume_cmd(kind: str, name: str, database_url: str | None) -> None:
    """Resume admitting from a stopped ClusterQueue or LocalQueue, or let a stopped workload
    (NAMESPACE/NAME) queue again."""
    resolved, key = _stop_target(kind, name)
    who = actor(_settings())
    outcome = _exec(_stop_policy(resolved, key, "None", who), database_url=database_url)
    unchanged = "" if outcome.result != "unchanged" else ", unchanged"
    click.echo(f"{kinds.singular(resolved)}/{outcome.name if resolved == 'Workload' else key} resumed{unchanged}")


# ----- history ---------------------------------------------------------------------------------


def _yaml(body: dict[str, Any] | None) -> list[str]:
    return [] if body is None else yaml.safe_dump(body, sort_keys=False).splitlines()


@click.command("history")
@click.argument("target", required=False, metavar="[KIND/NAME]")
@click.option("--since", default="7d", show_default=True, help="How far back: 30m, 12h, 7d, 4w.")
@database_option
def history_cmd(target: str | None, since: str, database_url: str | None) -> None:
    """The audit log of admin edits: when, who, and what changed (before -> after)."""
    kind = name = None
    if target:
        if "/" not in target:
            raise click.BadParameter("write KIND/NAME, e.g. clusterqueue/team-a or localqueue/ns/name")
        raw_kind, name = target.split("/", 1)
        kind = _kind_arg(raw_kind)
    start = parse_since(since)

    async def read(session: AsyncSession) -> list[config_store.HistoryEntry]:
        named = name
        if kind == "Workload" and named and "/" in named:  # its job's name, or its Workload object's
            namespace, short = named.split("/", 1)
            obj = await workload_objects.get(session, namespace, short)
            named = f"{namespace}/{obj['metadata']['name']}" if obj is not None else named
        return await config_store.history(session, kind=kind, name=named, since=start)

    entries = _exec(read, database_url=database_url)
    if not entries:
        click.echo(f"no edits since {start:%Y-%m-%d %H:%M} UTC")
        return
    for e in entries:
        click.echo(f"{e.at:%Y-%m-%d %H:%M:%S} UTC  {e.actor}  {e.action}  {kinds.singular(e.kind)}/{e.name}")
        diff = difflib.unified_diff(_yaml(e.before), _yaml(e.after), "before", "after", lineterm="", n=2)
        for line in list(diff)[2:]:
            click.echo(f"    {line}")
