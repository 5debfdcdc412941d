"""Admin commands over the store: db upgrade, apply, convert, get, describe, delete; and the helpers
every store command shares (running against the store with user-facing errors, ``--database-url``,
``--since`` durations). The quick edits (quota, stop/resume) and history are ``admission.cli.edits``."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click
import yaml
from sqlalchemy.ext.asyncio import AsyncSession

from admission import views
from admission.cli import bounds, documents, instead, kinds, store_commands
from admission.cli.store_commands import StoreUnavailable, actor, run
from admission.settings import Settings
from admission.store import card_fractions as recorded_fractions
from admission.store import config as config_store
from admission.store import database, deletion, read_models, source
from queues import errors
from queues.kueue import api, codec, validation

T = TypeVar("T")


def _settings() -> Settings:
    return Settings()


def _exec(fn: Callable[[AsyncSession], Awaitable[T]], *, database_url: str | None = None) -> T:
    """Run against the store; user-facing failures become one line on stderr and an exit status."""
    try:
        return run(_settings(), fn, database_url=database_url)
    except StoreUnavailable as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except config_store.NotFound as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except config_store.Refused as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except errors.Invalid as exc:
        for e in exc.errors:
            click.echo(f"error: {exc.subject + ': ' if exc.subject else ''}{e}", err=True)
        sys.exit(1)


database_option = click.option(
    "--database-url",
    default=None,
    envvar=None,
    help="PostgreSQL URL (default: TURNSTILE_DATABASE_URL, else the embedded one).",
)


@click.group("db")
def db() -> None:
    """Database maintenance."""


@db.command("upgrade")
@database_option
def db_upgrade(database_url: str | None) -> None:
    """Apply the schema migrations (the controller also does this at start)."""
    settings = _settings()
    try:
        url = database.resolve_url(settings, database_url)
        before = asyncio.run(store_commands.revision(url))
        asyncio.run(database.upgrade(url))
    except Exception as exc:  # migrations surface driver errors of many kinds
        click.echo(f"error: could not migrate the database: {str(exc).splitlines()[0]}", err=True)
        sys.exit(1)
    head = database.SCHEMA_HEAD
    if before is None:
        click.echo(f"database schema created (revision {head})")
    elif before != head:
        click.echo(f"database schema migrated from revision {before} to {head}")
    else:
        click.echo(f"database schema is up to date (revision {head})")


# ----- apply --------------------------------------------------------------------------------


def parse_documents(path: str, *, verb: str = "applied") -> list[api.KueueObject]:
    """Every Kueue object in ``path``, or exit: 2 unreadable, 1 invalid (every problem listed, then
    ``nothing was <verb>``)."""
    try:
        docs = documents.load_documents(path)
    except documents.Unreadable as exc:
        for line in exc.lines:
            click.echo(f"error: {line}", err=True)
        sys.exit(2)
    if not docs:
        click.echo(f"error: {path}: no objects found", err=True)
        sys.exit(2)
    objects: list[api.KueueObject] = []
    problems: list[str] = []
    seen: dict[tuple[str, str], str] = {}
    afs = bool(_settings().admission_fair_sharing.strip())  # (the controller's, from the same environment)
    for doc in docs:
        body = doc.body if isinstance(doc.body, dict) else {}
        label = f"{body.get('kind', '?')}/{(body.get('metadata') or {}).get('name', '?')}" if body else "?"
        try:
            obj = codec.parse(doc.body)
        except errors.Invalid as exc:
            problems += [f"{doc.where} ({label}): {e}" for e in exc.errors]
            continue
        for unused in validation.unused_fields(obj, admission_fair_sharing=afs):
            click.echo(f"warning: {doc.where} ({label}): {unused}", err=True)
        ident = (obj.kind, obj.key)
        if ident in seen:
            problems.append(
                f"{doc.where} ({label}): metadata.name: duplicate {obj.kind} {obj.key!r}, also in {seen[ident]}"
            )
        seen[ident] = doc.where
        objects.append(obj)
    if problems:
        for p in problems:
            click.echo(f"error: {p}", err=True)
        click.echo(f"nothing was {verb}", err=True)
        sys.exit(1)
    return objects


@click.command("apply")
@click.option("-f", "--filename", "path", required=True, help="A YAML file, a folder of them, or - for stdin.")
@click.option("--dry-run", is_flag=True, help="Validate and report what would change; write nothing.")
@bounds.options(seconds=300, memory_gib=2)
@database_option
def apply_cmd(path: str, dry_run: bool, max_seconds: float, max_memory: float, database_url: str | None) -> None:
    """Create or replace Kueue objects (v1beta1 or v1beta2 YAML); all or nothing, audited."""
    limit = bounds.Bounds(max_seconds, int(max_memory * bounds.GIB))
    with bounds.bounded(f"apply -f {path}", limit, hint="nothing was applied; split the input into smaller files"):
        objects = parse_documents(path)
        who = actor(_settings())

        async def go(session: AsyncSession) -> list[config_store.Outcome]:
            if not dry_run:
                await source.require_database(session, instead.apply(path, objects))
            return await config_store.apply(session, objects, actor=who, dry_run=dry_run)

        outcomes = _exec(go, database_url=database_url)
    suffix = " (dry run)" if dry_run else ""
    for o in outcomes:
        click.echo(f"{kinds.singular(o.kind)}/{o.name} {o.result}{suffix}")


@click.command("convert")
@click.option("-f", "--filename", "path", required=True, help="A YAML file, a folder of them, or - for stdin.")
def convert_cmd(path: str) -> None:
    """Print Kueue objects (v1beta1 or v1beta2 YAML) as validated v1beta2, for kubectl apply -f -."""
    objects = parse_documents(path, verb="converted")
    click.echo(yaml.safe_dump_all([codec.to_manifest(o, version="v1beta2") for o in objects], sort_keys=False).rstrip())


# ----- get / describe -----------------------------------------------------------------------


def _kind_arg(value: str) -> str:
    try:
        return kinds.resolve(value)
    except kinds.UnknownKind as exc:
        raise click.BadParameter(str(exc)) from None


@click.command("get")
@click.argument("kind")
@click.argument("name", required=False)
@click.option("-n", "--namespace", default=None, help="Namespace of LocalQueues and workloads.")
@click.option("-A", "--all-namespaces", is_flag=True, help="Every namespace (the default without -n).")
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table", show_default=True)
@database_option
def get_cmd(
    kind: str, name: str | None, namespace: str | None, all_namespaces: bool, output: str, database_url: str | None
) -> None:
    """List objects of KIND (cq, lq, rf, cohorts, wpc, wl), or show one by NAME."""
    resolved = _kind_arg(kind)
    ns = None if all_namespaces else namespace
    if resolved == "Workload":
        if output == "table":
            rows = _exec(lambda s: read_models.workload_rows(s, namespace=ns, name=name), database_url=database_url)
            views.print_workloads(rows, output)
        else:  # Kueue's Workload shape, as kubectl get workloads -o yaml shows it
            found = _exec(lambda s: read_models.workload_objects(s, ns, name), database_url=database_url)
            click.echo(views.dump(found, output))
        return
    key = f"{ns or 'default'}/{name}" if (name and resolved == "LocalQueue" and "/" not in name) else name

    async def fetch(session: AsyncSession) -> tuple[list[api.KueueObject], dict[str, Any], str]:
        if key:
            objs = [await config_store.load_object(session, resolved, key)]
        else:
            objs = await config_store.list_objects(session, resolved, namespace=ns)
        extra = await read_models.queue_counts(session) if resolved in ("ClusterQueue", "LocalQueue") else {}
        return objs, extra, await source.get(session)

    objs, counts, declared = _exec(fetch, database_url=database_url)
    if output == "table":
        views.print_objects(resolved, objs, counts)
        click.echo(instead.mode_line(declared), err=True)  # on stderr: the table stays parseable
        return
    manifests = [codec.to_manifest(o, version=o.version) for o in objs]
    body: Any = manifests[0] if key else {"apiVersion": "v1", "kind": "List", "items": manifests}
    click.echo(json.dumps(body, indent=2) if output == "json" else yaml.safe_dump(body, sort_keys=False).rstrip())


@click.command("describe")
@click.argument("kind")
@click.argument("name")
@database_option
def describe_cmd(kind: str, name: str, database_url: str | None) -> None:
    """Show one object in detail: quotas and usage, state, queue position, why it waits, history."""
    resolved = _kind_arg(kind)

    async def go(session: AsyncSession) -> str:
        fractions = await recorded_fractions.billed(session, _settings().card_fractions)
        text = await views.describe(session, resolved, name, fractions=fractions)
        if resolved == "Workload":
            return text
        return f"{text}\n{instead.mode_line(await source.get(session))}"

    click.echo(_exec(go, database_url=database_url))


@click.command("delete")
@click.argument("kind")
@click.argument("name")
@click.option("-n", "--namespace", default=None)
@database_option
def delete_cmd(kind: str, name: str, namespace: str | None, database_url: str | None) -> None:
    """Delete an object; a ClusterQueue is refused while admitted workloads use it."""
    resolved = _kind_arg(kind)
    if resolved == "Workload":
        raise click.BadParameter("workloads follow their jobs: delete the job with kubectl")
    key = f"{namespace or 'default'}/{name}" if resolved == "LocalQueue" and "/" not in name else name
    who = actor(_settings())

    async def go(session: AsyncSession) -> config_store.Outcome:
        await source.require_database(session, instead.delete(resolved, key))
        return await deletion.delete_object(session, resolved, key, actor=who)

    outcome = _exec(go, database_url=database_url)
    click.echo(f"{kinds.singular(outcome.kind)}/{outcome.name} deleted")


# ----- durations (--since) ---------------------------------------------------------------------

_DURATION = re.compile(r"^(\d+)([smhdw])$")


_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def span_of(value: str, units: str = "smhdw") -> dt.timedelta | None:
    """A CLI duration (``30m``, ``12h``, ``7d``, ``4w``) in one of ``units``; None if it is not one."""
    match = _DURATION.match(value)
    if not match or match.group(2) not in units:
        return None
    return dt.timedelta(seconds=int(match.group(1)) * _UNIT_SECONDS[match.group(2)])


def parse_since(value: str) -> dt.datetime:
    span = span_of(value)
    if span is None:
        raise click.BadParameter(f"{value!r}: use a duration such as 30m, 12h, 7d or 4w")
    return dt.datetime.now(dt.UTC) - span
