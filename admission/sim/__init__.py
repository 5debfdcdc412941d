"""The simulated Kubernetes cluster: what real clients (kubectl, kubernetes_asyncio) cannot tell apart.

A model of the real API server and its controllers; where they differ the real one is right, and
``docs/simulated-cluster.md`` lists what it does as a real cluster does and each difference left.

- ``objects``: the object store with Kubernetes' semantics (resourceVersion, conflicts, watch, 410);
- ``apiserver``: the REST API over it (discovery, patches, validation, webhooks, CRDs, fault
  injection), with ``patches``, ``validation``, ``defaults``, ``tables`` (``kubectl get`` columns),
  ``openapi`` (what kubectl validates with), ``webhooks`` and ``resources`` (the kinds it serves);
- ``cluster``: job operators, a scheduler and a kubelet that run what is unsuspended;
- ``autoscaler``: a cluster-autoscaler serving ProvisioningRequests;
- ``host``: all of it on a local port with a kubeconfig; ``engine``: ``simulate --engine cluster``.
"""
