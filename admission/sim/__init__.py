"""The simulated Kubernetes cluster: an API server real clients (kubectl, kubernetes_asyncio) can use.

So far: the object store with Kubernetes' REST semantics (``objects``) and the HTTP API server
over it (``apiserver``). Still to come (issue 4): admission webhooks, CRD schema validation,
Job validation rules, the job operators, kubelet, scheduler and cluster-autoscaler.
"""
