"""No quota bypass: which jobs and pods without a queue label Turnstile holds anyway.

Kueue's ``manageJobsWithoutQueueName`` with ``managedJobsNamespaceSelector``: in a *managed*
namespace, a job or pod that names no LocalQueue is held (suspended, or gated) rather than run
outside every quota, and its reason names the fix. Turnstile's defaults, for a GPU platform:

- the managed namespaces are those that have a LocalQueue (Kueue's default selector is every
  namespace but ``kube-system`` and its own; an install sets ``managedJobsNamespaceSelector`` to
  match Kueue's or any other choice);
- only what asks for a *managed resource* is held: by default the extended resources (GPUs, MIG
  slices, any ``vendor/name``) that some ClusterQueue covers, so a CPU-only debugging pod or a
  CI job in a team's namespace runs as before; ``all`` holds whatever asks for any covered
  resource (Kueue's behaviour: every job).

A namespace with a LocalQueue named ``default`` needs none of this: its unlabelled jobs are queued
there (Kueue's default LocalQueue).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from queues.model import Config
from queues.podsets import jobs
from queues.selectors import LabelSelector

EXTENDED, ALL = "extended", "all"
SYSTEM_NAMESPACES = ("kube-system",)


def covered(config: Config) -> set[str]:
    return {r for cq in config.cluster_queues.values() for g in cq.spec.resource_groups for r in g.covered_resources}


def managed_resources(config: Config, mode: str = EXTENDED) -> set[str]:
    """The resources whose requests put an unlabelled job in a managed namespace on hold."""
    resources = covered(config)
    return resources if mode == ALL else {r for r in resources if "/" in r and not r.startswith("kubernetes.io/")}


def namespace_queues(config: Config, namespace: str) -> list[str]:
    prefix = f"{namespace}/"
    return sorted(key[len(prefix) :] for key in config.local_queues if key.startswith(prefix))


def managed_namespace(
    config: Config,
    namespace: str,
    *,
    selector: LabelSelector | None,
    labels: Mapping[str, str] | None,
    excluded: Iterable[str] = (),
) -> bool:
    """Whether ``namespace`` is managed: it matches ``selector`` (by its ``labels``), or without a
    selector it has a LocalQueue. System namespaces and ``excluded`` (Turnstile's own) never are."""
    if namespace in SYSTEM_NAMESPACES or namespace in set(excluded):
        return False
    if selector is None:
        return bool(namespace_queues(config, namespace))
    return labels is not None and selector.matches(labels)


def asks(info: jobs.JobInfo, resources: set[str]) -> list[str]:
    """The managed resources a job's pods request, sorted."""
    return sorted({r for ps in info.pod_sets for r, v in ps.requests.items() if v and r in resources})


def hold_message(config: Config, namespace: str, what: str, resources: list[str]) -> str:
    """Why an unlabelled job or pod is held, and how to release it."""
    queues = namespace_queues(config, namespace)
    fix = (
        f"add label {jobs.QUEUE_LABEL} with one of: {', '.join(queues)}"
        if queues
        else f"namespace {namespace} has no LocalQueue: ask an admin for one, then add label {jobs.QUEUE_LABEL}"
    )
    return (
        f"{what} requests {', '.join(resources)} in namespace {namespace}, which Turnstile manages, without label "
        f"{jobs.QUEUE_LABEL}: it is held and never runs outside quota; {fix}"
    )
