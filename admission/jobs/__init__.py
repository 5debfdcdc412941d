"""Job integrations: one small module per kind, each an ``Integration`` (see ``base``).

``INTEGRATIONS`` lists every kind the controller watches and the webhook suspends; adding a
kind is a module here plus one line below (and its pod sets in ``queues.podsets.jobs.KINDS``).
"""

from __future__ import annotations

from collections.abc import Iterable

from admission.jobs import appwrapper, batch, jobset, kubeflow, ray, spark, trainjob
from admission.jobs.base import Integration

INTEGRATIONS: tuple[Integration, ...] = (
    batch.JOB,
    *kubeflow.ALL,
    jobset.JOBSET,
    *ray.ALL,
    *trainjob.ALL,
    spark.SPARKAPPLICATION,
    appwrapper.APPWRAPPER,
)
BY_KIND: dict[tuple[str, str], Integration] = {(i.ref.api_version, i.ref.kind): i for i in INTEGRATIONS}
BY_FRAMEWORK: dict[str, Integration] = {i.framework: i for i in INTEGRATIONS}


def enabled(frameworks: str | None) -> tuple[Integration, ...]:
    """The integrations a comma-separated list of Kueue framework names enables (None or empty:
    all of them); ``ValueError`` naming an unknown one and the known names."""
    names = [n.strip() for n in (frameworks or "").split(",") if n.strip()]
    if not names:
        return INTEGRATIONS
    unknown = [n for n in names if n not in BY_FRAMEWORK]
    if unknown:
        raise ValueError(f"unknown integration {', '.join(unknown)}; known: {', '.join(BY_FRAMEWORK)}")
    return tuple(i for i in INTEGRATIONS if i.framework in names)


def owners_of(integrations: Iterable[Integration]) -> frozenset[tuple[str, str]]:
    """The (apiVersion, kind) of the integrations enabled: the kinds whose children are their parts
    (``queues.podsets.jobs.owned_by_parent``)."""
    return frozenset((i.ref.api_version, i.ref.kind) for i in integrations)
