"""The discrete-event simulator on the shipped examples: outcomes, timing rules, determinism."""

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from queues.simulation import scenario, simulator

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(name: str) -> dict[str, Any]:
    doc = yaml.safe_load((EXAMPLES / name).read_text())
    return simulator.Simulation(scenario.parse(doc)).run().to_json()


def timeline(result: dict[str, Any]) -> list[tuple[Any, ...]]:
    out = []
    for e in result["events"]:
        if e["type"] == "Submitted":
            continue
        out.append((e["t"], e["type"], e["workload"], e.get("clusterQueue") or e.get("detail") or e.get("by")))
    return out


def test_gpu_teams_borrow_then_reclaim() -> None:
    r = run("gpu-teams.yaml")
    assert timeline(r) == [
        (0, "Admitted", "ml-vision/resnet50-train", "vision"),
        (60, "Admitted", "ml-nlp/tokenizer-sweep", "nlp"),
        (120, "Admitted", "ml-dev/notebook-eval", "dev"),
        (720, "Finished", "ml-dev/notebook-eval", None),
        (900, "Evicted", "ml-vision/resnet50-train", "InCohortReclamation"),
        (900, "Admitted", "ml-nlp/llama-finetune", "nlp"),
        (1860, "Finished", "ml-nlp/tokenizer-sweep", None),
        (4500, "Finished", "ml-nlp/llama-finetune", None),
        (4500, "Admitted", "ml-vision/resnet50-train", "vision"),
        (11700, "Finished", "ml-vision/resnet50-train", None),
    ]
    first = next(e for e in r["events"] if e["type"] == "Admitted")
    assert first["borrowing"] is True  # 32 GPUs on a 16-GPU quota: it borrows nlp's idle A100s
    assert first["flavors"]["worker"] == {"cpu": "cpu-pool", "memory": "cpu-pool", "nvidia.com/gpu": "a100"}
    tokenizer = [e for e in r["events"] if e["type"] == "Admitted"][1]
    assert tokenizer["flavors"]["main"]["nvidia.com/gpu"] == "h100"  # h100's own tolerations admit it
    evicted = next(e for e in r["events"] if e["type"] == "Evicted")
    assert (evicted["reason"], evicted["by"]) == ("Preempted", "ml-nlp/llama-finetune")
    vision = r["summary"]["clusterQueues"]["vision"]
    assert (vision["admitted"], vision["finished"], vision["preempted"]) == (1, 1, 1)
    assert r["workloads"]["ml-vision/resnet50-train"]["evictions"] == 1
    assert r["summary"]["makespan"] == 11700
    # nlp: 8 GPU x 1800 s (h100) + 16 GPU x 3600 s (a100) over 24 GPUs x 11700 s
    assert r["summary"]["clusterQueues"]["nlp"]["utilization"]["nvidia.com/gpu"] == round(
        (8 * 1800 + 16 * 3600) / (24 * 11700), 4
    )


def test_priority_preemption_evicts_only_the_lowest() -> None:
    r = run("priority-preemption.yaml")
    evicted = [(e["t"], e["workload"], e["detail"], e["by"]) for e in r["events"] if e["type"] == "Evicted"]
    assert evicted == [(600, "research/sweep-a", "InClusterQueue", "research/prod-train")]
    assert r["workloads"]["research/sweep-b"]["evictions"] == 0
    wait = r["summary"]["clusterQueues"]["research"]["wait"]
    assert wait == {"mean": 0, "p50": 0, "p90": 0, "max": 0}


def test_fifo_strategies_differ_only_in_head_blocking() -> None:
    admitted = {e["workload"]: e["t"] for e in run("fifo-strategies.yaml")["events"] if e["type"] == "Admitted"}
    assert admitted["team/b-small"] == 20  # passes the big head in BestEffortFIFO
    assert admitted["team/s-small"] == 1000  # waits behind it in StrictFIFO
    assert admitted["team/s-big"] == admitted["team/b-big"] == 1000


def test_gang_pytorch_jobs_are_admitted_whole() -> None:
    r = run("gang-pytorch.yaml")
    admitted = {e["workload"]: e["t"] for e in r["events"] if e["type"] == "Admitted"}
    assert admitted == {"llm/pretrain-a": 0, "llm/finetune": 120, "llm/pretrain-b": 1800}


def test_mig_pool_and_default_local_queues() -> None:
    r = run("mig-dev-pool.yaml")
    admitted = {e["workload"]: e["t"] for e in r["events"] if e["type"] == "Admitted"}
    assert admitted == {"alice/nb-1": 0, "bob/nb-2": 30, "alice/nb-3": 60, "bob/nb-4": 660}
    stray = r["workloads"]["carol/stray"]
    assert (stray["state"], stray["reason"]) == ("Pending", "LocalQueueNotFound")


def test_admin_edits_apply_in_order() -> None:
    r = run("admin-edit.yaml")
    assert timeline(r) == [
        (0, "Admitted", "team-b/eval", "team-b"),
        (900, "Cancelled", "team-a/abandoned", None),
        (1200, "Finished", "team-b/eval", None),
        (1800, "Admitted", "team-a/train-8gpu", "team-a"),
        (5400, "Finished", "team-a/train-8gpu", None),
    ]
    later = r["workloads"]["team-b/later"]
    assert (later["state"], later["reason"]) == ("Pending", "ClusterQueueNotFound")
    assert r["workloads"]["team-a/abandoned"]["state"] == "Cancelled"


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_same_file_same_json(name: str) -> None:
    assert json.dumps(run(name)) == json.dumps(run(name))


def test_finishes_come_before_submissions_at_the_same_instant() -> None:
    doc = yaml.safe_load((EXAMPLES / "priority-preemption.yaml").read_text())
    # A job arriving exactly when another ends takes its place without preempting anyone.
    doc["jobs"][2]["at"] = 3600
    r = simulator.Simulation(scenario.parse(doc)).run().to_json()
    assert not [e for e in r["events"] if e["type"] == "Evicted"]
    assert ("research/prod-train", 3600) in [(e["workload"], e["t"]) for e in r["events"] if e["type"] == "Admitted"]


def test_a_pods_ready_eviction_says_why_the_pods_wait_in_the_schedulers_words() -> None:
    """Engine core places pods on the scenario's nodes with the kube-scheduler's filters and its
    waitForPodsReady eviction says what the scheduler would (as the controller does)."""
    evicted = [e for e in run("pods-ready.yaml")["events"] if e["type"] == "Evicted"]
    assert evicted[0]["workload"] == "team/wrong-zone"
    assert evicted[0]["message"] == (
        "Exceeded the PodsReady timeout team/wrong-zone: 1 of its pods cannot be scheduled: 0/2 nodes are "
        "available: 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/2 nodes are available: "
        "2 Preemption is not helpful for scheduling."
    )
