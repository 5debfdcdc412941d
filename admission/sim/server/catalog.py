"""What the simulated API server serves: the built-in kinds and those its installed CRDs define,
with each custom kind's openAPIV3Schema (validation, pruning, defaults, CEL rules) and printer
columns; and a CRD as the real server's CRD controllers leave it (``established``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from openapi_schema_validator import OAS30Validator

from admission.sim.server import resources
from admission.sim.server.objects import Obj, Resource
from admission.sim.server.schema import cel, validation


class Catalog:
    """The kinds served, by path; rebuilt by ``sync`` whenever a CRD is created, changed or deleted."""

    def __init__(self, base: tuple[Resource, ...]) -> None:
        self.base = base  # the built-in kinds (and the operators' pre-installed ones)
        self.served: list[Resource] = list(base)
        self.by_path = {(r.group, r.version, r.plural): r for r in base}
        self.custom: set[Resource] = set()
        self.schemas: dict[Resource, OAS30Validator] = {}
        self.columns: dict[Resource, list[dict[str, Any]]] = {}  # CRD additionalPrinterColumns

    def sync(self, crds: list[Obj]) -> None:
        """Serve what ``crds`` (every CRD installed) define: they override the pre-installed operator kinds."""
        dynamic: dict[tuple[str, str, str], Resource] = {}
        self.schemas = {}
        self.columns = {}
        for crd in crds:
            columns = resources.printer_columns(crd)
            for res, schema in resources.from_crd(crd):
                dynamic[(res.group, res.version, res.plural)] = res
                self.columns[res] = [dict(c) for c in columns.get(res.version, [])]
                if schema is not None:
                    self.schemas[res] = OAS30Validator(schema)
        self.by_path = {(r.group, r.version, r.plural): r for r in self.base} | dynamic
        self.served = list(self.by_path.values())
        self.custom = set(dynamic.values())

    def validate_custom(self, res: Resource, obj: Obj, mode: str = "Warn", old: Obj | None = None) -> list[str]:
        """A custom resource against its CRD's openAPIV3Schema: unknown fields pruned (a warning each
        with the default field validation, refused with Strict, as the real server), then every
        error, with its field path, then its CEL rules (``cel``; transition rules against ``old``)."""
        validator = self.schemas.get(res)
        if validator is None:
            return []
        warnings = validation.unknown_fields(res, validation.prune(obj, validator.schema), mode)
        validation.apply_defaults(obj, validator.schema)
        problems = sorted(validator.iter_errors(obj), key=lambda e: [str(p) for p in e.absolute_path])
        if problems:
            causes = [(".".join(str(p) for p in e.absolute_path) or "<object>", e.message) for e in problems]
            raise validation.invalid(res, (obj.get("metadata") or {}).get("name", ""), causes)
        broken = cel.violations(validator.schema, obj, old)
        if broken:
            raise validation.invalid(res, (obj.get("metadata") or {}).get("name", ""), broken)
        return warnings

    def update_rules(
        self, res: Resource, sub: str, mode: str, warnings: list[str]
    ) -> Callable[[Obj, Obj], None] | None:
        """What an update must satisfy: the kind's schema (not for status writes) and its own rules;
        warnings about dropped fields go into ``warnings``."""
        if sub == "status":
            return None
        if res in self.custom:

            def check_custom(old: Obj, new: Obj) -> None:
                warnings.extend(self.validate_custom(res, new, mode, old))
                if (res.group, res.kind) == ("trainer.kubeflow.org", "TrainJob"):
                    validation.trainjob_update(res, old, new)

            return check_custom

        def check(old: Obj, new: Obj) -> None:
            warnings.extend(validation.schema(res, new, mode))
            validation.object_rules(res, new)
            if res.group == "batch" and res.plural == "jobs":
                validation.job_update(res, old, new)
            elif not res.group and res.plural == "pods":
                validation.pod_update(res, old, new)

        return check


def established(crd: Obj) -> Obj:
    """A CRD as the real server's CRD controllers leave it moments after its creation."""
    spec = crd.get("spec") or {}
    condition = {"status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    return {
        **crd,
        "status": {
            "acceptedNames": dict(spec.get("names") or {}),
            "storedVersions": [v.get("name") for v in spec.get("versions") or [] if v.get("storage")],
            "conditions": [
                {**condition, "type": "NamesAccepted", "reason": "NoConflicts", "message": "no conflicts found"},
                {
                    **condition,
                    "type": "Established",
                    "reason": "InitialNamesAccepted",
                    "message": "the initial names have been accepted",
                },
            ],
        },
    }
