"""The admin commands as a user runs them, against a real PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from admission import urls
from tests.admission.runner import ROOT, turnstile

GPU_TEAMS = ROOT / "examples" / "gpu-teams.yaml"


@pytest.fixture
def cli(migrated_url: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    env = {
        **os.environ,
        "TURNSTILE_DATABASE_URL": migrated_url,
        "TURNSTILE_HOME": str(tmp_path / "home"),
        "TURNSTILE_ACTOR": "tester",
    }

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return turnstile(*args, stdin=stdin, env=env)

    return run


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    manifests = yaml.safe_load(GPU_TEAMS.read_text())["manifests"]
    path = tmp_path / "queues.yaml"
    path.write_text(yaml.safe_dump_all(manifests, sort_keys=False))
    return path


def test_apply_get_and_reapply(cli, config_file: Path) -> None:  # type: ignore[no-untyped-def]
    first = cli("apply", "-f", str(config_file))
    assert first.returncode == 0, first.stderr
    assert "clusterqueue/vision created" in first.stdout.splitlines()
    assert "localqueue/ml-dev/default created" in first.stdout.splitlines()
    again = cli("apply", "-f", str(config_file))
    assert set(line.rsplit(" ", 1)[1] for line in again.stdout.splitlines()) == {"unchanged"}
    table = cli("get", "cq")
    assert table.returncode == 0 and "vision" in table.stdout and "training" in table.stdout
    as_json = json.loads(cli("get", "clusterqueue", "vision", "-o", "json").stdout)
    assert as_json["kind"] == "ClusterQueue" and as_json["spec"]["cohort"] == "training"
    as_yaml = yaml.safe_load(cli("get", "lq", "-A", "-o", "yaml").stdout)
    assert {i["metadata"]["name"] for i in as_yaml["items"]} == {"vision", "nlp", "default"}


def test_stdin_folder_and_dry_run(cli, config_file: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    dry = cli("apply", "-f", "-", "--dry-run", stdin=config_file.read_text())
    assert dry.returncode == 0 and "clusterqueue/nlp created (dry run)" in dry.stdout
    assert "No ClusterQueue found." in cli("get", "cq").stdout
    folder = tmp_path / "conf"
    folder.mkdir()
    (folder / "all.yaml").write_text(config_file.read_text())
    assert cli("apply", "-f", str(folder)).returncode == 0
    assert "vision" in cli("get", "cq").stdout


def test_invalid_file_reports_every_problem_and_changes_nothing(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {name: ok}\n---\n"
        "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {name: team-a}\nspec:\n"
        "  resourceGroups:\n  - coveredResources: [cpu, memory]\n    flavors:\n    - name: ok\n      resources:\n"
        "      - {name: cpu, nominalQuota: 1e400}\n      - {name: memory, nominalQuota: 12Qi}\n---\n"
        "apiVersion: kueue.x-k8s.io/v1alpha9\nkind: ClusterQueue\nmetadata: {name: x}\n---\n"
        "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {name: ok}\n"
    )
    out = cli("apply", "-f", str(bad))
    assert out.returncode == 1
    lines = out.stderr.splitlines()
    assert (
        f"error: {bad}: document 2 (ClusterQueue/team-a): spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: '1e400' is too large (the most Kubernetes stores is 9223372036854775807)"
        in lines
    )
    assert any(
        "document 2 (ClusterQueue/team-a): spec.resourceGroups[0].flavors[0].resources[1].nominalQuota: '12Qi' is not a quantity"
        in line
        for line in lines
    )
    assert any(
        "document 3 (ClusterQueue/x): apiVersion: 'kueue.x-k8s.io/v1alpha9' is not supported" in line for line in lines
    )
    assert any("document 4 (ResourceFlavor/ok): metadata.name: duplicate ResourceFlavor 'ok'" in line for line in lines)
    assert lines[-1] == "nothing was applied"
    assert "Traceback" not in out.stderr
    assert "No ResourceFlavor found." in cli("get", "rf").stdout


@pytest.mark.parametrize(
    ("content", "expected"),
    [("a: [unclosed\n", "not valid YAML (line 2"), ("a: 1\na: 2\n", "duplicate key 'a'")],
    ids=["malformed", "duplicate-key"],
)
def test_unreadable_input_exits_2(cli, tmp_path: Path, content: str, expected: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "x.yaml"
    path.write_text(content)
    out = cli("apply", "-f", str(path))
    assert out.returncode == 2 and expected in out.stderr
    missing = cli("apply", "-f", str(tmp_path / "missing.yaml"))
    assert missing.returncode == 2 and "no such file or folder" in missing.stderr


def test_quota_stop_resume_delete_and_history(cli, config_file: Path) -> None:  # type: ignore[no-untyped-def]
    assert cli("apply", "-f", str(config_file)).returncode == 0
    out = cli("quota", "set", "vision", "--flavor", "a100", "nvidia.com/gpu=24")
    assert out.returncode == 0 and out.stdout.strip() == "clusterqueue/vision configured"
    wrong = cli("quota", "set", "vision", "--flavor", "v100", "nvidia.com/gpu=4")
    assert wrong.returncode == 1 and "it has: cpu-pool/cpu" in wrong.stderr
    bad_qty = cli("quota", "set", "vision", "--flavor", "a100", "nvidia.com/gpu=lots")
    assert bad_qty.returncode == 2
    assert cli("stop", "clusterqueue", "nlp", "--drain").stdout.strip() == "clusterqueue/nlp stopped (HoldAndDrain)"
    assert "HoldAndDrain" in cli("get", "cq", "nlp").stdout
    assert cli("resume", "cq", "nlp").stdout.strip() == "clusterqueue/nlp resumed"
    described = cli("describe", "cq", "vision")
    assert described.returncode == 0 and "Active" in described.stdout and "24" in described.stdout
    assert cli("delete", "cq", "dev").stdout.strip() == "clusterqueue/dev deleted"
    missing = cli("delete", "cq", "dev")
    assert missing.returncode == 1 and "clusterqueue/dev not found" in missing.stderr
    history = cli("history", "clusterqueue/vision")
    assert history.returncode == 0
    assert "tester  update  clusterqueue/vision" in history.stdout
    assert "-        nominalQuota: '16'" in history.stdout and "+        nominalQuota: '24'" in history.stdout
    assert "delete  clusterqueue/dev" in cli("history").stdout


def test_stopping_a_workload_names_it_namespaced_and_says_what_is_wrong(cli) -> None:  # type: ignore[no-untyped-def]
    # (stopping and resuming a real one: tests/admission/controller/test_activity.py)
    bare = cli("stop", "workload", "train")
    assert bare.returncode == 2 and "name a Workload as NAMESPACE/NAME" in bare.stderr
    drain = cli("stop", "wl", "ml/train", "--drain")
    assert drain.returncode == 2 and "--drain is for queues" in drain.stderr
    missing = cli("resume", "workloads.kueue.x-k8s.io", "ml/train")
    assert missing.returncode == 1, missing
    assert "workload/ml/train not found" in missing.stderr and "turnstile get workloads -n ml" in missing.stderr
    other = cli("stop", "rf", "a100")
    assert other.returncode == 2 and "stop and resume take clusterqueue, localqueue or workload" in other.stderr


def test_kueue_and_kubectl_kind_names_are_understood(cli) -> None:  # type: ignore[no-untyped-def]
    assert cli("get", "workloads.kueue.x-k8s.io").stdout.strip() == "No workloads found."
    assert cli("get", "wl.turnstile.dev").stdout.strip() == "No workloads found."
    assert cli("get", "clusterqueues.kueue.x-k8s.io").returncode == 0
    wrong = cli("get", "clusterqueues.turnstile.dev")
    assert wrong.returncode == 2 and "unknown kind" in wrong.stderr


def test_unknown_kind_is_bad_usage(cli) -> None:  # type: ignore[no-untyped-def]
    out = cli("get", "queuez")
    assert out.returncode == 2 and "unknown kind 'queuez'" in out.stderr


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda u: urls.with_database(u, "no_such_db"), 'database "no_such_db" does not exist'),
        (lambda u: u.replace("://postgres", "://nobody", 1), "PostgreSQL refused the login"),
        (lambda u: u + ("&" if "?" in u else "?") + "keepalives=1", "keepalives is not supported"),
    ],
    ids=["missing-database", "missing-role", "libpq-only-parameter"],
)
def test_database_problems_are_said_as_such(migrated_url: str, tmp_path: Path, change, expected: str) -> None:  # type: ignore[no-untyped-def]
    """Not 'the schema is at nothing' for a database that is not there, and never a traceback."""
    url = change(migrated_url)
    env = {**os.environ, "TURNSTILE_DATABASE_URL": url, "TURNSTILE_HOME": str(tmp_path)}
    done = turnstile("get", "cq", env=env)
    assert done.returncode in (1, 2) and expected in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "schema is at" not in done.stderr


BOMB = (
    "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata:\n  name: bomb\n  managedFields:\n"
    "    a: &a [x,x,x,x,x,x,x,x,x,x]\n    b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
    "    c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n    d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
    "    e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\n    f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
)
FLAVOR = "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {{name: {name}, {meta}}}\nspec: {spec}\n"


@pytest.mark.parametrize(
    ("content", "code", "expected"),
    [
        (BOMB, 2, "refused: the document expands to more than 200,000 values"),
        ("a: " + "[" * 20000 + "]" * 20000 + "\n", 2, "refused: collections nested more than 64 deep"),
        (
            FLAVOR.format(name="big", meta="annotations: {note: " + "y" * 300_000 + "}", spec="{}"),
            1,
            "metadata.annotations: may not be more than 256 KiB in total",
        ),
        (
            FLAVOR.format(name="Not_A_Name", meta="labels: {}", spec="{}"),
            1,
            "metadata.name: 'Not_A_Name' is not a valid name",
        ),
        (
            FLAVOR.format(name="f", meta="labels: {team: " + "x" * 64 + "}", spec="{}"),
            1,
            "metadata.labels[team]: label value",
        ),
        (
            FLAVOR.format(name="f", meta="labels: {}", spec="{nodeLabels: {gpu: " + "x" * 64 + "}}"),
            1,
            "spec.nodeLabels[gpu]: label value",
        ),
    ],
    ids=["alias-bomb", "deep-nesting", "huge-annotation", "invalid-name", "long-label-value", "long-node-label"],
)
def test_hostile_or_oversized_input_is_refused_fast_with_one_clear_line(
    cli,
    tmp_path: Path,
    content: str,
    code: int,
    expected: str,  # type: ignore[no-untyped-def]
) -> None:
    path = tmp_path / "input.yaml"
    path.write_text(content)
    done = cli("apply", "-f", str(path))
    assert done.returncode == code and expected in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_server_owned_metadata_is_not_stored(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """An object exported with kubectl get -o yaml carries managedFields, uid, resourceVersion...:
    the API server ignores them, and so does Turnstile (nothing of them is stored)."""
    exported = FLAVOR.format(
        name="exported", meta="uid: abc, resourceVersion: '42', managedFields: [{manager: kubectl}]", spec="{}"
    )
    path = tmp_path / "exported.yaml"
    path.write_text(exported)
    assert cli("apply", "-f", str(path)).returncode == 0
    shown = cli("get", "rf", "exported", "-o", "yaml").stdout
    assert "managedFields" not in shown and "resourceVersion" not in shown and "uid" not in shown


UNUSED = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: h100}
spec: {topologyName: default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: fair}
spec:
  cohortName: all
  fairSharing: {weight: "2"}
  flavorFungibility: {whenCanBorrow: TryNextFlavor, whenCanPreempt: TryNextFlavor, preference: PreemptionOverBorrowing}
  admissionScope: {admissionMode: UsageBasedAdmissionFairSharing}
  concurrentAdmissionPolicy: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: h100, resources: [{name: nvidia.com/gpu, nominalQuota: "8"}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: team, namespace: default}
spec: {clusterQueue: fair, fairSharing: {weight: "3"}}
"""


def test_fields_turnstile_does_not_act_on_yet_are_applied_with_a_warning_naming_them(cli) -> None:  # type: ignore[no-untyped-def]
    applied = cli("apply", "-f", "-", stdin=UNUSED)
    assert applied.returncode == 0, applied.stderr
    warnings = [line for line in applied.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 3, applied.stderr
    assert not any("topologyName" in w for w in warnings), "the controller places by topology"
    for field in ("spec.fairSharing", "spec.admissionScope", "spec.concurrentAdmissionPolicy"):
        assert any(field in w and "accepted but not used" in w for w in warnings), (field, warnings)
    assert not any("preference" in w for w in warnings), "flavorFungibility.preference is acted on"
    fair = [w for w in warnings if "spec.fairSharing" in w]
    assert len(fair) == 1 and "localqueue" in fair[0].lower(), "a ClusterQueue's weight is acted on (fair sharing)"
    assert "clusterqueue/fair created" in applied.stdout


def test_a_topology_is_stored_and_kept_while_a_flavor_names_it(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    topology = tmp_path / "topology.yaml"
    topology.write_text(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Topology\nmetadata: {name: racks}\n"
        "spec: {levels: [{nodeLabel: cloud.provider.com/topology-rack}, {nodeLabel: kubernetes.io/hostname}]}\n"
        "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: h100}\n"
        "spec: {topologyName: racks}\n"
    )
    out = cli("apply", "-f", str(topology))
    assert out.returncode == 0, out.stderr
    assert "topology/racks created" in out.stdout and "resourceflavor/h100 created" in out.stdout
    assert "warning" not in out.stderr, out.stderr
    got = json.loads(cli("get", "topology", "racks", "-o", "json").stdout)
    assert [lv["nodeLabel"] for lv in got["spec"]["levels"]][-1] == "kubernetes.io/hostname"
    refused = cli("delete", "topology", "racks")
    assert refused.returncode != 0 and "topology/racks is named by resourceflavor/h100" in refused.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Topology\nmetadata: {name: bad}\n"
        "spec: {levels: [{nodeLabel: kubernetes.io/hostname}, {nodeLabel: rack}]}\n"
    )
    out = cli("apply", "-f", str(bad))
    assert out.returncode != 0 and "spec.levels[0].nodeLabel: kubernetes.io/hostname can only be the last" in out.stderr


def _cluster_queues(n: int) -> str:
    one = (
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {{name: cq-{i}}}\nspec:\n  namespaceSelector: {{}}\n"
        "  resourceGroups:\n  - coveredResources: [nvidia.com/gpu]\n    flavors:\n    - name: a100\n"
        "      resources: [{{name: nvidia.com/gpu, nominalQuota: '8'}}]\n"
    )
    return "---\n".join(one.format(i=i) for i in range(n))


def test_input_past_its_bounds_is_refused_and_nothing_is_applied(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """More documents than one apply takes is refused while reading (status 2); a run past its memory
    (or time) is stopped (status 1) with its transaction rolled back."""
    many = tmp_path / "many.yaml"
    many.write_text(_cluster_queues(20_001))
    out = cli("apply", "-f", str(many), "--dry-run")
    assert out.returncode == 2, out.stderr
    assert f"error: {many}: refused: more than 20,000 documents" in out.stderr and "split it" in out.stderr
    some = tmp_path / "some.yaml"
    some.write_text(_cluster_queues(2_000))
    out = cli("apply", "-f", str(some), "--max-memory", "0.02")
    assert out.returncode == 1, out.stderr
    assert "stopped: it needed more than 0.02 GiB of memory (--max-memory" in out.stderr, out.stderr
    assert "nothing was applied" in out.stderr
    listed = cli("get", "cq")
    assert "cq-0" not in listed.stdout, listed.stdout
    out = cli("apply", "-f", str(some))
    assert out.returncode == 0, out.stderr
    assert "clusterqueue/cq-1999 created" in out.stdout


def test_db_upgrade_says_what_it_did(new_database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """On an empty database it creates the schema (and says so), then it is up to date."""
    env = {**os.environ, "TURNSTILE_DATABASE_URL": new_database(), "TURNSTILE_HOME": str(tmp_path)}
    first = turnstile("db", "upgrade", env=env)
    assert first.returncode == 0 and first.stdout.startswith("database schema created (revision "), first
    again = turnstile("db", "upgrade", env=env)
    assert again.returncode == 0 and again.stdout.startswith("database schema is up to date (revision "), again


def test_convert_prints_v1beta2_and_says_nothing_was_converted_on_errors(tmp_path: Path) -> None:
    old = tmp_path / "old.yaml"
    old.write_text(
        "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {name: team-a}\nspec:\n"
        "  cohort: research\n  namespaceSelector: {}\n  resourceGroups:\n  - coveredResources: [nvidia.com/gpu]\n"
        "    flavors: [{name: a100, resources: [{name: nvidia.com/gpu, nominalQuota: '8'}]}]\n"
    )
    out = turnstile("convert", "-f", str(old))
    assert out.returncode == 0, out.stderr
    converted = yaml.safe_load(out.stdout)
    assert converted["apiVersion"] == "kueue.x-k8s.io/v1beta2" and converted["spec"]["cohortName"] == "research"
    bad = tmp_path / "bad.yaml"
    bad.write_text(old.read_text().replace("'8'", "'eight'"))
    out = turnstile("convert", "-f", str(bad))
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.rstrip().endswith("nothing was converted"), out.stderr


def test_convert_reads_a_v1alpha1_topology(tmp_path: Path) -> None:
    """Kueue's Topology was v1alpha1 before v1beta1, in the same shape: converted, not refused."""
    old = tmp_path / "topology.yaml"
    old.write_text(
        "apiVersion: kueue.x-k8s.io/v1alpha1\nkind: Topology\nmetadata: {name: default}\nspec:\n"
        "  levels:\n  - nodeLabel: cloud.provider.com/topology-block\n  - nodeLabel: kubernetes.io/hostname\n"
    )
    out = turnstile("convert", "-f", str(old))
    assert out.returncode == 0, out.stderr
    converted = yaml.safe_load(out.stdout)
    assert converted["apiVersion"] == "kueue.x-k8s.io/v1beta2" and converted["kind"] == "Topology", converted
    assert [lv["nodeLabel"] for lv in converted["spec"]["levels"]] == [
        "cloud.provider.com/topology-block",
        "kubernetes.io/hostname",
    ]
    other = tmp_path / "other.yaml"
    other.write_text(old.read_text().replace("kind: Topology", "kind: ResourceFlavor").split("spec:")[0])
    refused = turnstile("convert", "-f", str(other))
    assert refused.returncode == 1 and "v1alpha1" in refused.stderr, refused.stderr
