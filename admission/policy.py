"""The install's queueing policy: which objects Turnstile queues or holds, as its settings say.

One object, built from the settings (``Policy.from_settings``) and shared by the webhook (which
holds objects at creation) and the controller (which tells a held object why, by an Event), so both
decide alike: ``missing_local_queue`` (a job naming a LocalQueue that does not exist: hold or
refuse), ``manage_jobs_without_queue_name`` with ``managed_jobs_namespace_selector`` and
``managed_resources`` (``queues.managed``), ``wait_for_pods_ready`` (``queues.podsready``: when a
started workload whose pods are not Ready gives its quota back), ``fair_sharing``
(``queues.cycle.fairsharing``) and ``admission_fair_sharing`` (``queues.cycle.usage_history``), both read by the
controller's scheduler. Namespace labels come from the
controller's namespace informer, which every replica runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import yaml

from queues import errors, managed, podsready
from queues.cycle import usage_history
from queues.dra import mappings
from queues.kueue import fair_sharing_config
from queues.model import Config
from queues.placement.topology import COMPACT
from queues.podsets import jobs
from queues.podsets import transformations as resource_transformations
from queues.selectors import LabelSelector

HOLD, REFUSE = "hold", "refuse"


def parse_selector(text: str) -> LabelSelector | None:
    """A ``metav1.LabelSelector`` written as YAML or JSON (``{matchLabels: {...}}`` or
    ``{matchExpressions: [...]}``); empty: None. ``ValueError`` says what is wrong."""
    if not text.strip():
        return None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"not YAML or JSON: {exc}") from None
    if not isinstance(raw, Mapping) or not set(raw) <= {"matchLabels", "matchExpressions"}:
        raise ValueError("must be a label selector: {matchLabels: {KEY: VALUE}} and/or {matchExpressions: [...]}")
    try:
        return LabelSelector.from_dict(raw)
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a label selector: {exc}") from None


def _block(text: str, parse: Callable[[Any], Any]) -> Any:
    """A configuration block of Kueue's written as YAML or JSON, read by ``parse``; ``ValueError``
    names each field that is wrong."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"not YAML or JSON: {exc}") from None
    try:
        return parse(raw)
    except errors.Invalid as exc:
        raise ValueError("; ".join(str(e) for e in exc.errors)) from None


def parse_pods_ready(text: str) -> podsready.WaitForPodsReady:
    """Kueue's ``waitForPodsReady`` block; empty: the defaults (enabled)."""
    if not text.strip():
        return podsready.WaitForPodsReady()
    result: podsready.WaitForPodsReady = _block(text, podsready.parse)
    return result


def parse_fair_sharing(text: str) -> fair_sharing_config.FairSharing | None:
    """Kueue's ``fairSharing`` block (``{}``: on, with the default strategies); empty: off."""
    if not text.strip():
        return None
    result: fair_sharing_config.FairSharing | None = _block(text, lambda raw: fair_sharing_config.parse(raw or {}))
    return result


def parse_admission_fair_sharing(text: str) -> usage_history.AdmissionFairSharing | None:
    """Kueue's ``admissionFairSharing`` block (``{usageHalfLifeTime: 168h, ...}``); empty: off."""
    if not text.strip():
        return None
    result: usage_history.AdmissionFairSharing | None = _block(text, usage_history.parse)
    return result


def parse_device_class_mappings(text: str) -> mappings.Mappings:
    """Kueue's ``resources.deviceClassMappings`` list (``queues.dra.mappings``); empty: none."""
    if not text.strip():
        return mappings.NONE
    result: mappings.Mappings = _block(text, mappings.parse)
    return result


def parse_transformations(
    text: str, prefixes: str, strategy: str | None = None
) -> resource_transformations.Transformations:
    """Kueue's ``resources.transformations`` list (YAML or JSON), ``excludeResourcePrefixes``
    (comma-separated) and ``quotaCheckStrategy`` (``queues.podsets.transformations``); empty: none."""
    excluded = [p.strip() for p in prefixes.split(",") if p.strip()]
    if not text.strip():
        if not excluded and strategy in (None, resource_transformations.BLOCK_UNDECLARED):
            return resource_transformations.NONE
        text = "[]"
    result: resource_transformations.Transformations = _block(
        text, lambda raw: resource_transformations.parse(raw, excluded, strategy)
    )
    return result


# the last configuration's managed resources: every unlabelled pod in a managed namespace asks, and
# the webhook answers pods at hundreds a second while the configuration changes rarely
_RESOURCES: list[tuple[Config, str, set[str]]] = []


def _managed_resources(config: Config, mode: str) -> set[str]:
    if not _RESOURCES or _RESOURCES[0][0] is not config or _RESOURCES[0][1] != mode:
        _RESOURCES[:] = [(config, mode, managed.managed_resources(config, mode))]
    return _RESOURCES[0][2]


@dataclass(frozen=True, slots=True)
class Policy:
    missing_queue: str = HOLD
    manage_without_queue: bool = True
    namespace_selector: LabelSelector | None = None  # None: the namespaces that have a LocalQueue
    managed_resources: str = managed.EXTENDED
    own_namespace: str = "turnstile-system"
    namespace_labels: Callable[[str], Mapping[str, str] | None] = field(default=lambda _ns: None)
    pods_ready: podsready.WaitForPodsReady = field(default_factory=podsready.WaitForPodsReady)
    fair_sharing: fair_sharing_config.FairSharing | None = None  # Kueue's fairSharing configuration; None: off
    # Kueue's admissionFairSharing configuration (``queues.cycle.usage_history``); None: off
    admission_fair_sharing: usage_history.AdmissionFairSharing | None = None
    topology_packing: str = COMPACT  # how TAS pod sets are packed (``queues.placement.topology``: Compact or Kueue)
    # idle reclaim (``admission.controller.features.reclaim``): where GPU utilisation is read, how often
    prometheus_url: str = ""
    prometheus_timeout: float = 5.0
    reclaim_interval: float = 60.0
    gpu_health: str = "taint"  # a GPU reporting a fatal Xid: taint | evict | off (``features.gpu_health``)
    # a GPU resource's part of a card where the table is not to be used (TURNSTILE_GPU_FRACTIONS)
    card_fractions: Mapping[str, Fraction] = field(default_factory=dict)
    # DRA: the resource each DeviceClass's devices are charged as (``queues.dra``)
    device_mappings: mappings.Mappings = mappings.NONE
    # Kueue's resources: transformations, excludeResourcePrefixes, quotaCheckStrategy (queues.podsets.transformations)
    transformations: resource_transformations.Transformations = resource_transformations.NONE
    # the enabled integrations' (apiVersion, kind): an object whose controller is one of them is its
    # parent's part, never queued itself (``queues.podsets.jobs.owned_by_parent``); a child of a kind
    # not enabled is queued on its own, as in Kueue
    owners: frozenset[tuple[str, str]] = frozenset(jobs.KINDS)

    @classmethod
    def from_settings(
        cls,
        settings: Any,
        namespace_labels: Callable[[str], Mapping[str, str] | None],
        own_namespace: str = "turnstile-system",
        owners: Iterable[tuple[str, str]] | None = None,
    ) -> Policy:
        """The policy ``settings`` say; ``owners``: the enabled integrations' kinds (None: every
        integrated kind; the process that enables some passes theirs)."""
        return cls(
            missing_queue=settings.missing_local_queue,
            manage_without_queue=settings.manage_jobs_without_queue_name,
            namespace_selector=parse_selector(settings.managed_jobs_namespace_selector),
            managed_resources=settings.managed_resources,
            own_namespace=own_namespace,
            namespace_labels=namespace_labels,
            pods_ready=parse_pods_ready(settings.wait_for_pods_ready),
            fair_sharing=parse_fair_sharing(settings.fair_sharing),
            admission_fair_sharing=parse_admission_fair_sharing(settings.admission_fair_sharing),
            topology_packing=settings.topology_packing,
            prometheus_url=settings.prometheus_url,
            prometheus_timeout=settings.prometheus_timeout,
            reclaim_interval=settings.reclaim_interval,
            gpu_health=settings.gpu_health,
            card_fractions=settings.card_fractions,
            device_mappings=parse_device_class_mappings(settings.device_class_mappings),
            transformations=parse_transformations(
                settings.resource_transformations, settings.exclude_resource_prefixes, settings.quota_check_strategy
            ),
            owners=frozenset(jobs.KINDS) if owners is None else frozenset(owners),
        )

    def managed_namespace(self, config: Config, namespace: str) -> bool:
        if not self.manage_without_queue:
            return False
        return managed.managed_namespace(
            config,
            namespace,
            selector=self.namespace_selector,
            labels=self.namespace_labels(namespace),
            excluded=(self.own_namespace,),
        )

    def hold(self, config: Config, namespace: str, info: jobs.JobInfo | None, what: str) -> str | None:
        """Why an object without a queue label is held (its message), or None when it is not:
        it lives in a managed namespace and asks for a managed resource."""
        if info is None or not self.managed_namespace(config, namespace):
            return None
        asked = managed.asks(info, _managed_resources(config, self.managed_resources))
        return managed.hold_message(config, namespace, what, asked) if asked else None

    def hold_object(
        self, config: Config, namespace: str, obj: Mapping[str, Any], kind: jobs.Kind, what: str
    ) -> str | None:
        try:
            info = jobs.read_job({**obj, "metadata": {**(obj.get("metadata") or {}), "namespace": namespace}}, kind)
        except errors.Invalid:
            return None
        return self.hold(config, namespace, info, what)


DEFAULT_POLICY = Policy()  # the install's defaults (Kueue's, but for which namespaces and resources are managed)
