"""``/metrics``: Kueue's metric names and labels, written directly in the Prometheus text format (the
ClusterQueue, Cohort, LocalQueue and per-workload families)."""
