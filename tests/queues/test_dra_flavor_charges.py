"""A prioritized list charged for the alternative admitted (``queues.dra.alternatives``): on a flavor
whose nodes serve only some alternatives, a list costs the most those take; anywhere else (no
``nodeLabels``, nodes serving every alternative or none, Nodes not known) its largest."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from admission.store.workloads import pod_sets_from_json, pod_sets_json
from queues.cycle.scheduler import Admit, Scheduler
from queues.dra import charges, slices
from queues.model import Config
from queues.podsets import jobs
from queues.simulation import scenario, simulator
from queues.workloads import usage_of
from tests.queues.builders import CQ, flavor, local_queue
from tests.queues.test_dra import MAPPINGS, job, sub, template
from tests.queues.test_dra_prioritized import first_available

H100 = {"cel": {"expression": "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100')"}}
A100 = {"cel": {"expression": "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA A100')"}}
ONE_H100_ELSE_TWO_A100 = template(
    "t", first_available(sub("h100", selectors=[H100]), sub("a100", count=2, selectors=[A100]))
)
CLASSES = {"gpu.nvidia.com": ("device.driver == 'gpu.nvidia.com'",)}
NODES = {"h100-node": {"gpu-type": "h100"}, "a100-node": {"gpu-type": "a100"}, "cpu-node": {"gpu-type": "none"}}
FLAVORS = {"h100": {"gpu-type": "h100"}, "a100": {"gpu-type": "a100"}, "any": {}, "cpu": {"gpu-type": "none"}}
CLAIM = {"name": "gpus", "resourceClaimTemplateName": "t"}
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "dra-prioritized.yaml"


def cards(node: str | None, product: str, n: int, *, generation: int = 1, of: int = 1) -> slices.Slice:
    """``n`` GPUs of ``product`` published for ``node`` (None: for every node), in one of ``of`` slices."""
    where: dict[str, Any] = {"nodeName": node} if node else {"allNodes": True}
    devices = [{"name": f"gpu-{i}", "attributes": {"productName": {"string": product}}} for i in range(n)]
    pool = {"name": node or "shared", "generation": generation, "resourceSliceCount": of}
    return slices.Slice.from_object(
        {
            "metadata": {"name": f"{node}-{product}"},
            "spec": {"driver": "gpu.nvidia.com", "pool": pool, **where, "devices": devices},
        }
    )


CLUSTER = (cards("h100-node", "NVIDIA H100 80GB HBM3", 2), cards("a100-node", "NVIDIA A100-SXM4-40GB", 4))


def devices(*published: slices.Slice, nodes: dict[str, dict[str, str]] | None = NODES) -> charges.Devices:
    return charges.Devices.of(MAPPINGS, [ONE_H100_ELSE_TWO_A100], CLASSES, published, nodes=nodes)


def charged(d: charges.Devices, flavors: dict[str, dict[str, str]] = FLAVORS) -> jobs.PodSet:
    (ps,) = d.charge("ns", job("j", CLAIM).pod_sets, flavors)
    return ps


def test_a_list_costs_on_a_flavor_only_what_its_nodes_can_serve() -> None:
    ps = charged(devices(*CLUSTER))
    assert ps.requests == {"cpu": 1000, "whole-gpus": 2000}  # (no flavor known: the largest)
    # the H100 flavor's node serves only the first alternative: one GPU; the A100 flavor's costs
    # what the largest does (left out); every node ("any") and no GPU node ("cpu") keep the largest
    assert ps.by_flavor == {"h100": {"whole-gpus": 1000}}
    assert ps.on("h100", "whole-gpus") == 1000 and ps.on("a100", "whole-gpus") == 2000 and ps.on("any", "cpu") == 1000


def test_where_nodes_serve_both_or_are_unknown_the_largest_is_charged() -> None:
    both = cards("h100-node", "NVIDIA A100-SXM4-40GB", 2)  # (the H100 node has A100s too)
    assert charged(devices(*CLUSTER, both)).by_flavor == {}
    everywhere = cards(None, "NVIDIA A100-SXM4-40GB", 2)  # (published for every node: any may serve them)
    assert charged(devices(*CLUSTER, everywhere)).by_flavor == {}
    assert charged(devices(*CLUSTER, nodes=None)).by_flavor == {}  # (the Nodes not listed)
    assert charged(devices(*CLUSTER), {}).by_flavor == {}
    no_class = charges.Devices.of(MAPPINGS, [ONE_H100_ELSE_TWO_A100], {}, CLUSTER, nodes=NODES)
    assert charged(no_class).by_flavor == {}  # (a DeviceClass not seen yet may select anything)
    rewriting = cards("a100-node", "NVIDIA A100-SXM4-40GB", 4, generation=2, of=2)  # (one of its two slices yet)
    assert charged(devices(*CLUSTER, rewriting)).by_flavor == {}  # (what the A100 node has is not known whole)
    too_few = cards("h100-node", "NVIDIA A100-SXM4-40GB", 1)  # (one A100 there cannot serve "two A100s")
    assert charged(devices(*CLUSTER, too_few)).by_flavor == {"h100": {"whole-gpus": 1000}}


def test_the_store_keeps_what_a_list_costs_on_each_flavor() -> None:
    ps = charged(devices(*CLUSTER))
    assert pod_sets_from_json(pod_sets_json((ps,))) == (ps,)


def test_usage_counts_the_flavor_admitted() -> None:
    ps = charged(devices(*CLUSTER))
    on_h100 = usage_of((ps,), {"main": {"cpu": "h100", "whole-gpus": "h100"}}, {"cpu", "whole-gpus"})
    on_a100 = usage_of((ps,), {"main": {"cpu": "a100", "whole-gpus": "a100"}}, {"cpu", "whole-gpus"})
    assert on_h100 == {("h100", "cpu"): 1000, ("h100", "whole-gpus"): 1000}
    assert on_a100 == {("a100", "cpu"): 1000, ("a100", "whole-gpus"): 2000}


def config(h100_labels: dict[str, str]) -> Config:
    queue = CQ("cq").group(("h100", {"cpu": 16, "whole-gpus": 2}), ("a100", {"cpu": 16, "whole-gpus": 4}))
    return Config.of(
        [flavor("h100", h100_labels), flavor("a100", {"gpu-type": "a100"}), queue.build(), local_queue("ns", "q", "cq")]
    )


def submitted(s: Scheduler, *names: str) -> list[str]:
    for i, name in enumerate(names):
        s.submit(s.intake.workload_for(job(name, CLAIM), seq=i + 1, now=0.0))
    return [d.workload.key for d in s.schedule() if isinstance(d, Admit)]


def test_the_charge_follows_the_flavor_admitted_and_quota_holds() -> None:
    """Two H100s and four A100s of quota: two jobs get an H100 each (one GPU charged), the next two
    fall back to the A100 flavor (two each), and the fifth waits: never more than the quota."""
    s = Scheduler(config({"gpu-type": "h100"}))
    s.intake.set_devices(devices(*CLUSTER))
    assert submitted(s, "a", "b", "c", "d", "e") == ["ns/a", "ns/b", "ns/c", "ns/d"]
    flavors = [s.workloads[f"ns/{n}"].admission.flavors["main"]["whole-gpus"] for n in "abcd"]  # type: ignore[union-attr]
    assert flavors == ["h100", "h100", "a100", "a100"]
    assert s.snapshot.queues["cq"].usage[("h100", "whole-gpus")] == 2000
    assert s.snapshot.queues["cq"].usage[("a100", "whole-gpus")] == 4000
    assert s.workloads["ns/e"].reason == "WaitingForQuota"


def test_a_new_configuration_charges_the_waiting_again() -> None:
    """The H100 flavor's nodeLabels once named no node, so a job there was charged the largest;
    relabelled to the H100 node, the waiting job is charged one GPU on it."""
    s = Scheduler(config({"gpu-type": "nowhere"}))
    s.intake.set_devices(devices(*CLUSTER))
    assert submitted(s, "a", "b", "c", "d") == ["ns/a", "ns/b", "ns/c"]  # (two GPUs each: 2 + 4)
    assert s.workloads["ns/d"].pod_sets[0].by_flavor == {}
    s.set_config(config({"gpu-type": "h100"}))
    assert s.workloads["ns/d"].pod_sets[0].by_flavor == {"h100": {"whole-gpus": 1000}}
    assert s.workloads["ns/a"].pod_sets[0].by_flavor == {}  # (admitted: it keeps what it was charged)
    assert not [d for d in s.schedule() if isinstance(d, Admit)]  # (a holds the H100 flavor's 2)


def test_placed_by_topology_a_pod_takes_of_a_node_what_it_is_charged_on_the_flavor() -> None:
    """examples/dra-prioritized.yaml with its h100 flavor placed by topology: a job of two pods that
    must share a node fits the H100 node's two GPUs (one each, as charged on h100), where two pods
    charged the largest (two GPUs each) would need four."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["manifests"].append(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Topology",
            "metadata": {"name": "hosts"},
            "spec": {"levels": [{"nodeLabel": "kubernetes.io/hostname"}]},
        }
    )
    (h100,) = [m for m in doc["manifests"] if m["kind"] == "ResourceFlavor" and m["metadata"]["name"] == "h100"]
    h100["spec"]["topologyName"] = "hosts"
    pair = copy.deepcopy(doc["jobs"][0])
    pair["object"]["metadata"]["name"] = "pair"
    pair["object"]["spec"].update(parallelism=2, completions=2)
    pair["object"]["spec"]["template"]["metadata"] = {
        "annotations": {"kueue.x-k8s.io/podset-required-topology": "kubernetes.io/hostname"}
    }
    doc["jobs"] = [pair]
    result = simulator.Simulation(scenario.parse(doc)).run().to_json("core")
    (admitted,) = [e for e in result["events"] if e["type"] == "Admitted"]
    assert admitted["flavors"] == {"main": {"cpu": "h100", "whole-gpus": "h100"}}
    assert admitted["placement"] == {"main": {"h100-node": 2}}
