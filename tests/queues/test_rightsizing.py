"""Right-sizing's verdicts (``queues.gpus.rightsizing``): memory decides, utilisation guards, only
what the install offers, never a verdict without data."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest
import yaml

from queues import errors
from queues.gpus.rightsizing import Measured, offered, offered_in, part_of_card, verdict
from queues.kueue import api, codec
from queues.simulation import scenario, simulator

H200 = 143771.0  # MiB, as nvidia-smi reads a real H200
OFFERS = ("nvidia.com/mig-1g.18gb", "nvidia.com/mig-1g.35gb", "nvidia.com/mig-3g.71gb", "nvidia.com/mig-7g.141gb")


def whole(peak_gib: float, busy: float | None = 0.31, hours: float = 7.0) -> Measured:
    return Measured("nvidia.com/gpu", hours, peak_gib * 1024, H200, busy)


def test_the_smallest_offered_slice_holding_the_peak_with_headroom() -> None:
    v = verdict(whole(9.1), OFFERS)
    assert v is not None and v.profile == "nvidia.com/mig-1g.18gb" and v.freed == Fraction(6, 7)
    assert v.line == "peaked at 9.1 GiB of 140.4 GiB, 31 % busy: a 1g.18gb slice would do; 6/7 of a card freed"
    assert abs(v.saved_hours - 6.0) < 1e-9  # 7 card-hours, 6/7 of each freed
    # 15 GiB + 10 % is more than a 1g.18gb gives (15.8 GiB): the 1g.35gb, a quarter of the card
    v = verdict(whole(15.0), OFFERS)
    assert v is not None and v.profile == "nvidia.com/mig-1g.35gb" and v.freed == Fraction(3, 4)
    v = verdict(whole(50.0), OFFERS)
    assert v is not None and v.profile == "nvidia.com/mig-3g.71gb" and "1/2 of a card freed" in v.line


def test_no_suggestion_without_room_a_smaller_slice_or_offers() -> None:
    v = verdict(whole(100.0), OFFERS)
    assert v is not None and v.profile is None and v.line.endswith("nothing smaller the install offers holds it")
    assert v.saved_hours == 0
    v = verdict(whole(9.0), ())  # an install without MIG flavors
    assert v is not None and v.profile is None
    # already on the smallest slice that holds it: nothing smaller
    on_slice = Measured("nvidia.com/mig-1g.18gb", 1.0, 9 * 1024, 16 * 1024, 0.2)
    v = verdict(on_slice, OFFERS)
    assert v is not None and v.profile is None
    # on a 1g.35gb (1/4) with 9 GiB: the 1g.18gb (1/7) frees 3/28 of a card, said as a percentage
    v = verdict(Measured("nvidia.com/mig-1g.35gb", 1.0, 9 * 1024, 32.5 * 1024, 0.2), OFFERS)
    assert v is not None and v.profile == "nvidia.com/mig-1g.18gb" and v.freed == Fraction(3, 7)
    assert v.line.endswith("11% of a card freed")


def test_a_busy_gpu_is_kept_and_missing_data_is_no_verdict() -> None:
    v = verdict(whole(9.0, busy=0.8), OFFERS)
    assert v is not None and v.profile is None and "80 % busy: kept as it is" in v.line
    assert verdict(Measured("nvidia.com/gpu", 1.0, None, None, 0.1), OFFERS) is None  # memory not measured
    assert verdict(Measured("cpu", 1.0, 1024.0, None, 0.1), OFFERS) is None  # no GPU
    v = verdict(whole(9.0, busy=None), OFFERS)  # utilisation not measured: memory decides, said so
    assert v is not None and v.profile is not None and "busy not measured" in v.line


def test_a_smaller_whole_gpu_flavor_when_no_slice_holds_it() -> None:
    cards = {"l4": 23034.0, "a100": 81920.0, "h200": 143771.0}
    # 60 GiB: no slice holds it (a 3g.71gb gives 62.5 GiB, less the headroom): an 80 GB A100 does
    v = verdict(whole(60.0), OFFERS[:3], cards=cards)
    assert v is not None and v.flavor == "a100" and v.profile == "nvidia.com/gpu" and v.freed == 1
    assert v.line == (
        "peaked at 60 GiB of 140.4 GiB, 31 % busy: a GPU of flavor a100 (80 GiB) would do; the whole card of 140.4 GiB freed"
    )
    assert abs(v.saved_hours - 7.0) < 1e-9  # (all of the larger card's hours freed; as many used on the A100)
    # a slice of the same card is preferred where one holds it
    v = verdict(whole(12.0), OFFERS, cards=cards)
    assert v is not None and v.flavor is None and v.profile == "nvidia.com/mig-1g.18gb"
    # without slices, the smallest GPU that holds it: 12 GiB fits an L4 (22.5 GiB)
    v = verdict(whole(12.0), (), cards=cards)
    assert v is not None and v.flavor == "l4"
    # a flavor is never suggested for work that already ran on a GPU as small, nor for a slice's work
    on_a100 = Measured("nvidia.com/gpu", 1.0, 60 * 1024, 81920.0, 0.2)
    v = verdict(on_a100, (), cards={"a100": 81920.0})
    assert v is not None and v.profile is None
    on_slice = verdict(Measured("nvidia.com/mig-3g.71gb", 1.0, 20 * 1024, 62 * 1024, 0.2), (), cards=cards)
    assert on_slice is not None and on_slice.flavor is None and on_slice.profile is None


def test_the_install_offers_flavors_whose_nodes_say_their_gpu_memory() -> None:
    docs = yaml.safe_load_all(
        """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: l4}
spec: {nodeLabels: {nvidia.com/gpu.memory: "23034"}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: unlabelled}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: a}
spec:
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - {name: l4, resources: [{name: nvidia.com/gpu, nominalQuota: "4"}]}
    - {name: unlabelled, resources: [{name: nvidia.com/gpu, nominalQuota: "4"}]}
"""
    )
    objs = [codec.parse(d) for d in docs]
    flavors = {o.name: o for o in objs if isinstance(o, api.ResourceFlavor)}
    offers = offered([o for o in objs if isinstance(o, api.ClusterQueue)], flavors)
    assert offers.mig == () and dict(offers.cards) == {"l4": 23034.0} and offers


def test_overrides_change_what_a_slice_is_worth() -> None:
    # an A100-40GB install: its 1g.10gb is a quarter of the card
    a100 = Measured("nvidia.com/gpu", 4.0, 5 * 1024, 40 * 1024, 0.1)
    v = verdict(a100, ("nvidia.com/mig-1g.10gb",), {"nvidia.com/mig-1g.10gb": Fraction(1, 4)})
    assert v is not None and v.freed == Fraction(3, 4) and abs(v.saved_hours - 3.0) < 1e-9


def test_offers_are_the_mig_resources_clusterqueues_cover() -> None:
    cq = codec.parse(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "a"},
            "spec": {
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/mig-1g.18gb", "cpu", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "f",
                                "resources": [
                                    {"name": "nvidia.com/mig-1g.18gb", "nominalQuota": "7"},
                                    {"name": "cpu", "nominalQuota": "7"},
                                    {"name": "nvidia.com/gpu", "nominalQuota": "7"},
                                ],
                            }
                        ],
                    }
                ]
            },
        }
    )
    assert isinstance(cq, api.ClusterQueue)
    assert offered_in([cq]) == ("nvidia.com/mig-1g.18gb",)


def test_parts_of_a_card_read_as_fractions_where_they_can() -> None:
    assert part_of_card(Fraction(6, 7)) == "6/7" and part_of_card(Fraction(1)) == "all"
    assert part_of_card(Fraction(3, 28)) == "11%"


def test_engine_core_judges_a_scenarios_gpu_memory_as_the_controller_does() -> None:
    """examples/rightsize-h200.yaml: the same line ``turnstile rightsize`` gives for a 9 GiB job on
    an H200 (tests/admission/controller/test_rightsizing.py), and a job whose memory grows judged
    by its peak."""
    doc = yaml.safe_load((Path(__file__).parents[2] / "examples" / "rightsize-h200.yaml").read_text())
    result = simulator.Simulation(scenario.parse(doc)).run().to_json()
    summary = result["summary"]["rightsize"]
    rows = {r["workload"]: r for r in summary["workloads"]}
    assert rows["ml/small"]["message"] == (
        "peaked at 9 GiB of 140.4 GiB, 31 % busy: a 1g.18gb slice would do; 6/7 of a card freed"
    )
    assert rows["ml/small"]["gpuHours"] == 0.25 and abs(rows["ml/small"]["gpuHoursSaved"] - 0.25 * 6 / 7) < 1e-4
    # 2 GPUs for half an hour, 40 GiB at its peak (after 600 s): a 3g.71gb (half a card) each
    assert rows["ml/grows"]["peakGiB"] == 40 and rows["ml/grows"]["suggestion"] == "nvidia.com/mig-3g.71gb"
    assert rows["ml/grows"]["gpuHours"] == 1.0 and rows["ml/grows"]["gpuHoursSaved"] == 0.5
    assert summary["gpuHoursSaved"] == round(0.25 * 6 / 7 + 0.5, 4)


def test_gpu_memory_used_is_checked_like_utilization() -> None:
    doc = yaml.safe_load((Path(__file__).parents[2] / "examples" / "rightsize-h200.yaml").read_text())
    doc["jobs"][0]["gpuMemoryUsed"] = "lots"
    doc["jobs"][1]["gpuMemoryUsed"] = [{"at": 5, "value": "1Gi"}]
    with pytest.raises(errors.Invalid) as caught:
        scenario.parse(doc)
    said = {e.path: e.message for e in caught.value.errors}
    assert "jobs[0].gpuMemoryUsed" in said and "9Gi" in said["jobs[0].gpuMemoryUsed"], said
    assert "first step at 0" in said["jobs[1].gpuMemoryUsed"], said
