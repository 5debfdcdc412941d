"""GPU efficiency in engine core (``queues.efficiency``, ``queues.simulation.reclaim_model``): idle reclaim by
policy, GPU-hour budgets, and the scenario fields' errors."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from queues import errors
from queues.efficiency import Trace
from queues.simulation import scenario, simulator

EXAMPLE = yaml.safe_load((Path(__file__).resolve().parents[2] / "examples/efficiency/idle-reclaim.yaml").read_text())


def _run(doc: dict[str, Any]) -> tuple[dict[str, Any], dict[float, dict[str, tuple[str, str]]]]:
    seen: dict[float, dict[str, tuple[str, str]]] = {}

    def look(sim: simulator.Simulation) -> None:
        seen[sim.now] = {k: (w.reason, w.message) for k, w in sim.sched.workloads.items() if w.admission is None}

    result = simulator.Simulation(scenario.parse(doc)).run(on_step=look).to_json()
    return result, seen


def _evictions(result: dict[str, Any]) -> list[tuple[float, str, str, str, str]]:
    return [
        (e["t"], e["workload"], e["reason"], e["detail"], e.get("message", ""))
        for e in result["events"]
        if e["type"] == "Evicted"
    ]


def test_the_trace_mean_is_time_weighted() -> None:
    trace = Trace(((0.0, 0.1), (900.0, 0.9)))
    assert trace.mean(0, 900) == pytest.approx(0.1)
    assert trace.mean(0, 1800) == pytest.approx(0.5)
    assert trace.mean(600, 1200) == pytest.approx(0.5)


def test_an_idle_job_is_requeued_only_when_someone_waits_and_goes_behind_them() -> None:
    result, seen = _run(copy.deepcopy(EXAMPLE))
    message = "GPU utilisation 5 % < 30 % over 30m"
    assert _evictions(result) == [(3600, "research/notebook", "GPUIdle", "Requeued", message)]
    admitted = [(e["t"], e["workload"]) for e in result["events"] if e["type"] == "Admitted"]
    assert (3600, "research/training") in admitted and (7200, "research/notebook") in admitted
    assert seen[3600]["research/notebook"] == ("WaitingForQuota", f"{message}; queues again after a 60s backoff")
    # the slow starter (10 % for 15 minutes, then 90 %) is never touched; nothing idle is reclaimed
    # before someone waits (grace 10m and window 30m passed at 1800, nobody waited until 3600)
    assert not any(e[1] == "research/warmup" for e in _evictions(result))
    reclaim = result["summary"]["reclaim"]
    assert (reclaim["requeued"], reclaim["gpuHoursFreed"]) == (1, 28.0)  # 4 GPUs x the 7 hours it had left


def test_without_only_when_contended_the_first_look_after_grace_and_window_reclaims() -> None:
    doc = copy.deepcopy(EXAMPLE)
    doc["reclaim"][0]["onlyWhenContended"] = False
    doc["reclaim"][0]["action"] = "deactivate"
    result, _ = _run(doc)
    assert _evictions(result)[0][:4] == (1800, "research/notebook", "GPUIdle", "Deactivated")
    notebook = result["workloads"]["research/notebook"]
    assert notebook["state"] == "Pending" and notebook["reason"] == "Inactive", notebook
    assert result["summary"]["reclaim"]["deactivated"] == 1


def test_warn_says_so_and_evicts_nobody() -> None:
    doc = copy.deepcopy(EXAMPLE)
    doc["reclaim"][0]["action"] = "warn"
    result, _ = _run(doc)
    assert _evictions(result) == []
    assert result["summary"]["reclaim"]["warnings"] == [
        {"t": 3600, "workload": "research/notebook", "message": "GPU utilisation 5 % < 30 % over 30m"}
    ]


def test_an_exhausted_budget_holds_new_work_until_its_period_ends_and_never_stops_running_work() -> None:
    result, seen = _run(copy.deepcopy(EXAMPLE))
    reason, message = seen[86400]["product/day-two"]
    assert reason == "BudgetExhausted"
    assert message.startswith("GPU-hour budget (label team=product) exhausted: 48 of 40 GPU-hours used")
    assert message.endswith("until the period ends (t=604800)")
    day_one = result["workloads"]["product/day-one"]
    assert day_one["state"] == "Finished" and day_one["evictions"] == 0  # it ran past the budget: never killed
    assert result["workloads"]["product/day-two"]["admitted"] == 604800


@pytest.mark.parametrize(
    ("path", "value", "error"),
    [
        ("jobs[0].utilization", 1.5, "jobs[0].utilization: must be a fraction from 0 to 1"),
        ("jobs[0].utilization", [{"at": 60, "value": 0.5}], "jobs[0].utilization: needs a first step at 0"),
        ("reclaim[0].action", "kill", "reclaim[0].action: must be one of warn, requeue, deactivate"),
        ("reclaim[0].window", "soon", "reclaim[0].window: must be a duration such as 5m"),
        ("budgets[0].gpuHours", -1, "budgets[0].gpuHours: must be a number of GPU-hours >= 0"),
        ("budgets[0].clusterQueue", "product", "budgets[0]: needs exactly one of clusterQueue and label"),
    ],
)
def test_bad_efficiency_fields_name_their_path(path: str, value: Any, error: str) -> None:
    doc = copy.deepcopy(EXAMPLE)
    head, _, key = path.rpartition(".")
    section, index = head.split("[")[0], int(head.split("[")[1].rstrip("]"))
    doc[section][index][key] = value
    with pytest.raises(errors.Invalid) as exc:
        scenario.parse(doc)
    assert any(str(e).startswith(error) for e in exc.value.errors), exc.value.errors


def test_idle_serving_replicas_free_what_a_waiting_job_needs_and_the_run_ends() -> None:
    """Two idle replicas of a Deployment (4 GPUs each) fill the queue; a training job arrives. One
    replica is reclaimed (one per look while someone waits), its replacement does not count as
    waiting (else the second would go too), and the run ends though replicas run until stopped."""
    labels = {"kueue.x-k8s.io/queue-name": "research"}
    pod = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "vllm", "namespace": "research", "labels": labels},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "vllm"}},
                 "template": {"metadata": {"labels": {"app": "vllm"}}, "spec": pod}},
    }  # fmt: skip
    doc = copy.deepcopy(EXAMPLE)
    doc["jobs"] = [{"at": 0, "utilization": 0.05, "object": deployment}, EXAMPLE["jobs"][2]]
    result, _ = _run(doc)
    assert [e[:3] for e in _evictions(result)] == [(3600, "research/vllm-0", "GPUIdle")]
    admitted = [(e["t"], e["workload"]) for e in result["events"] if e["type"] == "Admitted"]
    assert admitted[2:] == [(3600, "research/training"), (7200, "research/vllm-2")]
    assert result["summary"]["makespan"] == 7200


def test_a_budget_holds_its_workload_though_another_admission_in_its_quota_tree_reopens_the_cycle() -> None:
    """Both arrive in one instant, in two ClusterQueues of one cohort: the unbudgeted job is
    admitted first (the tree changed, so the held head is assigned again in that cycle); the
    budget still holds it."""
    doc = copy.deepcopy(EXAMPLE)
    for m in doc["manifests"]:
        if m["kind"] == "ClusterQueue":
            m["spec"]["cohortName"] = "shared"
    other = copy.deepcopy(EXAMPLE["jobs"][2])
    other["at"] = 86400
    doc["jobs"] = [EXAMPLE["jobs"][3], other, EXAMPLE["jobs"][4]]
    result, seen = _run(doc)
    admitted = {e["workload"]: e["t"] for e in result["events"] if e["type"] == "Admitted"}
    assert admitted["research/training"] == 86400 and admitted["product/day-two"] == 604800
    assert seen[86400]["product/day-two"][0] == "BudgetExhausted"


def test_a_run_across_a_period_boundary_counts_its_new_part_and_the_report_is_of_the_runs_end() -> None:
    """day-two runs 604800..691200: all of it is in the second weekly period (the seconds before a
    boundary are the old period's, after it the new one's), and the report gives the budget's use
    in the period the run ended in, whatever instant the clock stopped at."""
    from queues.efficiency import Budget
    from queues.simulation.reclaim_model import EfficiencyModel

    model = EfficiencyModel({}, (), (Budget("label team=a", 10.0, 3600.0, labels=(("team", "a"),)),))

    class Run:
        gpus, cluster_queue, labels = 2.0, "cq", {"team": "a"}

    model.runs["a/job"] = Run()  # type: ignore[assignment]
    model.advance(3000.0)  # 2 GPUs x 3000 s in the first hour
    model.advance(4200.0)  # 600 s of the old hour (over) and 600 s of the new one
    assert model.used == [2 * 600.0] and model.period == [1]
    model.runs.clear()
    model.advance(7300.0)  # nothing ran in the third hour: the clock stopped there
    budgets = model.summary(at=4200.0)["budgets"]
    assert isinstance(budgets, list)
    budget = budgets[0]
    assert budget["usedThisPeriod"] == round(1200 / 3600, 2) and budget["exhausted"] is False
    result = simulator.Simulation(scenario.parse(copy.deepcopy(EXAMPLE))).run().to_json()
    assert result["summary"]["budgets"][0]["usedThisPeriod"] == 48.0  # (day-two's 2 GPUs x 24 h)


def _lowering_scenario(when: str) -> dict[str, Any]:
    def job(name: str, team: str, at: float, runtime: float) -> dict[str, Any]:
        return {
            "at": at,
            "runtime": runtime,
            "object": {"apiVersion": "batch/v1", "kind": "Job",
                       "metadata": {"name": name, "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "q", "team": team}},
                       "spec": {"template": {"spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}}},
        }  # fmt: skip

    budget: dict[str, Any] = {"label": {"team": "a"}, "gpuHours": 1, "period": "1h", "whenExhausted": when}
    if when == "LowerPriority":
        budget["priority"] = -10
    return {
        "name": "lowering",
        "manifests": [
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "a100"}},
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": "cq"},
                "spec": {
                    "namespaceSelector": {},
                    "preemption": {"withinClusterQueue": "LowerPriority"},
                    "resourceGroups": [
                        {
                            "coveredResources": ["nvidia.com/gpu"],
                            "flavors": [{"name": "a100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 4}]}],
                        }
                    ],
                },
            },
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": "q", "namespace": "ml"},
                "spec": {"clusterQueue": "cq"},
            },
        ],
        "budgets": [budget],
        "jobs": [
            job("a1", "a", 0, 1800),  # 4 GPUs: team a's budget (1 GPU-hour) is spent at t=900
            job("a2", "a", 1000, 600),  # queued while spent: runs at priority -10
            job("b1", "b", 1000, 600),  # same own priority, later: goes first all the same
            job("c1", "b", 2500, 600),  # preempts a2, which runs lower
        ],
    }


def test_a_spent_budget_may_run_new_work_at_a_lower_priority_instead_of_holding_it() -> None:
    result, seen = _run(_lowering_scenario("LowerPriority"))
    admitted = [(e["t"], e["workload"]) for e in result["events"] if e["type"] == "Admitted"]
    assert admitted[:3] == [(0, "ml/a1"), (1800, "ml/b1"), (2400, "ml/a2")], admitted
    assert ("ml/a2", "Preempted") in {(e["workload"], e["reason"]) for e in result["events"] if e["type"] == "Evicted"}
    # not held: it waits for quota like any workload (behind b1), never with BudgetExhausted
    assert seen[1000]["ml/a2"][0] != "BudgetExhausted"
    # a new period gives it its own priority back; it runs again once c1 is done
    assert result["workloads"]["ml/a2"]["state"] == "Finished"
    waiting = _run(_lowering_scenario("Wait"))[1]
    assert waiting[1000]["ml/a2"][0] == "BudgetExhausted"


def test_lower_priority_needs_a_whole_priority() -> None:
    doc = _lowering_scenario("LowerPriority")
    doc["budgets"][0]["priority"] = "low"
    with pytest.raises(errors.Invalid, match=r"budgets\[0\].priority: the priority new work runs at"):
        scenario.parse(doc)
    doc["budgets"][0].update(whenExhausted="Later")
    with pytest.raises(errors.Invalid, match=r"budgets\[0\].whenExhausted: must be Wait or LowerPriority"):
        scenario.parse(doc)
