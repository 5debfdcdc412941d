"""scenario.md's promise: engines core and cluster reach the same decisions on every example.

Engine cluster runs the whole system (webhook over TLS, controller, PostgreSQL, simulated
cluster over HTTP) in wall time. Each example runs at a time scale that keeps its closest
inputs >= 350 ms of wall time apart (scenario.md asks for events 5 scenario-seconds apart at
the default 0.02, i.e. 100 ms, for one run on its own; here whole systems share two cores, and an
input must not overtake the decisions of the one before it, as a ClusterQueue deleted before the
admission it should have drained), one with an autoscaler at the default itself, and up to
``AT_ONCE`` of them run at once so the suite stays short.
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest

from admission.cli import documents
from admission.sim import engine as cluster_engine
from queues.kueue import api
from queues.simulation import scenario, simulator

EXAMPLES = sorted(Path(__file__).resolve().parents[2].joinpath("examples").glob("*.yaml"))
# seconds between the closest inputs of a scenario (0.25 s was too little once the examples grew to
# 13: a LeaderWorkerSet's pods, made through the webhook under load, came after the next input)
MIN_WALL_GAP = 0.35
MAX_SCALE = 0.01  # but no slower than this: inputs 10 scenario-seconds apart are then 100 ms apart
# whole systems running at once: more, and their starting up (PostgreSQL, informers, webhooks) on two
# cores delays a run's first decisions past its next input (with 15 examples, 4 at once once made a
# Deployment's first replicas 1.6 s late: a ReplicaSet's pods go through the webhook under load)
AT_ONCE = 3


def decisions(events: list[dict[str, Any]], tas: frozenset[str] = frozenset()) -> list[tuple[Any, ...]]:
    """What must agree: admissions (where, which flavors, borrowing; on which nodes where a TAS
    flavor of ``tas`` placed them) and evictions (why, by whom), in order. (Engine core also
    reports where its kube-scheduler bound pods admitted by quota alone; engine cluster does not.)"""
    out: list[tuple[Any, ...]] = []
    for e in events:
        if e["type"] == "Admitted":
            placed = any(f in tas for per in e["flavors"].values() for f in per.values())
            where = e.get("placement") if placed else None
            out.append(("Admitted", e["workload"], e["clusterQueue"], e["flavors"], e["borrowing"], where))
        elif e["type"] == "Evicted":
            out.append(("Evicted", e["workload"], e["reason"], e["detail"], e.get("by")))
    return out


def by_instant(
    core: list[dict[str, Any]], cluster: list[dict[str, Any]], tas: frozenset[str] = frozenset()
) -> tuple[Any, Any]:
    """Both runs' decisions grouped by the core's instant, in order within each ClusterQueue.

    Decisions the core makes at one instant (two jobs finishing together free two queues) have
    no order across queues in wall time; within a queue, and from one instant to the next,
    the order must be the same. The n-th decision on a workload in one run is matched with the
    n-th in the other.
    """
    when: dict[tuple[str, str, int], float] = {}
    seen: dict[tuple[str, str], int] = {}
    for e in core:
        if e["type"] in ("Admitted", "Evicted"):
            n = seen[(e["type"], e["workload"])] = seen.get((e["type"], e["workload"]), 0) + 1
            when[(e["type"], e["workload"], n)] = e["t"]

    def grouped(events: list[dict[str, Any]]) -> dict[tuple[float, str], list[tuple[Any, ...]]]:
        counts: dict[tuple[str, str], int] = {}
        out: dict[tuple[float, str], list[tuple[Any, ...]]] = {}
        admitted_or_evicted = [e for e in events if e["type"] in ("Admitted", "Evicted")]
        for e, d in zip(admitted_or_evicted, decisions(events, tas), strict=True):
            n = counts[(e["type"], e["workload"])] = counts.get((e["type"], e["workload"]), 0) + 1
            t = when.get((e["type"], e["workload"], n), -1.0)
            out.setdefault((t, e.get("clusterQueue") or "evictions"), []).append(d)
        return out

    return grouped(core), grouped(cluster)


def _xids(parsed: scenario.Scenario) -> bool:
    """GPU faults are read from Prometheus too (``gpuXid`` edits)."""
    return any(edit.action == "gpuXid" for edit in parsed.edits)


def time_scale(parsed: scenario.Scenario) -> float:
    if parsed.autoscaler is not None:
        # Its timers (scale-ups, backoffs, bookings) are events too, not only the inputs, and each
        # decision takes several hops (request, autoscaler, watch, step): scenario.md's default.
        return 0.02
    if parsed.reclaim or parsed.utilization or parsed.gpu_memory or parsed.budgets or _xids(parsed):
        # Utilisation is measured from Prometheus scrapes (every scenario quarter-minute, at least
        # 100 ms), and budgets from the ledger at the controller's looks (every scenario minute, at
        # least 100 ms): a window or a period must span many of them, whatever the gaps between inputs.
        return MAX_SCALE
    inputs = sorted({e.at for e in parsed.jobs} | {e.at for e in parsed.edits})
    gaps = [b - a for a, b in itertools.pairwise(inputs) if b > a] or [60.0]
    return min(MAX_SCALE, MIN_WALL_GAP / min(gaps))


@pytest.mark.wall_clock
async def test_core_and_cluster_engines_agree_on_every_example(server_url: str) -> None:
    parsed = {path.stem: scenario.parse(documents.load_single(str(path))) for path in EXAMPLES}
    assert len(parsed) >= 6
    at_once = asyncio.Semaphore(AT_ONCE)

    async def run(p: scenario.Scenario) -> simulator.Result:
        async with at_once:
            return await cluster_engine.simulate(p, time_scale=time_scale(p), database_url=server_url)

    # The longest runs first (engine core's last event, in wall time): the last one to start is
    # then a short one, and the whole takes about the sum over AT_ONCE, not a long tail.
    order = sorted(parsed, key=lambda name: -wall_seconds(parsed[name]))
    runs = {name: asyncio.ensure_future(run(parsed[name])) for name in order}
    results = {name: await runs[name] for name in parsed}
    assert all(r.events for r in results.values())
    for name, p in parsed.items():
        assert_agree(name, p, results[name], time_scale(p))


@pytest.mark.wall_clock  # (squeezed, its pods-ready timeout is 0.36 s of wall time: run alone, as the others)
async def test_an_input_waits_for_what_the_one_before_it_caused(server_url: str) -> None:
    """Scenario.md's timing rules: decisions at one instant come before the next instant's inputs.
    Squeezed to 12 ms of wall time apart, a LeaderWorkerSet's groups (pods made by its controller,
    each through the webhook, then admitted) would still be coming when the InferenceService that
    must preempt one of them is created; engine cluster waits for the system to settle first."""
    path = next(p for p in EXAMPLES if p.stem == "serving-kinds")
    p = scenario.parse(documents.load_single(str(path)))
    squeezed = 0.0002  # 60 scenario seconds in 12 ms
    result = await cluster_engine.simulate(p, time_scale=squeezed, database_url=server_url)
    assert_agree(p.name, p, result, squeezed)


def wall_seconds(p: scenario.Scenario) -> float:
    """How long engine cluster runs ``p``: engine core's last event at ``p``'s time scale."""
    return max((e["t"] for e in simulator.Simulation(p).run().events), default=0.0) * time_scale(p)


def assert_agree(name: str, p: scenario.Scenario, result: simulator.Result, scale: float) -> None:
    """Engine cluster's ``result`` reached engine core's decisions on ``p``, in order, at its times."""
    core = simulator.Simulation(p).run().to_json("core")
    cluster = result.to_json("cluster")
    assert len(decisions(cluster["events"])) == len(decisions(core["events"])), name
    tas = frozenset(o.name for o in p.manifests if isinstance(o, api.ResourceFlavor) and o.spec.topology_name)
    expected, got = by_instant(core["events"], cluster["events"], tas)
    assert got == expected, name
    # Inputs happen at their scenario times, and nothing is admitted before it was submitted. A
    # Deployment's replicas are made by its ReplicaSet in the cluster: the same ones, never earlier.
    submitted = {e["workload"]: e["t"] for e in cluster["events"] if e["type"] == "Submitted"}
    asked = {e["workload"]: e["t"] for e in core["events"] if e["type"] == "Submitted"}
    replicas = {k for k in asked if k not in {e.job.key for e in p.jobs}}
    assert set(submitted) == set(asked), name
    assert {k: t for k, t in submitted.items() if k not in replicas} == {
        k: t for k, t in asked.items() if k not in replicas
    }, name
    made_within = 2.0 / scale  # scenario seconds in two seconds of wall time
    assert all(asked[k] <= submitted[k] < asked[k] + made_within for k in replicas), (name, submitted, asked)
    assert all(e["t"] >= submitted[e["workload"]] for e in cluster["events"] if e["type"] == "Admitted"), name
    # idle reclaim and budgets: the same acts, counted the same (engine cluster's from the controller)
    core_reclaim, cluster_reclaim = core["summary"].get("reclaim"), cluster["summary"].get("reclaim")
    if core_reclaim is not None:
        counts = ("warned", "requeued", "deactivated")
        assert {k: cluster_reclaim[k] for k in counts} == {k: core_reclaim[k] for k in counts}, name
    budgets = [
        (b["budget"], b["gpuHours"], b["exhausted"], b["warnedPeriods"]) for b in core["summary"].get("budgets", [])
    ]
    assert [(b["budget"], b["gpuHours"], b["exhausted"], b["warnedPeriods"])
            for b in cluster["summary"].get("budgets", [])] == budgets, name  # fmt: skip
    states = {k: w["state"] for k, w in cluster["workloads"].items()}
    assert states == {k: w["state"] for k, w in core["workloads"].items()}, name
    for key, w in core["workloads"].items():
        if w["state"] == "Pending":
            assert cluster["workloads"][key]["reason"] == w["reason"], (name, key)


def test_engine_cluster_reports_the_jobs_the_api_server_refuses(server_url: str) -> None:
    """With TURNSTILE_MISSING_LOCAL_QUEUE=refuse the webhook refuses a job naming a LocalQueue that
    does not exist: engine cluster reports it refused, as kubectl would, instead of failing the run."""
    import json
    import os

    from tests.admission.runner import turnstile

    path = str(Path(__file__).resolve().parents[2] / "examples" / "gitops-order.yaml")
    env = {**os.environ, "TURNSTILE_MISSING_LOCAL_QUEUE": "refuse"}
    ran = turnstile("simulate", path, "--engine", "cluster", "-o", "json", "--database-url", server_url, env=env)
    assert ran.returncode == 0, ran.stderr
    report = json.loads(ran.stdout)
    refused = {r["workload"]: r["message"] for r in report["refused"]}
    assert set(refused) == {"vision/synced-first", "research/typo"}  # vision's LocalQueue comes later
    assert "LocalQueues in research: research" in refused["research/typo"]
    assert report["workloads"]["research/train"]["state"] == "Finished"
    assert set(report["workloads"]) == {"research/train"}
