"""Turnstile's settings (``spec/cli.md``), read from the environment; command-line flags override.

Without ``TURNSTILE_DATABASE_URL`` every command uses an embedded PostgreSQL kept under
``TURNSTILE_HOME/pg`` and started on demand, so everything works on a fresh laptop.
"""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from queues.gpus import gpu_units


def normalise_database_url(url: str) -> str:
    """``postgresql://`` and ``postgres://`` become ``postgresql+asyncpg://``, libpq parameters are
    checked (``admission.urls``); ``ValueError`` names what is wrong, never the password."""
    from admission import urls

    return urls.normalise(url)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TURNSTILE_", extra="ignore")

    database_url: str | None = Field(default=None, description="PostgreSQL; unset: the embedded one")
    home: Path = Field(default=Path("~/.local/share/turnstile"), description="local state for the CLI")
    kubeconfig: Path | None = Field(default=None, description="kubeconfig for the controller")
    test_database_url: str | None = None
    lease_ttl: float = Field(
        default=15.0, gt=0, description="seconds a leader may go unrenewed before a standby takes over"
    )
    actor: str | None = Field(default=None, description="who is named in the audit log (default: $USER@host)")
    ledger_labels: str = Field(
        default="team,project",
        description="comma-separated job labels recorded on the usage ledger (turnstile usage --by label:KEY)",
    )
    gpu_fractions: str = Field(
        default="",
        description="comma-separated RESOURCE=FRACTION of a card for billing (turnstile usage's gpuHours, "
        "budgets), e.g. nvidia.com/mig-1g.10gb=1/4,nvidia.com/gpu.shared=1/8; MIG slices default to their "
        "geometry on the card (docs/gpu-efficiency.md), nvidia.com/gpu.shared to 1/4",
    )
    integrations: str = Field(
        default="",
        description="comma-separated Kueue framework names to queue (batch/job, kubeflow.org/pytorchjob, ...); "
        "empty: every integrated kind the cluster serves",
    )
    missing_local_queue: Literal["hold", "refuse"] = Field(
        default="hold",
        description="a job naming a LocalQueue that does not exist: hold it suspended (LocalQueueNotFound, "
        "as Kueue; GitOps applies in any order) or refuse it at creation",
    )
    manage_jobs_without_queue_name: bool = Field(
        default=True,
        description="in managed namespaces, hold (suspend or gate) a job or pod without a queue label that asks "
        "for a managed resource, never run it outside quota (Kueue's manageJobsWithoutQueueName)",
    )
    managed_jobs_namespace_selector: str = Field(
        default="",
        description="the managed namespaces, as a label selector in YAML/JSON ({matchLabels: ...}); empty: "
        "the namespaces that have a LocalQueue (Kueue's managedJobsNamespaceSelector)",
    )
    managed_resources: Literal["extended", "all"] = Field(
        default="extended",
        description="what puts an unlabelled job on hold: extended resources a ClusterQueue covers (GPUs, MIG "
        "slices), or all covered resources (Kueue: every job)",
    )
    wait_for_pods_ready: str = Field(
        default="",
        description="Kueue's waitForPodsReady block as YAML or JSON ({timeout: 10m, requeuingStrategy: "
        "{backoffLimitCount: 5}}, or {enable: false}); empty: Kueue's defaults, on (timeout 30m)",
    )
    fair_sharing: str = Field(
        default="",
        description="Kueue's fairSharing block as YAML or JSON ({} for the defaults, or {preemptionStrategies: "
        "[LessThanOrEqualToFinalShare, LessThanInitialShare]}); empty: off, as in Kueue",
    )
    admission_fair_sharing: str = Field(
        default="",
        description="Kueue's admissionFairSharing block as YAML or JSON ({usageHalfLifeTime: 168h, "
        "usageSamplingInterval: 5m, resourceWeights: {nvidia.com/gpu: 1}}); empty: off, as in Kueue",
    )
    device_class_mappings: str = Field(
        default="",
        description="Kueue's resources.deviceClassMappings as YAML or JSON ([{name: whole-gpus, deviceClassNames: "
        "[gpu.nvidia.com]}]): the resource each DRA DeviceClass's devices are charged to quota as; empty: none, "
        "and a job claiming devices through DRA waits (Misconfigured) rather than run uncounted",
    )
    resource_transformations: str = Field(
        default="",
        description="Kueue's resources.transformations as YAML or JSON ([{input: nvidia.com/gpumem, strategy: "
        "Replace, multiplyBy: nvidia.com/gpu, outputs: {nvidia.com/total-gpumem: 1}}]): what a pod's requests "
        "count as in quota; empty: none",
    )
    exclude_resource_prefixes: str = Field(
        default="",
        description="Kueue's resources.excludeResourcePrefixes, comma-separated (example.com/,ephemeral-): "
        "requests whose name starts with one are not counted in quota; empty: none",
    )
    quota_check_strategy: Literal["BlockUndeclared", "IgnoreUndeclared"] = Field(
        default="BlockUndeclared",
        description="Kueue's resources.quotaCheckStrategy: what a request of a resource the ClusterQueue does not "
        "cover means: BlockUndeclared keeps the workload out (NoMatchingFlavor), IgnoreUndeclared leaves the "
        "resource out of the quota check (not with TURNSTILE_EXCLUDE_RESOURCE_PREFIXES, as in Kueue)",
    )
    topology_packing: Literal["Compact", "Kueue"] = Field(
        default="Compact",
        description="how pod sets on a TAS flavor are packed onto nodes: Compact (Turnstile's: fill partly used "
        "nodes first, keep whole nodes and racks free) or Kueue (Kueue's BestFit/LeastFreeCapacity profile)",
    )
    prometheus_url: str = Field(
        default="",
        description="a Prometheus-compatible API (http://prometheus.monitoring:9090) scraping dcgm-exporter, for "
        "idle-GPU reclaim; empty: ClusterQueues' idle-reclaim policies are not acted on (readiness says so)",
    )
    prometheus_timeout: float = Field(default=5.0, gt=0, description="seconds one Prometheus query may take")
    reclaim_interval: float = Field(
        default=60.0, gt=0, description="seconds between looks at GPU utilisation (idle reclaim)"
    )
    gpu_health: str = Field(
        default="taint",
        description="what a GPU reporting a fatal Xid (read from dcgm-exporter through TURNSTILE_PROMETHEUS_URL) "
        "does to its node: taint (its workloads evicted with NodeFailures, the node tainted "
        "turnstile.dev/gpu-unhealthy:NoSchedule until it clears), evict (evicted, the Node left alone) or off",
    )
    ui_port: int = Field(
        default=8081,
        ge=0,
        le=65535,
        description="the port of the dashboard (/ui/) and the visibility API over plain HTTP (0: any free port)",
    )
    ui_address: str = Field(
        default="127.0.0.1",
        description="the address they bind to: loopback (reach it with kubectl port-forward); empty: not served. "
        "They answer anyone who reaches them: bind elsewhere only behind an authenticating proxy",
    )
    cert_secret: str | None = Field(
        default=None,
        description="namespace/name of the Secret the controller replicas keep the webhook certificate in",
    )

    @field_validator("database_url", "test_database_url")
    @classmethod
    def _normalise(cls, value: str | None) -> str | None:
        return None if not value else normalise_database_url(value)

    @field_validator("ledger_labels")
    @classmethod
    def _labels(cls, value: str) -> str:
        keys = [k.strip() for k in value.split(",") if k.strip()]
        bad = [k for k in keys if not re.fullmatch(r"([a-z0-9.-]+/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", k)]
        if bad:
            raise ValueError(f"not label keys: {', '.join(bad)}; write e.g. team,project,example.com/cost-center")
        return ",".join(keys)

    @field_validator("gpu_health")
    @classmethod
    def _gpu_health(cls, value: str) -> str:
        if value not in ("taint", "evict", "off"):
            raise ValueError(f"{value!r}: use taint, evict or off")
        return value

    @field_validator("gpu_fractions")
    @classmethod
    def _fractions(cls, value: str) -> str:
        gpu_units.parse_fractions(v for v in value.split(",") if v.strip())  # ValueError names the item
        return value

    @property
    def card_fractions(self) -> dict[str, Fraction]:
        """Each GPU resource's part of a card: DRA mappings of whole GPUs (``queues.dra.mappings``),
        then what ``TURNSTILE_GPU_FRACTIONS`` says."""
        from admission.policy import parse_device_class_mappings

        dra = parse_device_class_mappings(self.device_class_mappings).card_fractions()
        return {**dra, **gpu_units.parse_fractions(v for v in self.gpu_fractions.split(",") if v.strip())}

    @field_validator("managed_jobs_namespace_selector")
    @classmethod
    def _selector(cls, value: str) -> str:
        from admission.policy import parse_selector

        parse_selector(value)  # ValueError says what is wrong
        return value

    @field_validator("wait_for_pods_ready")
    @classmethod
    def _pods_ready(cls, value: str) -> str:
        from admission.policy import parse_pods_ready

        parse_pods_ready(value)  # ValueError names the field and what is wrong
        return value

    @field_validator("fair_sharing")
    @classmethod
    def _fair_sharing(cls, value: str) -> str:
        from admission.policy import parse_fair_sharing

        parse_fair_sharing(value)  # ValueError names the field and what is wrong
        return value

    @field_validator("admission_fair_sharing")
    @classmethod
    def _admission_fair_sharing(cls, value: str) -> str:
        from admission.policy import parse_admission_fair_sharing

        parse_admission_fair_sharing(value)  # ValueError names the field and what is wrong
        return value

    @field_validator("device_class_mappings")
    @classmethod
    def _device_class_mappings(cls, value: str) -> str:
        from admission.policy import parse_device_class_mappings

        parse_device_class_mappings(value)  # ValueError names the field and what is wrong
        return value

    @field_validator("resource_transformations")
    @classmethod
    def _resource_transformations(cls, value: str) -> str:
        from admission.policy import parse_transformations

        parse_transformations(value, "")  # ValueError names the field and what is wrong
        return value

    @field_validator("quota_check_strategy")
    @classmethod
    def _quota_check_strategy(cls, value: str, info: ValidationInfo) -> str:
        if value == "IgnoreUndeclared" and str(info.data.get("exclude_resource_prefixes") or "").strip():
            raise ValueError(
                "IgnoreUndeclared cannot be combined with TURNSTILE_EXCLUDE_RESOURCE_PREFIXES (Kueue's validation: "
                "excludeResourcePrefixes is not allowed when quotaCheckStrategy is IgnoreUndeclared); unset one"
            )
        return value

    @field_validator("integrations")
    @classmethod
    def _integrations(cls, value: str) -> str:
        if not value.strip():
            return value  # all of them (checked without loading the job kinds and their API client)
        from admission.jobs import enabled

        enabled(value)  # ValueError names an unknown framework and the known ones
        return value

    @property
    def ledger_label_keys(self) -> tuple[str, ...]:
        return tuple(k for k in self.ledger_labels.split(",") if k)

    @field_validator("home")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser()
