"""The simulated Kubernetes cluster: what real clients (kubectl, kubernetes_asyncio) cannot tell apart.

A model of the real API server and its controllers; where they differ the real one is right, and
``docs/simulated-cluster.md`` lists what it does as a real cluster does and each difference left.

- ``server``: the API server: the object store with Kubernetes' semantics (``objects``:
  resourceVersion, conflicts, watch, 410) and the REST API over it (``apiserver``: discovery,
  patches, validation, webhooks, CRDs, aggregation, RBAC, fault injection), with ``patches``,
  ``validation``, ``defaults``, ``tables`` (``kubectl get`` columns), ``openapi`` (what kubectl
  validates with), ``webhooks`` and ``resources`` (the kinds it serves);
- ``operators``: what runs in it: job operators, a scheduler and a kubelet (``cluster``), the
  replica, CronJob and serving controllers, a cluster-autoscaler, a dcgm-exporter;
- ``host``: all of it on a local port with a kubeconfig; ``engine`` and ``stack``: ``simulate
  --engine cluster``, with ``efficiency`` and ``prometheus`` for its GPU-efficiency scenarios.
"""
