"""Fair sharing in the core: Kueue's Dominant Resource Share and the tournament that orders a cycle
(``queues.cycle.fairsharing``), and the configuration block as scenario files and the controller give it."""

from __future__ import annotations

import math
from typing import Any

import pytest

from queues import errors
from queues.cycle import fairsharing
from queues.cycle.fairsharing import Share, compare, share
from queues.cycle.scheduler import Scheduler
from queues.kueue import codec, fair_sharing_config
from queues.model import Config
from tests.queues.builders import CQ, GPU, flavor, local_queue, make_workload

ON = fair_sharing_config.FairSharing()


def cohort(name: str, weight: str | None = None, parent: str | None = None) -> Any:
    spec: dict[str, Any] = {}
    if weight is not None:
        spec["fairSharing"] = {"weight": weight}
    if parent:
        spec["parentName"] = parent
    return codec.parse(
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": name}, "spec": spec}
    )


def queue(name: str, gpus: int, weight: str | None = None, parent: str = "all") -> CQ:
    cq = CQ(name).cohort(parent).group(("f", {"gpu": gpus}))
    if weight is not None:
        cq.body["spec"]["fairSharing"] = {"weight": weight}
    return cq


def scheduler(*objects: Any, fair: fair_sharing_config.FairSharing | None = ON) -> Scheduler:
    built = [o.build() if isinstance(o, CQ) else o for o in objects]
    built += [
        local_queue("ns", o.body["metadata"]["name"], o.body["metadata"]["name"]) for o in objects if isinstance(o, CQ)
    ]
    return Scheduler(Config.of([flavor("f"), *built]), fair_sharing=fair)


def test_a_share_is_what_a_node_borrows_over_what_its_parent_could_lend_divided_by_its_weight() -> None:
    s = scheduler(queue("a", 4, weight="2"), queue("b", 4), queue("lender", 8))
    for i in range(2):
        make_workload(f"a{i}", queue="a").request(gpu=4).submit(s)
    s.schedule()
    a = s.snapshot.queues["a"]
    got = share(a)
    # a borrows 4 of the 16 GPUs its cohort could give it: 250 per mille, weight 2
    assert (got.ratio, got.resource, got.borrowing, got.value) == (250.0, GPU, True, 125.0)
    assert share(s.snapshot.queues["b"]) == Share(1.0)  # borrows nothing
    assert share(s.snapshot.cohorts["all"]).value == 0  # the root has no share


def test_a_zero_weight_that_borrows_has_an_infinite_share_and_compares_last() -> None:
    zero = Share(0.0, 10.0, GPU, True)
    assert zero.value == math.inf
    assert compare(zero, Share(1.0, 900.0, GPU, True)) == 1
    assert compare(Share(0.0), Share(1.0)) == 0  # a zero weight that borrows nothing shares nothing


def _scarce(fair: fair_sharing_config.FairSharing | None, weight_a: str | None = None) -> tuple[Scheduler, Any, Any]:
    """a already borrows 6 of the lender's 8 GPUs; a's head (priority 10, first) and b's (priority 0)
    both want the last 2."""
    s = scheduler(queue("a", 0, weight=weight_a), queue("b", 0), queue("lender", 8), fair=fair)
    make_workload("a-running", queue="a").request(gpu=6).submit(s)
    s.schedule()
    a_head = make_workload("a-head", queue="a").request(gpu=2).priority(10).submit(s, now=1)
    b_head = make_workload("b-head", queue="b").request(gpu=2).submit(s, now=2)
    s.schedule()
    return s, a_head, b_head


def test_the_tournament_gives_what_is_free_to_the_queue_with_the_lower_share() -> None:
    _, a_head, b_head = _scarce(None)
    assert a_head.admission is not None and b_head.admission is None, "without fair sharing: priority"
    _, a_head, b_head = _scarce(ON)
    assert b_head.admission is not None and a_head.admission is None, "with it: b borrows least"


def test_a_heavier_weight_wins_the_tournament_back() -> None:
    # a would borrow 8 of 8 (1000 per mille) with weight 5: 200; b 2 of 8: 250
    _, a_head, b_head = _scarce(ON, weight_a="5")
    assert a_head.admission is not None and b_head.admission is None


def test_a_child_that_borrows_nothing_its_head_asks_for_goes_before_a_lower_share() -> None:
    """Kueue's FairSharingPrioritizeNonBorrowing (on by default): a subtree borrowing only on another
    flavor (a high share) still goes first for a head asking a flavor it does not borrow on."""
    f, g = ("f", GPU), ("g", GPU)
    high_on_g = Share(1.0, 900.0, GPU, True, frozenset({g}))
    low_on_f = Share(1.0, 100.0, GPU, True, frozenset({f}))
    assert fairsharing.before(high_on_g, {f: 1000}, low_on_f, {f: 1000})
    assert not fairsharing.before(low_on_f, {f: 1000}, high_on_g, {f: 1000})
    assert fairsharing.before(low_on_f, {g: 1000}, high_on_g, {g: 1000}), "both borrow what they ask: by share"


def test_the_tournament_is_hierarchical_and_weights_count_at_each_cohort() -> None:
    """Two teams under one org: the team cohort with the lower share wins, whichever queue in it asks."""
    objects = [
        cohort("org"),
        cohort("team-x", parent="org"),
        cohort("team-y", weight="4", parent="org"),
        queue("x1", 0, parent="team-x"),
        queue("y1", 0, parent="team-y"),
        queue("pool", 4, parent="org"),
    ]
    s = scheduler(*objects)
    make_workload("y-running", queue="y1").request(gpu=2).submit(s)
    s.schedule()
    x = make_workload("x-head", queue="x1").request(gpu=2).submit(s, now=1)
    y = make_workload("y-head", queue="y1").request(gpu=2).submit(s, now=2)
    s.schedule()
    # team-y with its head would borrow all 4 (1000 / weight 4 = 250); team-x 2 of 4 (500): y wins
    assert y.admission is not None and x.admission is None


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({}, fair_sharing_config.FairSharing()),
        ({"enable": True}, fair_sharing_config.FairSharing()),
        ({"enable": False}, None),
        (None, None),
        (
            {"preemptionStrategies": ["LessThanInitialShare"]},
            fair_sharing_config.FairSharing(True, ("LessThanInitialShare",)),
        ),
    ],
)
def test_the_configuration_block(raw: Any, expected: fair_sharing_config.FairSharing | None) -> None:
    assert fair_sharing_config.parse(raw) == expected


def test_a_bad_configuration_block_names_each_field() -> None:
    with pytest.raises(errors.Invalid) as exc:
        fair_sharing_config.parse(
            {"enable": "yes", "preemptionStrategies": ["LessThanInitialShare", "Nope"], "extra": 1}
        )
    text = str(exc.value)
    assert "fairSharing.enable" in text and "fairSharing.preemptionStrategies" in text and "fairSharing.extra" in text
