"""Queues and workloads as Kubernetes objects: declared queues reconciled into PostgreSQL, their status
written back, Kueue's Workload objects projected, and Kueue's visibility API."""
