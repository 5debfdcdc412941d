"""GPU health: which Xid errors make a GPU, and so its node, unfit for work, and what to say.

Why: a GPU that has fallen off the bus (Xid 79) or lost memory to an uncorrectable ECC error
(Xid 48, 95) fails every job placed on it and every job after it, while the node looks Ready to
Kubernetes. dcgm-exporter reports the last Xid each GPU saw (``DCGM_FI_DEV_XID_ERRORS``, a gauge
of the Xid's number) and, where the exporter's counters are on, uncorrectable (double-bit) ECC
errors (``DCGM_FI_DEV_ECC_DBE_VOL_TOTAL``) and row-remap failures
(``DCGM_FI_DEV_ROW_REMAP_FAILURE``). The controller reads them through Prometheus
(``admission.controller.features.gpu_health``) and engine core from a scenario's ``gpuXid`` edits; both
ask this module whether a report is fatal and say it in the same words:

    node gpu-1 GPU 0 (GPU-3f2a...) reported Xid 79 (GPU has fallen off the bus)

Fatal (``FATAL``) are the Xids for which NVIDIA's Xid catalog asks for a GPU reset, a node
reboot or a service call rather than an application restart: the GPU cannot be trusted until an
operator has acted. Application Xids (13 graphics engine exception, 31 memory page fault, 43 GPU
stopped processing a channel, 45 preemptive cleanup) are the job's own fault and the GPU stays
healthy: they are never acted on. Xid 63 (a row remap recorded, pending a reset) is not fatal
either: the GPU works until its next reset applies the remap.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from queues.gpus.gpu_metrics import sample_value

XID_ERRORS = "DCGM_FI_DEV_XID_ERRORS"
ECC_DBE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
ROW_REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
GPU_UNHEALTHY = "GPUUnhealthy"  # the NodeFailures eviction's detail, and the Node's Event reason
TAINT = "turnstile.dev/gpu-unhealthy"  # TURNSTILE_GPU_HEALTH=taint: NoSchedule until it is cleared
NODE_LABELS = ("Hostname", "node", "kubernetes_node")  # where a series names its node (dcgm-exporter: Hostname)

FATAL: dict[int, str] = {
    46: "GPU stopped processing",
    48: "double-bit ECC error",
    62: "internal micro-controller halt",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
}


@dataclass(frozen=True, slots=True, order=True)
class Fault:
    """A GPU reporting something fatal: its node, its index and UUID, and what it reported."""

    node: str
    gpu: str
    uuid: str
    what: str  # "Xid 79 (GPU has fallen off the bus)", "uncorrectable ECC errors (3)"

    def message(self) -> str:
        uuid = f" ({self.uuid})" if self.uuid else ""
        return f"node {self.node} GPU {self.gpu}{uuid} reported {self.what}"


def simulated_uuid(node: str, index: int) -> str:
    """The UUID the simulated dcgm-exporter gives a node's GPU (engine core says the same)."""
    return "GPU-" + hashlib.sha1(f"{node}/{index}".encode()).hexdigest()[:32]


def taint_value(found: Iterable[Fault]) -> str:
    """The value of ``TAINT`` on a node with these faults: the first one's kind (``Xid-79``)."""
    first = min(found)
    return first.what.split(" (")[0].replace(" ", "-")[:63]


def describe(found: Iterable[Fault]) -> str:
    """A node's faults in one sentence: each GPU with its UUID where one GPU reports something,
    the GPUs listed where several report the same (``node gpu-1 GPUs 0-7 reported Xid 79 (...)``)."""
    by_what: dict[tuple[str, str], list[Fault]] = {}
    for fault in sorted(found):
        by_what.setdefault((fault.node, fault.what), []).append(fault)
    said = []
    for (node, what), faults_ in by_what.items():
        if len(faults_) == 1:
            said.append(faults_[0].message())
        else:
            said.append(f"node {node} GPUs {_indices([f.gpu for f in faults_])} reported {what}")
    return "; ".join(said)


def _indices(gpus: list[str]) -> str:
    """GPU indices as ranges where they run on (0-7, or 0, 2, 5)."""
    if all(g.isdigit() for g in gpus):
        numbers = sorted(int(g) for g in gpus)
        if numbers == list(range(numbers[0], numbers[-1] + 1)):
            return f"{numbers[0]}-{numbers[-1]}"
        return ", ".join(str(n) for n in numbers)
    return ", ".join(gpus)


def xid_fault(node: str, gpu: str, uuid: str, xid: int) -> Fault | None:
    """The fault an Xid is, or None when it is not fatal (an application's, or none: 0)."""
    name = FATAL.get(xid)
    return None if name is None else Fault(node, gpu, uuid, f"Xid {xid} ({name})")


def faults(
    xids: Iterable[Mapping[str, Any]],
    dbe: Iterable[Mapping[str, Any]] = (),
    remap: Iterable[Mapping[str, Any]] = (),
) -> dict[str, list[Fault]]:
    """Each node's fatal faults, from three instant queries' results (Prometheus's ``data.result``:
    ``{metric: {labels}, value: [time, "79"]}``); a series naming no node is left out."""
    out: dict[str, list[Fault]] = {}
    for kind, result in (("xid", xids), ("dbe", dbe), ("remap", remap)):
        for sample in result:
            labels = sample.get("metric") or {}
            if not isinstance(labels, Mapping):
                continue
            node = next((str(labels[k]) for k in NODE_LABELS if labels.get(k)), "")
            value = sample_value(sample.get("value"))
            if not node or value is None or value <= 0:
                continue
            gpu, uuid = str(labels.get("gpu", "?")), str(labels.get("UUID", ""))
            if kind == "xid":
                fault = xid_fault(node, gpu, uuid, int(value))
            elif kind == "dbe":
                fault = Fault(node, gpu, uuid, f"uncorrectable (double-bit) ECC errors ({int(value)})")
            else:
                fault = Fault(node, gpu, uuid, "a row-remap failure")
            if fault is not None:
                out.setdefault(node, []).append(fault)
    return {node: sorted(set(found)) for node, found in out.items()}
