"""Which GPU reports are fatal and how they are said (``queues.gpus.gpu_health``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from queues import errors
from queues.gpus.gpu_health import FATAL, Fault, describe, faults
from queues.simulation import scenario, simulator


def _sample(value: str, **labels: str) -> dict[str, object]:
    return {"metric": labels, "value": [1.0, value]}


def test_fatal_xids_ecc_and_row_remap_failures_are_faults_application_xids_are_not() -> None:
    found = faults(
        [
            _sample("79", Hostname="gpu-1", gpu="3", UUID="GPU-a"),
            _sample("13", Hostname="gpu-2", gpu="0", UUID="GPU-b"),  # graphics engine exception: the job's
            _sample("43", Hostname="gpu-2", gpu="1", UUID="GPU-c"),  # a channel stopped: the job's
            _sample("63", Hostname="gpu-2", gpu="2", UUID="GPU-d"),  # a remap pending a reset: works
            _sample("48", node="gpu-3", gpu="0", UUID="GPU-e"),  # (a relabelled node name)
            _sample("79", gpu="0", UUID="GPU-f"),  # no node: cannot be acted on
        ],
        [_sample("2", Hostname="gpu-4", gpu="5", UUID="GPU-g"), _sample("0", Hostname="gpu-5", gpu="0")],
        [_sample("1", Hostname="gpu-6", gpu="1", UUID="GPU-h")],
    )
    assert set(found) == {"gpu-1", "gpu-3", "gpu-4", "gpu-6"}
    assert found["gpu-1"] == [Fault("gpu-1", "3", "GPU-a", "Xid 79 (GPU has fallen off the bus)")]
    assert found["gpu-1"][0].message() == "node gpu-1 GPU 3 (GPU-a) reported Xid 79 (GPU has fallen off the bus)"
    assert found["gpu-3"][0].what == "Xid 48 (double-bit ECC error)"
    assert found["gpu-4"][0].what == "uncorrectable (double-bit) ECC errors (2)"
    assert found["gpu-6"][0].what == "a row-remap failure"
    assert {13, 31, 43, 45, 63}.isdisjoint(FATAL) and {48, 79, 95, 119}.issubset(FATAL)


def test_a_node_whose_gpus_report_the_same_is_said_once() -> None:
    same = [Fault("gpu-1", str(i), f"GPU-{i}", "Xid 79 (GPU has fallen off the bus)") for i in range(8)]
    assert describe(same) == "node gpu-1 GPUs 0-7 reported Xid 79 (GPU has fallen off the bus)"
    mixed = [same[0], same[2], Fault("gpu-1", "5", "GPU-5", "Xid 48 (double-bit ECC error)")]
    assert describe(mixed) == (
        "node gpu-1 GPUs 0, 2 reported Xid 79 (GPU has fallen off the bus); "
        "node gpu-1 GPU 5 (GPU-5) reported Xid 48 (double-bit ECC error)"
    )


def test_engine_core_evicts_what_runs_on_a_node_whose_gpus_report_a_fatal_xid() -> None:
    """examples/gpu-xid.yaml: the job on gpu-1 is evicted when its GPUs report Xid 79, runs again
    on gpu-2, and a later job may use gpu-1 again once the Xid is cleared."""
    doc = yaml.safe_load((Path(__file__).parents[2] / "examples" / "gpu-xid.yaml").read_text())
    events = simulator.Simulation(scenario.parse(doc)).run().to_json()["events"]
    said = [(e["t"], e["type"], e.get("reason"), e.get("detail"), e.get("placement")) for e in events]
    assert said[:2] == [(0, "Submitted", None, None, None), (0, "Admitted", None, None, {"main": {"gpu-1": 1}})]
    assert said[2][:4] == (300, "Evicted", "NodeFailures", "GPUUnhealthy")
    evicted = next(e for e in events if e["type"] == "Evicted")
    assert evicted["message"] == (
        "node gpu-1 GPUs 0-7 reported Xid 79 (GPU has fallen off the bus), where its pods ran; it is requeued"
    )
    assert said[3] == (300, "Admitted", None, None, {"main": {"gpu-2": 1}})  # (gpu-1 tainted: not there)


def test_a_gpu_xid_edit_names_a_node_and_an_xid() -> None:
    doc = yaml.safe_load((Path(__file__).parents[2] / "examples" / "gpu-xid.yaml").read_text())
    doc["edits"] = [
        {"at": 10, "node": "gpu-9", "gpuXid": 79},
        {"at": 20, "node": "gpu-1", "gpuXid": "79"},
        {"at": 30, "gpuXid": 79},
        {"at": 40, "node": "gpu-1", "cordon": "gpu-1"},
    ]
    with pytest.raises(errors.Invalid) as caught:
        scenario.parse(doc)
    said = {e.path: e.message for e in caught.value.errors}
    assert "no node 'gpu-9'" in said["edits[0].node"]
    assert "Xid number" in said["edits[1].gpuXid"]
    assert "takes node" in said["edits[2].node"] and "takes node" in said["edits[3].node"]
