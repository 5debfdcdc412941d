"""Dynamic Resource Allocation: devices a pod claims through ``resource.k8s.io`` charged to quota.

A pod claims devices (GPUs, MIG partitions) through ResourceClaimTemplates rather than
``resources.limits``; a ClusterQueue's quota names them by the logical resource an admin maps
their DeviceClass to (Kueue's ``resources.deviceClassMappings``: ``mappings``). ``charges`` turns a
pod set's claims into requests of those resources, or says why it cannot, and then the workload
waits (``Misconfigured``): a claim is never admitted uncounted.
"""
