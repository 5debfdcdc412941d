"""What ``get`` and ``describe`` show: tables for people, Kueue's shapes for machines, made from the
read models (``admission.store.read_models``). The CLI and the dashboard share it (here, below
both, so the dashboard need not import the CLI)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from fractions import Fraction
from io import StringIO
from typing import Any

import click
import yaml
from sqlalchemy.ext.asyncio import AsyncSession

from admission import workload_lines
from admission.store import config as config_store
from admission.store import fair_usage
from admission.store import rightsizing as rightsizing_store
from admission.store import workload_objects as workload_objects_store
from admission.store import workloads as store
from admission.store.read_models import controller_fair_sharing, held_by_flavor, named, workload_rows
from queues import quantity
from queues.cycle import fairsharing
from queues.cycle.assignment import TOPOLOGY_PLACEMENT_FAILED, Assignment, Mode
from queues.cycle.scheduler import Scheduler
from queues.kueue import api, codec
from queues.model import ClusterQueue, FlavorResource, Snapshot
from queues.podsready import PODS_UNSCHEDULABLE


def _quota_summary(groups: list[api.ResourceGroup]) -> str:
    parts = []
    for g in groups:
        for f in g.flavors:
            for r in f.resources:
                parts.append(f"{r.name}:{f.name}={quantity.format_milli(r.nominal_quota)}")
    return ", ".join(parts)


def print_columns(headers: list[str], rows: list[list[str]]) -> None:
    """kubectl-style columns: fast for thousands of rows, easy to grep and cut."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    lines = [
        "   ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in [headers, *rows]
    ]
    click.echo("\n".join(lines))


def print_objects(kind: str, objs: list[api.KueueObject], counts: dict[str, Any]) -> None:
    if not objs:
        click.echo(f"No {kind} found.")
        return
    rows: list[list[str]] = []
    if kind == "ClusterQueue":
        headers = ["NAME", "COHORT", "STRATEGY", "PENDING", "ADMITTED", "STOP", "QUOTA"]
        for o in objs:
            assert isinstance(o, api.ClusterQueue)
            c = counts.get(f"cq/{o.name}", {})
            rows.append(
                [
                    o.name,
                    o.spec.cohort_ref or "",
                    o.spec.queueing_strategy,
                    str(c.get("Pending", 0)),
                    str(c.get("Admitted", 0)),
                    o.spec.stop_policy,
                    _quota_summary(o.spec.resource_groups),
                ]
            )
    elif kind == "LocalQueue":
        headers = ["NAMESPACE", "NAME", "CLUSTERQUEUE", "PENDING", "ADMITTED", "STOP"]
        for o in objs:
            assert isinstance(o, api.LocalQueue)
            c = counts.get(f"lq/{o.metadata.namespace}/{o.name}", {})
            rows.append(
                [
                    o.metadata.namespace or "",
                    o.name,
                    o.spec.cluster_queue,
                    str(c.get("Pending", 0)),
                    str(c.get("Admitted", 0)),
                    o.spec.stop_policy,
                ]
            )
    elif kind == "ResourceFlavor":
        headers = ["NAME", "NODE LABELS", "TAINTS"]
        for o in objs:
            assert isinstance(o, api.ResourceFlavor)
            labels = ",".join(f"{k}={v}" for k, v in o.spec.node_labels.items())
            taints = ",".join(f"{t.key}={t.value}:{t.effect}" for t in o.spec.node_taints)
            rows.append([o.name, labels, taints])
    elif kind == "WorkloadPriorityClass":
        headers = ["NAME", "VALUE", "DESCRIPTION"]
        for o in objs:
            assert isinstance(o, api.WorkloadPriorityClass)
            rows.append([o.name, str(o.value), o.description])
    elif kind == "Cohort":
        headers = ["NAME", "PARENT", "QUOTA"]
        for o in objs:
            assert isinstance(o, api.Cohort)
            rows.append([o.name, o.spec.parent_ref or "", _quota_summary(o.spec.resource_groups)])
    else:
        headers = ["NAME"]
        rows = [[o.key] for o in objs]
    print_columns(headers, rows)


def dump(body: dict[str, Any], output: str) -> str:
    return json.dumps(body, indent=2) if output == "json" else yaml.safe_dump(body, sort_keys=False).rstrip()


def print_workloads(rows: list[dict[str, Any]], output: str) -> None:
    if not rows:
        click.echo("No workloads found.")
        return
    # NAME is the job's; WORKLOAD the Workload object's, as ``kubectl get workloads`` shows it
    headers = ["NAMESPACE", "NAME", "WORKLOAD", "LOCALQUEUE", "CLUSTERQUEUE", "STATE", "PRIORITY", "POSITION", "REASON"]
    table_rows = []
    for r in rows:
        pos = f"{r['cq_position']} in cq, {r['lq_position']} in lq" if r["cq_position"] else ""
        table_rows.append(
            [
                r["namespace"],
                r["name"],
                r["object_name"],
                r["local_queue"] or "",
                r["cluster_queue"] or "",
                r["state"],
                str(r["priority"]),
                pos,
                r["reason"] or "",
            ]
        )
    print_columns(headers, table_rows)


async def _gpu_memory_lines(session: AsyncSession, key: str, fractions: Mapping[str, Fraction] | None) -> list[str]:
    """Right-sizing's verdict on the workload's measured runs (``queues.gpus.rightsizing``), one line
    per GPU resource; none without data."""
    found = await rightsizing_store.of_workload(session, key)
    if not found:
        return []
    judged = rightsizing_store.judge(found, await rightsizing_store.offers(session), fractions)
    many = len(judged) > 1
    return [f"{j.use.resource}: {j.verdict.line}" if many else j.verdict.line for j in judged]


async def _describe_workload(
    session: AsyncSession, console: Any, r: dict[str, Any], everyone: list[dict[str, Any]]
) -> None:
    """The rest of ``describe workload``: who is ahead, what it needs against what is free, whom it
    could preempt, and its history of admissions and evictions. ``everyone``: every unfinished row."""
    from rich.table import Table

    cq_name = r["cluster_queue"]
    if r["cq_position"]:
        ahead = sorted(
            (
                x
                for x in everyone
                if x["cluster_queue"] == cq_name and x["cq_position"] and x["cq_position"] < r["cq_position"]
            ),
            key=lambda x: x["cq_position"],
        )
        shown = ", ".join(f"{x['namespace']}/{x['name']}" for x in ahead[:5])
        more = f" (and {len(ahead) - 5} more)" if len(ahead) > 5 else ""
        console.print(f"Ahead:         {len(ahead)} in ClusterQueue {cq_name}" + (f": {shown}{more}" if ahead else ""))
    config = await config_store.load_config(session)
    cq = config.cluster_queues.get(cq_name) if cq_name else None
    if cq is not None:
        # the quota tree as the core builds it (what the cohort can lend depends on quotas alone)
        core_cq = Snapshot(config).queues.get(cq.name)
        pod_sets = store.pod_sets_from_json(r["pod_sets"])
        asked = {resource for ps in pod_sets for resource in ps.total()}
        usage = await held_by_flavor(session, cq.name)
        table = Table(title=f"Needs against ClusterQueue {cq.name}", title_justify="left")
        for col in ("resource", "needs", "flavor", "nominal", "in use", "free", "may borrow"):
            table.add_column(col)
        for rg in cq.spec.resource_groups:
            for f in rg.flavors:
                for q in f.resources:
                    if q.name not in asked:
                        continue
                    used = usage.get((f.name, q.name), 0)
                    table.add_row(
                        q.name,  # (what it needs on this flavor: a prioritized list may cost less on some)
                        quantity.format_milli(sum(ps.on(f.name, q.name) for ps in pod_sets)),
                        f.name,
                        quantity.format_milli(q.nominal_quota),
                        quantity.format_milli(used),
                        quantity.format_milli(max(0, q.nominal_quota - used)),
                        _may_borrow(core_cq, (f.name, q.name), q.nominal_quota) if cq.spec.cohort_ref else "-",
                    )
        console.print(table)
        if r["state"] == "Pending":
            # the scheduling core's own search, on the stored state
            snap = await store.load_snapshot(session)
            ignore = await fair_usage.ignores_undeclared(session)  # (the controller's quotaCheckStrategy)
            sched = Scheduler(
                snap.config, fair_sharing=await controller_fair_sharing(session), ignore_undeclared=ignore
            )
            sched.restore(snap.workloads)
            assignment, victims = sched.preemption_plan(f"{r['namespace']}/{r['name']}")
            if assignment is None:
                plan = "-"
            elif assignment.mode == Mode.FIT and r["reason"] == TOPOLOGY_PLACEMENT_FAILED:
                plan = f"none possible: its quota fits, but no nodes hold it ({r['message']})"
            elif assignment.mode == Mode.FIT and _placed_by_topology(sched.snapshot, assignment):
                plan = "none needed by quota; whether nodes hold it is decided at the next scheduling step"
            elif assignment.mode == Mode.FIT:
                plan = "none needed: it fits now (it is admitted at the next scheduling step)"
            elif victims:
                shown = ", ".join(f"{t.workload.key} ({t.reason})" for t in victims[:5])
                plan = f"would evict {shown}" + (f" and {len(victims) - 5} more" if len(victims) > 5 else "")
            elif r["reason"]:  # (why, with its numbers, is the Waiting line's: one set of numbers a page)
                plan = "none possible: preempting what it may preempt would not make room (see Waiting)"
            else:
                plan = f"none possible ({assignment.message})"
            console.print(f"Preemption:    {plan}")
    history = await store.events(session, workload_id=int(r["id"]))
    named = await workload_objects_store.object_names(session, {e.by for e in history if e.by})
    if history:
        table = Table(title="History", title_justify="left")
        for col in ("time (UTC)", "event", "ClusterQueue", "why"):
            table.add_column(col)
        for e in history:
            why = event_why(e, named)
            table.add_row(f"{e.at:%Y-%m-%d %H:%M:%S}", e.type, e.cluster_queue or "", why)
        console.print(table)


def event_why(e: store.EventRow, named: dict[str, str]) -> str:
    """A history line's why: reason, detail, and the preemptor by its Workload object's name (as
    kubectl and Events name it; ``named`` from ``workload_objects.object_names``); an elastic job's
    resize, the pods it holds from then on."""
    if e.type == "Resized" and e.counts:
        return "to " + ", ".join(f"{name}: {n}" for name, n in sorted(e.counts.items()))
    by = f"by {named.get(e.by, e.by)}" if e.by else None
    return " ".join(x for x in (e.reason, e.detail, by) if x)


def _may_borrow(cq: ClusterQueue | None, fr: FlavorResource, nominal: int) -> str:
    """What ``cq`` may borrow of ``fr`` beyond its nominal quota: its borrowing limit, cut to what
    its cohort has to lend (so never "unlimited" of a cohort with 16 GPUs)."""
    if cq is None:
        return "-"
    return quantity.format_milli(max(0, cq.potential_available(fr) - nominal))


def _placed_by_topology(snapshot: Snapshot, assignment: Assignment) -> bool:
    """Whether topology placement (which needs the nodes, not in the store) also decides ``assignment``."""
    return any(
        (f := snapshot.flavors.get(name)) is not None and f.topology
        for chosen in assignment.flavors.values()
        for name in chosen.values()
    )


async def _history(session: AsyncSession, queue: str) -> str:
    """A queue's decayed usage as the controller last stored it (``admission.store.fair_usage``)."""
    stored = await fair_usage.get(session, queue)
    if stored is None:
        return ""
    consumed, at = stored
    amounts = ", ".join(f"{r} {v:.4g}" for r, v in sorted(consumed.items())) or "nothing"
    when = dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{amounts} (decayed usage, whole units, as of {when})"


async def _fair_share(session: AsyncSession, cluster_queue: str) -> str:
    """The ClusterQueue's weight and Dominant Resource Share in its cohort now (``queues.cycle.fairsharing``),
    as the controller's fair sharing compares them."""
    config = await config_store.load_config(session)
    s = fairsharing.shares_with(config, await store.held_usage(session))[cluster_queue]
    weight = f"weight {s.weight:g}"
    if not s.borrowing:
        return f"{weight}, share 0 (borrows nothing)"
    value = "infinite (weight 0 and borrowing)" if s.value == float("inf") else f"{s.value:.4g}"
    return (
        f"{weight}, weighted share {value}: borrows {s.ratio / 10:.4g}% of what its cohort can lend of "
        f"{s.resource} (Kueue's DominantResourceShare; compared when fair sharing is on)"
    )


def text_console(out: StringIO) -> Any:
    """The console ``describe`` writes to: names and messages are text, never rich markup (a
    "[main]" must not vanish), and a line is never wrapped mid-list (the dashboard shows this
    text as it is); tables are 120 wide."""
    from rich.console import Console

    return Console(file=out, width=120, markup=False, highlight=False, soft_wrap=True)


async def describe(
    session: AsyncSession, kind: str, name: str, *, fractions: Mapping[str, Fraction] | None = None
) -> str:
    """``describe KIND NAME``'s text; ``fractions``: GPU resources' parts of a card
    (``TURNSTILE_GPU_FRACTIONS``) for the GPU memory line."""
    from rich.table import Table  # (only describe draws rich tables)

    out = StringIO()
    console = text_console(out)
    if kind == "Workload":
        everyone = await workload_rows(session, namespace=None, name=None)
        rows = named(everyone, name)
        if not rows:
            raise config_store.NotFound(f"workload/{name} not found (finished workloads are in `turnstile usage`)")
        r = rows[0]
        console.print(
            f"Workload:      {r['namespace']}/{r['name']} ({r['kind']}; its Workload object: {r['object_name']})"
        )
        console.print(f"State:         {r['state']}")
        console.print(f"LocalQueue:    {r['local_queue']}   ClusterQueue: {r['cluster_queue'] or '-'}")
        console.print(f"Priority:      {r['priority']}")
        if r["cq_position"]:
            console.print(
                f"Position:      {r['cq_position']} in its ClusterQueue, {r['lq_position']} in its LocalQueue"
            )
        if r["reason"] and r["state"] in ("Pending", "QuotaReserved"):
            console.print(f"Waiting:       {r['reason']}: {r['message']}")
        elif r["reason"] == PODS_UNSCHEDULABLE and r["state"] == "Admitted":  # (``features.pod_waits``)
            console.print(f"Pods waiting:  {r['message']}")
        console.print(f"Pods:          {workload_lines.pods(r)}")
        if placed := workload_lines.placement(r):
            console.print(f"Placement:     {placed}")
        if devices := workload_lines.devices(r):
            console.print(f"Devices (DRA): {devices}")
        for line in await _gpu_memory_lines(session, f"{r['namespace']}/{r['name']}", fractions):
            console.print(f"GPU memory:    {line}")
        await _describe_workload(session, console, r, everyone)
        return out.getvalue().rstrip()
    key = name
    obj = await config_store.load_object(session, kind, key)
    console.print(f"{kind}: {obj.key}")
    if isinstance(obj, api.ClusterQueue):
        config = await config_store.load_config(session)
        cq = Snapshot(config).queues[obj.name]
        status = "Active" if cq.inactive_reason is None else f"Inactive ({cq.inactive_reason}: {cq.inactive_message})"
        console.print(f"Status:    {status}")
        console.print(f"Cohort:    {obj.spec.cohort_ref or '-'}    Strategy: {obj.spec.queueing_strategy}")
        pre = obj.spec.preemption
        console.print(
            f"Preemption: withinClusterQueue={pre.within_cluster_queue} reclaimWithinCohort={pre.reclaim_within_cohort}"
        )
        if obj.spec.cohort_ref:
            console.print(f"Fair share: {await _fair_share(session, obj.name)}")
        usage = await held_by_flavor(session, obj.name)
        table = Table(title="Quota", title_justify="left")
        for col in ("flavor", "resource", "nominal", "borrowingLimit", "lendingLimit", "in use"):
            table.add_column(col)
        for g in obj.spec.resource_groups:
            for f in g.flavors:
                for res in f.resources:
                    fmt = quantity.format_milli
                    table.add_row(
                        f.name,
                        res.name,
                        fmt(res.nominal_quota),
                        "-" if res.borrowing_limit is None else fmt(res.borrowing_limit),
                        "-" if res.lending_limit is None else fmt(res.lending_limit),
                        fmt(usage.get((f.name, res.name), 0)),
                    )
        console.print(table)
        if history := await _history(session, obj.name):
            console.print(f"Usage history (usage-aware fair sharing): {history}")
    else:
        console.print(yaml.safe_dump(codec.to_manifest(obj, version=obj.version), sort_keys=False).rstrip())
        if isinstance(obj, api.LocalQueue) and (history := await _history(session, obj.key)):
            console.print(f"Usage history (admission fair sharing): {history}")
    entries = await config_store.history(session, kind=kind, name=obj.key)
    if entries:
        console.print("Recent edits:")
        for e in entries[-5:]:
            console.print(f"  {e.at:%Y-%m-%d %H:%M:%S} UTC  {e.actor}  {e.action}")
    return out.getvalue().rstrip()
