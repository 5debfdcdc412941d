"""Figures: ``python -m bench [core|deep|fair|topology|efficiency|sim|client|store|controller|webhook|cluster|
objects|workloads|pods|dashboard|chaos|metrics|dra|all]`` (all by default)."""

from __future__ import annotations

import sys

from bench import deep_queue, idle_cycle, kueue_perf, machine


def main() -> None:
    which = sys.argv[1] if len(sys.argv) > 1 else "all"
    print(f"machine: {machine.describe()}")
    if which in ("core", "all"):
        kueue_perf.main()
        idle_cycle.main()
    if which in ("deep", "core", "all"):
        deep_queue.main()
    if which in ("fair", "all"):
        from bench import fair_sharing

        fair_sharing.main()
    if which in ("topology", "all"):
        from bench import topology

        topology.main()
    if which in ("efficiency", "all"):
        from bench import efficiency, utilisation

        efficiency.main()
        utilisation.main()
    if which in ("sim", "all"):
        from bench import sim_api

        sim_api.main()
    if which in ("client", "all"):
        from bench import api_client

        api_client.main()
    if which in ("store", "all"):
        from bench import store

        store.main()
    if which in ("controller", "all"):
        from bench import controller

        controller.main()
    if which in ("dra", "all"):
        from bench import dra

        dra.main()
    if which in ("webhook", "all"):
        from bench import webhook

        webhook.main()
    if which in ("cluster", "all"):
        from bench import kueue_cluster

        kueue_cluster.main()
    if which in ("objects", "all"):
        from bench import queue_objects

        queue_objects.main()
    if which in ("workloads", "all"):
        from bench import workload_objects

        workload_objects.main()
    if which in ("pods", "all"):
        from bench import pods

        pods.main()
    if which in ("dashboard", "all"):
        from bench import dashboard

        dashboard.main()
    if which in ("metrics", "all"):
        from bench import metrics_page

        metrics_page.main()
    if which in ("chaos", "all"):
        from bench import chaos

        chaos.main()


if __name__ == "__main__":
    main()
