"""The usage ledger against exact arithmetic on a run with preemptions (engine cluster, real
PostgreSQL): every admitted interval, cut short by evictions, summed in every grouping."""

from __future__ import annotations

import datetime as dt
import tempfile
from collections import defaultdict
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import yaml

from admission.sim import engine
from admission.sim import stack as system
from admission.store import database
from admission.store import usage as ledger
from admission.store import workloads as store
from queues.simulation import scenario
from tests.e2e.test_engines import EXAMPLES

EXAMPLE = next(p for p in EXAMPLES if p.name == "priority-preemption.yaml")
# Fast: what is tested is exact arithmetic over whatever was decided (it must include preemptions),
# not that the decisions match engine core's (tests/e2e/test_engines.py does that).
SCALE = 0.004


async def test_ledger_hours_are_exact_in_every_grouping(server_url: str) -> None:
    parsed = scenario.parse(yaml.safe_load(EXAMPLE.read_text()))
    scale = SCALE
    jobs = {e.job.key: e.job for e in parsed.jobs}
    since = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        async with (
            system.fresh_database(server_url, workdir) as url,
            system.running(parsed, url, workdir, time_scale=scale) as stack,
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
    # Expected, from the decisions alone: each admission until its eviction or finish, times its quota,
    # as exact fractions (Decimal sums round at 28 digits, and rounding is not what is tested).
    expected: dict[tuple[str, str, str, str], Fraction] = defaultdict(Fraction)
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
                    seconds = Fraction((e.at - start) // dt.timedelta(microseconds=1), 1_000_000)
                    expected[key] += milli * seconds / (1000 * 3600)
    assert not open_at and expected
    by_ns: dict[tuple[str, str, str], Fraction] = defaultdict(Fraction)
    by_cq: dict[tuple[str, str, str], Fraction] = defaultdict(Fraction)
    for (ns, cq, flavor, resource), hours in expected.items():
        by_ns[(ns, flavor, resource)] += hours
        by_cq[(cq, flavor, resource)] += hours
    for grouping, want in (("namespace", by_ns), ("clusterqueue", by_cq)):
        got = {(r.group, r.flavor, r.resource): r.hours for r in reports[grouping]}
        assert got.keys() == want.keys(), grouping
        for key, hours in got.items():
            assert exact(hours, want[key]), (grouping, key, hours, want[key])
    team_total = sum(r.hours for r in reports["label:team"])
    assert exact(team_total, sum(expected.values(), Fraction(0)))
    assert {r.group for r in reports["label:team"]} == {ledger.NO_LABEL}


def exact(reported: Decimal, hours: Fraction) -> bool:
    """The report's hours are the exact value, but for the last of their 28 significant digits
    (a microsecond of one GPU is 2.8e-10 hours: any real error is ~10^14 times larger)."""
    return abs(Fraction(reported) - hours) < Fraction(1, 10**24)
