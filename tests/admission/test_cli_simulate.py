"""``turnstile simulate`` as a user runs it: output channels and exit codes (scenario.md)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.admission.runner import turnstile


def test_json_is_the_only_thing_on_stdout_and_is_byte_identical() -> None:
    first = turnstile("simulate", "examples/gpu-teams.yaml", "--output", "json")
    second = turnstile("simulate", "examples/gpu-teams.yaml", "--output", "json")
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    data = json.loads(first.stdout)
    assert set(data) == {"scenario", "engine", "events", "workloads", "summary"}
    assert data["engine"] == "core"


def test_table_report_names_queues_and_evictions() -> None:
    out = turnstile("simulate", "examples/gpu-teams.yaml")
    assert out.returncode == 0, out.stderr
    for word in ("vision", "nlp", "dev", "InCohortReclamation", "Utilization"):
        assert word in out.stdout


def test_unreadable_scenario_exits_2_with_file_and_path(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: x\nmanifests: []\njobs:\n  - {at: 0, runtime: 5, object: {apiVersion: batch/v1, kind: Job, "
        "metadata: {name: j}, spec: {template: {spec: {containers: [{name: c, resources: {requests: {cpu: abc}}}]}}}}}\n"
    )
    out = turnstile("simulate", str(bad), "--output", "json")
    assert out.returncode == 2
    assert out.stdout == ""
    assert (
        f"{bad}: jobs[0].object.spec.template.spec.containers[0].resources.requests.cpu: 'abc' is not a quantity"
        in out.stderr
    )
    assert "Traceback" not in out.stderr


def test_missing_file_and_malformed_yaml_exit_2(tmp_path: Path) -> None:
    missing = turnstile("simulate", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2 and "no such file" in missing.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    out = turnstile("simulate", str(broken))
    assert out.returncode == 2 and "not valid YAML (line 2" in out.stderr and out.stdout == ""


def test_demo_runs_gpu_teams_through_the_whole_system_and_reports() -> None:
    out = turnstile("demo", "--seconds", "20")  # gpu-teams needs >= 1.7 ms per scenario second (test_engines)
    assert out.returncode == 0, out.stderr
    assert "turnstile demo: gpu-teams (engine cluster)" in out.stdout
    assert "Waiting, and why" in out.stdout and "Latest decisions" in out.stdout
    assert "InCohortReclamation" in out.stdout and "No workload is left pending." in out.stdout


def test_a_timeline_too_large_is_refused_early(tmp_path: Path) -> None:
    """A million jobs written with one alias (a few MB of YAML): refused while reading, not after
    building gigabytes."""
    job = "{at: 0, runtime: 10, object: {apiVersion: batch/v1, kind: Job, metadata: {name: j, namespace: n}}}"
    path = tmp_path / "million.yaml"
    path.write_text(f"name: million\nmanifests: []\nbase: &j {job}\njobs:\n" + "- *j\n" * 400_000)
    out = turnstile("simulate", str(path), "-o", "json")
    assert out.returncode == 2 and "refused: a list of more than 100,000 items" in out.stderr, out.stderr
    assert out.stdout == ""


def _many_jobs(path: Path, n: int) -> Path:
    manifests = (
        "- {apiVersion: kueue.x-k8s.io/v1beta2, kind: ResourceFlavor, metadata: {name: a100}}\n"
        "- {apiVersion: kueue.x-k8s.io/v1beta2, kind: ClusterQueue, metadata: {name: cq}, spec: {namespaceSelector: {},"
        " resourceGroups: [{coveredResources: [nvidia.com/gpu], flavors: [{name: a100, resources: [{name: nvidia.com/gpu,"
        " nominalQuota: '8'}]}]}]}}\n"
        "- {apiVersion: kueue.x-k8s.io/v1beta2, kind: LocalQueue, metadata: {name: q, namespace: ml}, spec: {clusterQueue: cq}}\n"
    )
    job = (
        "- {{at: {i}, runtime: 50, object: {{apiVersion: batch/v1, kind: Job, metadata: {{name: j{i}, namespace: ml,"
        " labels: {{kueue.x-k8s.io/queue-name: q}}}}, spec: {{template: {{spec: {{containers: [{{name: c, resources:"
        " {{limits: {{nvidia.com/gpu: '1'}}}}}}]}}}}}}}}}}\n"
    )
    path.write_text(
        "name: many\nnamespaces: [ml]\nmanifests:\n"
        + manifests
        + "jobs:\n"
        + "".join(job.format(i=i) for i in range(n))
    )
    return path


def test_a_simulation_past_its_time_or_memory_stops_and_says_which(tmp_path: Path) -> None:
    """Input under the size caps can still ask for minutes and gigabytes: --max-seconds and --max-memory
    end it with status 1 and the bound it passed, nothing on stdout."""
    scenario = _many_jobs(tmp_path / "many.yaml", 20_000)
    slow = turnstile("simulate", str(scenario), "-o", "json", "--max-seconds", "0.3")
    assert slow.returncode == 1 and slow.stdout == "", slow.stderr
    assert f"error: simulate {scenario}: stopped after 0.3 s (--max-seconds)" in slow.stderr
    big = turnstile("simulate", str(scenario), "-o", "json", "--max-memory", "0.02")
    assert big.returncode == 1 and big.stdout == "", big.stderr
    assert "stopped: it needed more than 0.02 GiB of memory (--max-memory" in big.stderr


def test_fair_sharing_reports_each_queues_weighted_share_and_plots_it(tmp_path: Path) -> None:
    out = turnstile("simulate", "examples/fair-sharing.yaml", "--output", "json", "--plot", str(tmp_path / "s.png"))
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)["summary"]["clusterQueues"]
    for name in ("team-a", "team-b", "team-c"):
        assert {"weightedShare", "weightedShareMean", "weightedShareMax"} <= set(summary[name]), summary[name]
    # team-a flooded the cohort first: it borrowed the most
    assert summary["team-a"]["weightedShareMax"] > summary["team-b"]["weightedShareMax"] > 0
    assert summary["team-a"]["weightedShare"] == 0  # everything finished
    assert (tmp_path / "s.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = turnstile("simulate", "examples/fair-sharing.yaml")
    assert "Fair sharing" in table.stdout and "InCohortFairSharing" in table.stdout
    plain = json.loads(turnstile("simulate", "examples/gpu-teams.yaml", "--output", "json").stdout)
    assert not any("weightedShare" in cq for cq in plain["summary"]["clusterQueues"].values()), "only when on"


def test_topology_example_places_jobs_and_says_why_one_waits() -> None:  # (docs/topology.md)
    out = turnstile("simulate", "examples/topology.yaml", "--output", "json")
    assert out.returncode == 0, out.stderr
    assert "topologyName" not in out.stderr  # (engine core places by it: no "not used" warning)
    data = json.loads(out.stdout)
    placed = {e["workload"]: e["placement"]["main"] for e in data["events"] if e["type"] == "Admitted"}
    assert placed["ml/node-job"] == {"r0-n1": 1}  # a whole free node, next to the small jobs' node
    assert len({n.split("-")[0] for n in placed["ml/rack-job"]}) == 1 and sum(placed["ml/rack-job"].values()) == 4
    waiting = data["workloads"]["ml/too-big"]
    assert waiting["state"] == "Pending"
    assert "needs 8 pods (64 nvidia.com/gpu) in one rack; the freest rack has room for 4" in waiting["message"]
    table = turnstile("simulate", "examples/topology.yaml")
    assert "Placement (GPU utilisation" in table.stdout and "on one node" in table.stdout


def test_topology_plot_draws_node_occupancy(tmp_path: Path) -> None:
    out = turnstile("simulate", "examples/topology.yaml", "--plot", str(tmp_path / "nodes.png"))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "nodes.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_efficiency_example_reports_reclaim_and_budgets_and_engine_cluster_needs_prometheus() -> None:
    out = turnstile("simulate", "examples/efficiency/idle-reclaim.yaml")
    assert out.returncode == 0, out.stderr
    assert "Idle reclaim: 0 warned, 1 requeued" in out.stdout and "GPUIdle" in out.stdout
    assert "Budget label team=product: 48 of 40 GPU-hours this period (exhausted)" in out.stdout
    # without a prometheus on PATH, engine cluster refuses what it cannot measure, saying what to install
    bare = {**os.environ, "PATH": str(Path(sys.executable).parent)}
    cluster = turnstile("simulate", "examples/efficiency/idle-reclaim.yaml", "--engine", "cluster", env=bare)
    assert cluster.returncode == 2, cluster.stderr
    assert "reclaim: engine cluster reads GPU utilisation through a real Prometheus" in cluster.stderr
    assert "apt-get install prometheus" in cluster.stderr and "Traceback" not in cluster.stderr


def test_an_elastic_job_in_a_scenario_is_warned_about(tmp_path: Path) -> None:
    doc = yaml.safe_load(Path("examples/gpu-teams.yaml").read_text())
    first = doc["jobs"][0]["object"]
    first["metadata"].setdefault("annotations", {})["kueue.x-k8s.io/elastic-job"] = "true"
    scenario = tmp_path / "elastic.yaml"
    scenario.write_text(yaml.safe_dump(doc))
    out = turnstile("simulate", str(scenario), "--output", "json")
    assert out.returncode == 0, out.stderr
    name = f"{first['metadata'].get('namespace')}/{first['metadata']['name']}"
    assert f"jobs[0] {name}: metadata.annotations[kueue.x-k8s.io/elastic-job]: elastic jobs" in out.stderr, out.stderr


def test_engine_cluster_leaves_no_folder_and_no_server_behind(tmp_path: Path) -> None:
    """Its embedded PostgreSQL is stopped and its work folder removed before the command exits."""
    doc = yaml.safe_load(Path("examples/gpu-teams.yaml").read_text())
    doc["jobs"] = doc["jobs"][:1]
    doc["jobs"][0]["runtime"] = 5
    doc.pop("edits", None)
    scenario = tmp_path / "one.yaml"
    scenario.write_text(yaml.safe_dump(doc))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    out = turnstile("simulate", str(scenario), "--engine", "cluster", "--time-scale", "0.05", "-o", "json", env=env)
    assert out.returncode == 0, out.stderr
    assert list(scratch.iterdir()) == [], list(scratch.iterdir())
    running = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    assert str(scratch) not in running, "no PostgreSQL of this run is left running"
