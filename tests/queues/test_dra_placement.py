"""DRA devices in topology-aware placement (``queues.dra.node_capacity``): what each node's
ResourceSlices offer of the mapped resources, the inventory adding it to the node, and pods that
claim devices placed where the devices are (examples/dra-topology.yaml, in engine core)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from admission.cli import documents
from queues.dra import charges, mappings, node_capacity, slices
from queues.placement.inventory import ALL_NODES, Inventory
from queues.placement.nodes import NodeInfo, node_object
from queues.podsets import jobs
from queues.simulation import scenario, simulator

GPU_CLASS = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
MIG_CLASS = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"
CLASSES = {"gpu.nvidia.com": (GPU_CLASS,), "mig.nvidia.com": (MIG_CLASS,)}
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "dra-topology.yaml"


def _slice(node: str | None, *devices: dict[str, Any], counters: list[dict[str, Any]] | None = None) -> slices.Slice:
    spec: dict[str, Any] = {"driver": "gpu.nvidia.com", "pool": {"name": node or "network"}, "devices": list(devices)}
    if node is not None:
        spec["nodeName"] = node
    if counters is not None:
        spec["sharedCounters"] = counters
    return slices.Slice.from_object({"metadata": {"name": f"{node}-slice"}, "spec": spec})


def _gpu(name: str) -> dict[str, Any]:
    return {"name": name, "attributes": {"type": {"string": "gpu"}}}


def _mig(name: str, memory: str) -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {"type": {"string": "mig"}},
        "consumesCounters": [{"counterSet": "card-0", "counters": {"memory": {"value": memory}}}],
    }


def test_a_node_offers_one_unit_per_device_its_slices_publish_that_a_mapped_device_class_selects() -> None:
    devices = charges.Devices.of(
        mappings.parse([{"name": "whole-gpus", "deviceClassNames": ["gpu.nvidia.com"]}]),
        [],
        CLASSES,
        [
            _slice("a", _gpu("gpu-0"), _gpu("gpu-1"), _mig("mig-0", "16Gi")),
            _slice("b", *(_gpu(f"gpu-{i}") for i in range(4))),
            _slice(None, _gpu("net-0")),  # (published for every node: network-attached)
        ],
    )
    assert node_capacity.by_node(devices) == {
        "a": {"whole-gpus": 2000},  # (its MIG partition is not of gpu.nvidia.com)
        "b": {"whole-gpus": 4000},
        ALL_NODES: {"whole-gpus": 1000},
    }


def test_a_counter_charged_resource_is_offered_the_cards_shared_counters() -> None:
    card = [{"name": "card-0", "counters": {"memory": {"value": "140Gi"}}}]
    devices = charges.Devices.of(
        mappings.parse(
            [
                {
                    "name": "gpu.memory",
                    "deviceClassNames": ["mig.nvidia.com"],
                    "sources": [
                        {"counter": {"name": "memory", "driver": "gpu.nvidia.com",
                                     "deviceSelector": {"cel": {"expression": "true"}}}}
                    ],
                }
            ]
        ),
        [],
        CLASSES,
        [_slice("h200", _mig("mig-0", "16Gi"), _mig("mig-1", "71424Mi"), counters=card)],
    )  # fmt: skip
    assert node_capacity.by_node(devices) == {"h200": {"gpu.memory": 140 * 1024**3 * 1000}}


def test_the_inventory_adds_what_devices_offer_to_a_node_as_it_is_put_and_when_the_offer_changes() -> None:
    inventory = Inventory()
    inventory.put(NodeInfo.of(node_object("a", {"capacity": {"cpu": "8", "pods": "10"}})))
    before = inventory.version
    inventory.set_devices({"a": {"whole-gpus": 2000}, ALL_NODES: {"net": 1000}})
    assert inventory.free["a"] == {"cpu": 8000, "pods": 10000, "whole-gpus": 2000, "net": 1000}
    assert inventory.version > before, "what may fit changed: failures are looked at again"
    inventory.put(NodeInfo.of(node_object("b", {"capacity": {"cpu": "8", "pods": "10"}})))
    assert inventory.free["b"] == {"cpu": 8000, "pods": 10000, "net": 1000}
    inventory.hold({"main": {"a": 1}}, {"main": {"whole-gpus": 2000}}, 1)
    inventory.set_devices({"a": {"whole-gpus": 4000}})
    assert inventory.free["a"] == {"cpu": 8000, "pods": 10000, "whole-gpus": 2000}, "what is held stays held"
    version = inventory.version
    inventory.set_devices({"a": {"whole-gpus": 4000}})
    assert inventory.version == version, "the same offer changes nothing"


def test_a_pod_set_takes_its_devices_of_a_node_where_it_is_placed() -> None:
    ps = jobs.PodSet("main", 2, {"cpu": 1000, "whole-gpus": 2000}, devices={"whole-gpus": 2000})
    assert ps.node_requests == {"cpu": 1000}, "(the kube-scheduler's node capacity has no DRA devices)"
    assert ps.placed_requests == {"cpu": 1000, "whole-gpus": 2000}


def test_pods_that_claim_gpus_are_placed_on_the_nodes_that_publish_them() -> None:
    result = simulator.Simulation(scenario.parse(documents.load_single(str(EXAMPLE)))).run().to_json("core")
    admitted = [(e["t"], e["workload"], e["placement"]) for e in result["events"] if e["type"] == "Admitted"]
    assert admitted == [
        (0, "ml/pair", {"main": {"r1-big": 2}}),  # two pods of two GPUs on one node: a node of four
        (10, "ml/solo", {"main": {"r0-small": 1}}),  # the tightest node that has two GPUs
        (20, "ml/second-pair", {"main": {"r0-big": 2}}),
        (310, "ml/late", {"main": {"r0-small": 1}}),  # every GPU placed until solo finished
    ]
