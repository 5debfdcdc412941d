"""What objects may say on the simulated API server: Kubernetes' v1.35 schemas (bundled), the
validation and defaulting the real server applies, CRDs' CEL rules, and the OpenAPI documents it
serves (kubectl explain, client-side validation)."""
