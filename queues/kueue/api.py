"""Kueue's objects as typed models, read from ``kueue.x-k8s.io/v1beta1`` or ``v1beta2`` YAML.

One model per kind, normalised across the two API versions (``spec.cohort`` in v1beta1 is
``spec.cohortName`` in v1beta2; ``whenCanBorrow: Borrow`` is ``MayStopSearch``). Reading a
manifest into a model, and writing one back, is ``queues.kueue.codec``; Kueue's webhook rules
are ``queues.kueue.validation``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, model_validator

from queues import quantity

GROUP = "kueue.x-k8s.io"
VERSIONS = ("v1beta1", "v1beta2")
MAX_OBJECT_BYTES = 1_572_864  # 1.5 MiB: what etcd (and so the API server) stores of one object
KINDS = (
    "ResourceFlavor",
    "ClusterQueue",
    "LocalQueue",
    "Cohort",
    "WorkloadPriorityClass",
    "AdmissionCheck",
    "ProvisioningRequestConfig",
    "Topology",
)


def parse_quantity(value: Any) -> int:
    try:
        return quantity.parse_milli(value)
    except quantity.QuantityError as exc:
        raise ValueError(str(exc)) from None


Quantity = Annotated[int, BeforeValidator(parse_quantity), PlainSerializer(quantity.format_milli)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


# ObjectMeta fields the API server owns: it ignores what a client sends for them (an object
# exported with ``kubectl get -o yaml`` carries them), and so does Turnstile: they are not stored.
SERVER_OWNED_METADATA = frozenset(
    {
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "selfLink",
    }
)


class Metadata(BaseModel):
    """ObjectMeta: what Turnstile reads, the other client-owned fields (ownerReferences, finalizers,
    generateName) kept as they are, server-owned ones dropped (``SERVER_OWNED_METADATA``), and any
    other field refused as the API server refuses it (``metadata.lables`` is a typo, not a label)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    name: str = ""
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    generate_name: str | None = Field(default=None, alias="generateName")
    owner_references: list[dict[str, Any]] | None = Field(default=None, alias="ownerReferences")
    finalizers: list[str] | None = None

    @model_validator(mode="before")
    @classmethod
    def _drop_server_owned(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: v for k, v in value.items() if k not in SERVER_OWNED_METADATA}
        return value


class Taint(_Model):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class Toleration(_Model):
    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = ""
    toleration_seconds: int | None = Field(default=None, alias="tolerationSeconds")


class ResourceFlavorSpec(_Model):
    node_labels: dict[str, str] = Field(default_factory=dict, alias="nodeLabels")
    node_taints: list[Taint] = Field(default_factory=list, alias="nodeTaints")
    tolerations: list[Toleration] = Field(default_factory=list)
    topology_name: str | None = Field(default=None, alias="topologyName")


class ResourceQuota(_Model):
    name: str
    nominal_quota: Quantity = Field(alias="nominalQuota")
    borrowing_limit: Quantity | None = Field(default=None, alias="borrowingLimit")
    lending_limit: Quantity | None = Field(default=None, alias="lendingLimit")


class FlavorQuotas(_Model):
    name: str
    resources: list[ResourceQuota]


class ResourceGroup(_Model):
    covered_resources: list[str] = Field(alias="coveredResources")
    flavors: list[FlavorQuotas]


class LabelSelectorRequirement(_Model):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list)


class LabelSelector(_Model):
    match_labels: dict[str, str] = Field(default_factory=dict, alias="matchLabels")
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list, alias="matchExpressions")


PreemptionPolicy = Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority", "Any"]


class BorrowWithinCohort(_Model):
    policy: Literal["Never", "LowerPriority"] = "Never"
    max_priority_threshold: int | None = Field(default=None, alias="maxPriorityThreshold")


class Preemption(_Model):
    within_cluster_queue: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] = Field(
        default="Never", alias="withinClusterQueue"
    )
    reclaim_within_cohort: Literal["Never", "LowerPriority", "Any"] = Field(
        default="Never", alias="reclaimWithinCohort"
    )
    borrow_within_cohort: BorrowWithinCohort | None = Field(default=None, alias="borrowWithinCohort")


def _stop_search(value: Any) -> Any:
    return "MayStopSearch" if value in ("Borrow", "Preempt") else value


class FlavorFungibility(_Model):
    """``Borrow``/``Preempt`` (v1beta1) and ``MayStopSearch`` (v1beta2) both mean "stop here";
    they are stored as ``MayStopSearch`` and rendered back in the requested version's words."""

    when_can_borrow: Annotated[Literal["MayStopSearch", "TryNextFlavor"], BeforeValidator(_stop_search)] = Field(
        default="MayStopSearch", alias="whenCanBorrow"
    )
    when_can_preempt: Annotated[Literal["MayStopSearch", "TryNextFlavor"], BeforeValidator(_stop_search)] = Field(
        default="TryNextFlavor", alias="whenCanPreempt"
    )
    preference: Literal["BorrowingOverPreemption", "PreemptionOverBorrowing"] | None = None

    @property
    def stop_when_borrowing(self) -> bool:
        return self.when_can_borrow != "TryNextFlavor"

    @property
    def stop_when_preempting(self) -> bool:
        return self.when_can_preempt != "TryNextFlavor"


class AdmissionCheckStrategyRule(_Model):
    name: str
    on_flavors: list[str] = Field(default_factory=list, alias="onFlavors")


class AdmissionChecksStrategy(_Model):
    admission_checks: list[AdmissionCheckStrategyRule] = Field(default_factory=list, alias="admissionChecks")


class FairSharing(_Model):
    weight: Quantity | None = None


StopPolicy = Literal["None", "Hold", "HoldAndDrain"]


class ClusterQueueSpec(_Model):
    resource_groups: list[ResourceGroup] = Field(default_factory=list, alias="resourceGroups")
    cohort: str | None = Field(default=None, alias="cohort")
    cohort_name: str | None = Field(default=None, alias="cohortName")
    queueing_strategy: Literal["StrictFIFO", "BestEffortFIFO"] = Field(
        default="BestEffortFIFO", alias="queueingStrategy"
    )
    namespace_selector: LabelSelector | None = Field(default=None, alias="namespaceSelector")
    flavor_fungibility: FlavorFungibility = Field(default_factory=FlavorFungibility, alias="flavorFungibility")
    preemption: Preemption = Field(default_factory=Preemption)
    admission_checks: list[str] = Field(default_factory=list, alias="admissionChecks")
    admission_checks_strategy: AdmissionChecksStrategy | None = Field(default=None, alias="admissionChecksStrategy")
    stop_policy: StopPolicy = Field(default="None", alias="stopPolicy")
    fair_sharing: FairSharing | None = Field(default=None, alias="fairSharing")
    # admission fair sharing (issue 19) and Kueue's concurrent admission: accepted, warned as unused
    admission_scope: dict[str, Any] | None = Field(default=None, alias="admissionScope")
    concurrent_admission_policy: dict[str, Any] | None = Field(default=None, alias="concurrentAdmissionPolicy")

    @property
    def cohort_ref(self) -> str | None:
        """The cohort, whichever version's field named it."""
        return self.cohort_name or self.cohort or None

    @property
    def check_rules(self) -> list[AdmissionCheckStrategyRule]:
        """The admission checks, whichever version's field named them (v1beta1 ``admissionChecks``,
        every flavor; ``admissionChecksStrategy``, optionally ``onFlavors``), in order, each once."""
        if not self.admission_checks and not self.admission_checks_strategy:
            return []
        rules = list(self.admission_checks_strategy.admission_checks) if self.admission_checks_strategy else []
        named = {r.name for r in rules}
        rules += [AdmissionCheckStrategyRule(name=n) for n in self.admission_checks if n not in named]
        return rules


class LocalQueueSpec(_Model):
    cluster_queue: str = Field(alias="clusterQueue")
    stop_policy: StopPolicy = Field(default="None", alias="stopPolicy")
    fair_sharing: FairSharing | None = Field(default=None, alias="fairSharing")


class CohortSpec(_Model):
    parent_name: str | None = Field(default=None, alias="parentName")
    parent: str | None = None
    resource_groups: list[ResourceGroup] = Field(default_factory=list, alias="resourceGroups")
    fair_sharing: FairSharing | None = Field(default=None, alias="fairSharing")

    @property
    def parent_ref(self) -> str | None:
        return self.parent_name or self.parent or None


class AdmissionCheckParameters(_Model):
    api_group: str = Field(alias="apiGroup")
    kind: str
    name: str


class AdmissionCheckSpec(_Model):
    controller_name: str = Field(alias="controllerName")
    retry_delay_minutes: int | None = Field(default=None, alias="retryDelayMinutes")
    parameters: AdmissionCheckParameters | None = None


class RetryStrategy(_Model):
    backoff_limit_count: int = Field(default=3, alias="backoffLimitCount", ge=0)
    backoff_base_seconds: int = Field(default=60, alias="backoffBaseSeconds", ge=0)
    backoff_max_seconds: int = Field(default=1800, alias="backoffMaxSeconds", ge=0)


class ProvisioningRequestConfigSpec(_Model):
    provisioning_class_name: str = Field(alias="provisioningClassName")
    parameters: dict[str, str] = Field(default_factory=dict)
    managed_resources: list[str] = Field(default_factory=list, alias="managedResources")
    retry_strategy: RetryStrategy = Field(default_factory=RetryStrategy, alias="retryStrategy")
    pod_set_updates: dict[str, Any] | None = Field(default=None, alias="podSetUpdates")
    pod_set_merge_policy: str | None = Field(default=None, alias="podSetMergePolicy")


class _Object(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)
    api_version: str = Field(alias="apiVersion")
    kind: str
    metadata: Metadata
    status: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    @property
    def key(self) -> str:
        """``namespace/name`` for namespaced kinds, ``name`` otherwise."""
        ns = self.metadata.namespace
        return f"{ns}/{self.name}" if ns and self.kind == "LocalQueue" else self.name


class ResourceFlavor(_Object):
    kind: Literal["ResourceFlavor"]
    spec: ResourceFlavorSpec = Field(default_factory=ResourceFlavorSpec)


class ClusterQueue(_Object):
    kind: Literal["ClusterQueue"]
    spec: ClusterQueueSpec = Field(default_factory=ClusterQueueSpec)


class LocalQueue(_Object):
    kind: Literal["LocalQueue"]
    spec: LocalQueueSpec


class Cohort(_Object):
    kind: Literal["Cohort"]
    spec: CohortSpec = Field(default_factory=CohortSpec)


class WorkloadPriorityClass(_Object):
    kind: Literal["WorkloadPriorityClass"]
    value: int = Field(ge=-(2**31), le=2**31 - 1)
    description: str = ""


class AdmissionCheck(_Object):
    kind: Literal["AdmissionCheck"]
    spec: AdmissionCheckSpec


class ProvisioningRequestConfig(_Object):
    kind: Literal["ProvisioningRequestConfig"]
    spec: ProvisioningRequestConfigSpec


class TopologyLevel(_Model):
    node_label: str = Field(alias="nodeLabel", min_length=1, max_length=316)


class TopologySpec(_Model):
    levels: list[TopologyLevel] = Field(min_length=1, max_length=16)


class Topology(_Object):
    """Kueue's Topology: node labels from the widest domain to the narrowest (``queues.placement.topology``).
    Read by engine core; the controller does not store it (the API server does)."""

    kind: Literal["Topology"]
    spec: TopologySpec

    @property
    def levels(self) -> tuple[str, ...]:
        return tuple(lv.node_label for lv in self.spec.levels)


KueueObject = (
    ResourceFlavor
    | ClusterQueue
    | LocalQueue
    | Cohort
    | WorkloadPriorityClass
    | AdmissionCheck
    | ProvisioningRequestConfig
    | Topology
)

_MODELS: dict[str, type[_Object]] = {
    "ResourceFlavor": ResourceFlavor,
    "ClusterQueue": ClusterQueue,
    "LocalQueue": LocalQueue,
    "Cohort": Cohort,
    "WorkloadPriorityClass": WorkloadPriorityClass,
    "AdmissionCheck": AdmissionCheck,
    "ProvisioningRequestConfig": ProvisioningRequestConfig,
    "Topology": Topology,
}


def model_of(kind: str) -> type[_Object]:
    """The model of a Kueue kind (``KeyError`` for one Turnstile does not read)."""
    return _MODELS[kind]
