"""The controller's optional features, each called from the step: admission checks
(ProvisioningRequests), waitForPodsReady, topology placement and pod pinning with the node
inventory, idle-GPU reclaim and utilisation reads, GPU health, GPU-hour budgets, metering, and why
admitted pods wait."""
