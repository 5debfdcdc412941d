"""Which AdmissionChecks a ClusterQueue names can run, and the configuration they point to.

Kueue marks a ClusterQueue inactive when one of its admission checks does not exist, belongs to
another controller or points to a ProvisioningRequestConfig that does not exist; Turnstile runs
one check controller, ``kueue.x-k8s.io/provisioning-request`` (its cycle is
``queues.cycle.provisioning``). This is configuration, read when the quota model is built, so it
sits beside Kueue's API, below the model: it reads any object with the two maps ``Checks`` names
(the model's ``Config`` is one).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from queues.kueue import api

CONTROLLER_NAME = "kueue.x-k8s.io/provisioning-request"


class Checks(Protocol):
    """The AdmissionChecks and ProvisioningRequestConfigs that exist, by name."""

    @property
    def admission_checks(self) -> Mapping[str, api.AdmissionCheck]: ...

    @property
    def provisioning_configs(self) -> Mapping[str, api.ProvisioningRequestConfig]: ...


def config_for(config: Checks, check: str) -> api.ProvisioningRequestConfigSpec | None:
    """The ProvisioningRequestConfig a provisioning AdmissionCheck points to; None when the check
    does not exist, is not a provisioning check, or its config is missing."""
    ac = config.admission_checks.get(check)
    if ac is None or ac.spec.controller_name != CONTROLLER_NAME:
        return None
    params = ac.spec.parameters
    if params is None or params.kind != "ProvisioningRequestConfig":
        return None
    prc = config.provisioning_configs.get(params.name)
    return prc.spec if prc is not None else None


def inactive_reason(config: Checks, cq: api.ClusterQueue) -> tuple[str, str] | None:
    """Why ``cq``'s admission checks keep it from admitting anything, as Kueue marks such a
    ClusterQueue inactive; None when every check it names can run."""
    for rule in cq.spec.check_rules:
        ac = config.admission_checks.get(rule.name)
        if ac is None:
            return "AdmissionCheckNotFound", f"AdmissionCheck {rule.name} does not exist; create it or fix the name"
        if ac.spec.controller_name != CONTROLLER_NAME:
            return (
                "AdmissionCheckInactive",
                f"AdmissionCheck {rule.name} has controllerName {ac.spec.controller_name}; Turnstile runs only "
                f"{CONTROLLER_NAME}",
            )
        if config_for(config, rule.name) is None:
            params = ac.spec.parameters
            named = f"ProvisioningRequestConfig {params.name}" if params else "no parameters"
            return (
                "AdmissionCheckInactive",
                f"AdmissionCheck {rule.name} points to {named}, which does not exist; create it "
                "(spec.parameters: apiGroup kueue.x-k8s.io, kind ProvisioningRequestConfig, name)",
            )
    return None
