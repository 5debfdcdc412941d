"""The simulated cluster-autoscaler serves ProvisioningRequests like the real one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest_asyncio

from admission.sim.operators.autoscaler import (
    ATOMIC_SCALE_UP,
    CHECK_CAPACITY,
    CONSUME_ANNOTATION,
    POD_TEMPLATES,
    PROVISIONING_REQUESTS,
    Autoscaler,
)
from admission.sim.operators.cluster import NODES, PODS
from admission.sim.server import resources
from admission.sim.server.object_store import ObjectStore

TEMPLATE = {"labels": {"gpu": "a100"}, "capacity": {"nvidia.com/gpu": "8", "cpu": "96"}}


@pytest_asyncio.fixture
async def scaler() -> AsyncIterator[tuple[ObjectStore, Autoscaler]]:
    store = ObjectStore()
    store.create(resources.NAMESPACES, "", {"metadata": {"name": "ml"}}, namespaces=resources.NAMESPACES)
    store.create(
        POD_TEMPLATES,
        "ml",
        {
            "metadata": {"name": "worker"},
            "template": {
                "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}
            },
        },
        namespaces=resources.NAMESPACES,
    )
    auto = Autoscaler(
        store, node_template=TEMPLATE, max_nodes=3, provisioning_delay=10, booking_expiry=20, time_scale=0.005
    )
    await auto.start()
    yield store, auto
    await auto.stop()


def request(store: ObjectStore, name: str, cls: str, count: int) -> None:
    store.create(
        PROVISIONING_REQUESTS,
        "ml",
        {
            "metadata": {"name": name},
            "spec": {"provisioningClassName": cls, "podSets": [{"podTemplateRef": {"name": "worker"}, "count": count}]},
        },
        namespaces=resources.NAMESPACES,
    )


def conditions(store: ObjectStore, name: str) -> dict[str, str]:
    pr = store.get(PROVISIONING_REQUESTS, "ml", name)
    return {c["type"]: f"{c['status']}/{c['reason']}" for c in (pr.get("status") or {}).get("conditions", [])}


async def until(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


def node(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"gpu": "a100"}}, "status": {"capacity": {"nvidia.com/gpu": "8"}}}


async def test_check_capacity_never_adds_nodes(scaler: tuple[ObjectStore, Autoscaler]) -> None:
    store, _ = scaler
    request(store, "no-room", CHECK_CAPACITY, 1)
    await until(lambda: "Provisioned" in conditions(store, "no-room"))
    assert conditions(store, "no-room")["Provisioned"] == "False/CapacityIsNotFound"
    store.create(NODES, "", node("n1"), namespaces=resources.NAMESPACES)
    request(store, "room", CHECK_CAPACITY, 1)
    await until(lambda: conditions(store, "room").get("Provisioned") == "True/Provisioned")
    assert len(store.list(NODES, None)[0]) == 1


async def test_atomic_scale_up_adds_nodes_after_the_delay(scaler: tuple[ObjectStore, Autoscaler]) -> None:
    store, _ = scaler
    request(store, "two", ATOMIC_SCALE_UP, 2)
    await until(lambda: conditions(store, "two").get("Provisioned") == "False/Provisioning")
    assert store.list(NODES, None)[0] == []
    await until(lambda: conditions(store, "two").get("Provisioned") == "True/Provisioned")
    assert conditions(store, "two")["Accepted"] == "True/Accepted"
    added = store.list(NODES, None)[0]
    assert len(added) == 2 and all(
        n["metadata"]["labels"] == {"gpu": "a100", "kubernetes.io/hostname": n["metadata"]["name"]} for n in added
    )


async def test_beyond_the_node_limit_fails_and_adds_nothing(scaler: tuple[ObjectStore, Autoscaler]) -> None:
    store, _ = scaler
    request(store, "huge", ATOMIC_SCALE_UP, 4)  # 4 nodes needed, 3 allowed
    await until(lambda: "Failed" in conditions(store, "huge"))
    assert conditions(store, "huge")["Failed"] == "True/NotProvisioned"
    await asyncio.sleep(0.1)
    assert store.list(NODES, None)[0] == []


async def test_unconsumed_booking_expires_consumed_one_does_not(scaler: tuple[ObjectStore, Autoscaler]) -> None:
    store, _ = scaler
    store.create(NODES, "", node("n1"), namespaces=resources.NAMESPACES)
    store.create(NODES, "", node("n2"), namespaces=resources.NAMESPACES)
    request(store, "unused", CHECK_CAPACITY, 1)
    request(store, "used", CHECK_CAPACITY, 1)
    store.create(
        PODS,
        "ml",
        {
            "metadata": {"name": "p", "annotations": {CONSUME_ANNOTATION: "used"}},
            "spec": {"containers": [{"name": "c", "image": "x"}]},
        },
        namespaces=resources.NAMESPACES,
    )
    await until(lambda: "BookingExpired" in conditions(store, "unused"))
    await asyncio.sleep(0.15)
    assert "BookingExpired" not in conditions(store, "used")
