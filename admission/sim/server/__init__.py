"""The simulated API server: the object store with Kubernetes' semantics, the REST API over it, and
what the real server does on the way (defaulting, validation against Kubernetes' schemas and CRDs'
CEL rules, patches, admission webhooks, aggregation, RBAC, OpenAPI, tables)."""
