"""Kueue's CRDs as Turnstile ships them: written from the models, structural, and taking Kueue YAML."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from openapi_schema_validator import OAS30Validator

from queues.kueue import codec, crds, workload_crd

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "manifests" / "base" / "crds.yaml"


def test_the_shipped_crds_are_written_from_the_models() -> None:
    shipped = [d for d in yaml.safe_load_all(SHIPPED.read_text()) if d]
    assert shipped == workload_crd.installed(), "run `make manifests` (turnstile crds > manifests/base/crds.yaml)"


def _structural_problems(node: Any, path: str) -> list[str]:
    """Kubernetes' structural-schema rule, as the API server checks it: every node says its type
    (or is int-or-string, or keeps unknown fields)."""
    if not isinstance(node, dict):
        return []
    out = []
    typed = "type" in node or node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields")
    if not typed:
        out.append(f"{path}: no type")
    for key, child in (node.get("properties") or {}).items():
        out += _structural_problems(child, f"{path}.{key}")
    if isinstance(node.get("items"), dict):
        out += _structural_problems(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        out += _structural_problems(node["additionalProperties"], f"{path}{{}}")
    return out


@pytest.mark.parametrize("kind", list(crds.KINDS))
def test_every_schema_is_structural_with_kueues_names(kind: str) -> None:
    crd = crds.crd(kind)
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1beta2" and version["served"] and version["storage"]
    assert "status" in version["subresources"]
    assert _structural_problems(version["schema"]["openAPIV3Schema"], kind) == []


def test_the_workload_crd_is_structural_and_takes_what_the_projection_writes() -> None:
    crd = workload_crd.crd()
    (version,) = crd["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]
    assert _structural_problems(schema, "Workload") == []
    assert crd["spec"]["names"]["shortNames"] == ["wl"]  # Kueue's
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "Queue", "Reserved in", "Admitted", "Finished", "Age"
    ]  # fmt: skip
    written = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "job-train-1a2b3"},
        "spec": {"active": True, "queueName": "team-a", "priority": 0,
                 "podSets": [{"name": "main", "count": 2, "template": {"spec": {"containers": []}}}]},
        "status": {"conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                                   "message": "", "lastTransitionTime": "2026-12-05T00:00:00Z"}],
                   "admission": {"clusterQueue": "team-a", "podSetAssignments": [
                       {"name": "main", "count": 2, "flavors": {"nvidia.com/gpu": "a100"},
                        "resourceUsage": {"nvidia.com/gpu": "16"}}]}},
    }  # fmt: skip
    OAS30Validator(schema).validate(written)
    wrong = {**written, "spec": {**written["spec"], "podSets": [{"name": "Main!", "template": {}}]}}
    assert not OAS30Validator(schema).is_valid(wrong)


def test_short_names_and_printer_columns_are_kueues() -> None:
    names = {kind: crds.crd(kind)["spec"]["names"].get("shortNames", []) for kind in crds.KINDS}
    assert "cq" in names["ClusterQueue"] and "lq" in names["LocalQueue"]
    assert "rf" in names["ResourceFlavor"] and "wpc" in names["WorkloadPriorityClass"]
    columns = {c["name"] for c in crds.crd("ClusterQueue")["spec"]["versions"][0]["additionalPrinterColumns"]}
    assert {"Cohort", "Strategy", "Pending Workloads", "Admitted Workloads"} <= columns
    columns = {c["name"] for c in crds.crd("LocalQueue")["spec"]["versions"][0]["additionalPrinterColumns"]}
    assert {"ClusterQueue", "Pending Workloads", "Admitted Workloads"} <= columns


KUEUE_V1BETA2 = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-a}
spec:
  cohortName: research
  queueingStrategy: StrictFIFO
  namespaceSelector: {matchExpressions: [{key: team, operator: In, values: [a]}]}
  flavorFungibility: {whenCanBorrow: MayStopSearch, whenCanPreempt: TryNextFlavor}
  preemption:
    withinClusterQueue: LowerPriority
    reclaimWithinCohort: Any
    borrowWithinCohort: {policy: LowerPriority, maxPriorityThreshold: 100}
  admissionChecksStrategy: {admissionChecks: [{name: capacity, onFlavors: [a100]}]}
  stopPolicy: None
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: a100
      resources:
      - {name: cpu, nominalQuota: 64}
      - {name: memory, nominalQuota: 512Gi, borrowingLimit: 128Gi}
      - {name: nvidia.com/gpu, nominalQuota: "8", lendingLimit: "2"}
"""


def _schema(kind: str) -> Any:
    return crds.crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_kueue_v1beta2_yaml_is_accepted_as_it_is_and_mistakes_are_not() -> None:
    cq = yaml.safe_load(KUEUE_V1BETA2)
    assert list(OAS30Validator(_schema("ClusterQueue")).iter_errors(cq)) == []
    codec.parse(cq)  # and Turnstile reads exactly that
    for doc in yaml.safe_load_all((ROOT / "examples" / "queues" / "gpu-teams.yaml").read_text()):
        assert list(OAS30Validator(_schema(doc["kind"])).iter_errors(doc)) == [], doc["metadata"]
    wrong = yaml.safe_load(KUEUE_V1BETA2)
    wrong["spec"]["queueingStrategy"] = "Fastest"
    wrong["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "eight"
    problems = list(OAS30Validator(_schema("ClusterQueue")).iter_errors(wrong))
    assert len(problems) == 2
