"""The usage ledger against exact arithmetic on a run with preemptions (engine cluster, real
PostgreSQL): every admitted interval, cut short by evictions, summed in every grouping."""

from __future__ import annotations

import datetime as dt
import tempfile
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import yaml

from admission.sim import engine
from admission.store import database
from admission.store import usage as ledger
from admission.store import workloads as store
from queues import scenario
from tests.e2e.test_engines import EXAMPLES, time_scale

EXAMPLE = next(p for p in EXAMPLES if p.name == "priority-preemption.yaml")


async def test_ledger_hours_are_exact_in_every_grouping(server_url: str) -> None:
    parsed = scenario.parse(yaml.safe_load(EXAMPLE.read_text()))
    scale = time_scale(parsed)
    jobs = {e.job.key: e.job for e in parsed.jobs}
    since = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        async with (
            engine.fresh_database(server_url, workdir) as url,
            engine.running(parsed, url, workdir, time_scale=scale) as stack,
        ):
            result = await engine.Driver(parsed, stack, time_scale=scale).play()
            until = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)
            async with database.transaction(stack.controller.sessions) as s:
                history = await store.events(s)
                reports = {
                    by: await ledger.report(s, by=by, since=since, until=until)
                    for by in ("namespace", "clusterqueue", "label:team")
                }
    assert any(e.type == "Evicted" for e in history), "the example must preempt"
    assert all(t.state == "Finished" for t in result.tracks)
    # Expected, from the decisions alone: each admission until its eviction or finish, times its quota.
    expected: dict[tuple[str, str, str, str], Decimal] = defaultdict(Decimal)
    open_at: dict[str, tuple[dt.datetime, store.EventRow]] = {}
    for e in history:
        if e.type == "Admitted":
            open_at[e.workload] = (e.at, e)
        elif e.workload in open_at:
            start, admitted = open_at.pop(e.workload)
            job = jobs[e.workload]
            for ps in job.pod_sets:
                for resource, milli in ps.total().items():
                    flavor = (admitted.flavors or {})[ps.name][resource]
                    key = (job.namespace, admitted.cluster_queue or "", flavor, resource)
                    seconds = Decimal((e.at - start) / dt.timedelta(microseconds=1)) / Decimal(1_000_000)
                    expected[key] += Decimal(milli) * seconds / Decimal(1000 * 3600)
    assert not open_at and expected
    by_ns: dict[tuple[str, str, str], Decimal] = defaultdict(Decimal)
    by_cq: dict[tuple[str, str, str], Decimal] = defaultdict(Decimal)
    for (ns, cq, flavor, resource), hours in expected.items():
        by_ns[(ns, flavor, resource)] += hours
        by_cq[(cq, flavor, resource)] += hours
    assert {(r.group, r.flavor, r.resource): r.hours for r in reports["namespace"]} == dict(by_ns)
    assert {(r.group, r.flavor, r.resource): r.hours for r in reports["clusterqueue"]} == dict(by_cq)
    team_total = sum(r.hours for r in reports["label:team"])
    assert team_total == sum(expected.values()) and {r.group for r in reports["label:team"]} == {ledger.NO_LABEL}
