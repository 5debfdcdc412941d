"""The simulated Kubernetes cluster: what real clients (kubectl, kubernetes_asyncio) cannot tell apart.

- ``objects``: the object store with Kubernetes' semantics (resourceVersion, conflicts, watch, 410);
- ``apiserver``: the REST API over it (discovery, patches, validation, webhooks, CRDs, fault injection),
  with ``patches``, ``validation``, ``webhooks`` and ``resources`` (the kinds it serves);
- ``cluster``: job operators, a scheduler and a kubelet that run what is unsuspended;
- ``autoscaler``: a cluster-autoscaler serving ProvisioningRequests.

Not here yet: server-side Table output for ``kubectl get``, pruning of unknown fields in
custom resources, and engine ``cluster`` (the controller driving all of this, issue 5).
"""
