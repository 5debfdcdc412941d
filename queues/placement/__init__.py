"""Nodes and topology: the node inventory, Kueue's topology-aware scheduling, locality, and pinning
pods to the nodes chosen."""
