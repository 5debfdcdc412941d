"""Job integrations: one small module per kind, each an ``Integration`` (see ``base``).

``INTEGRATIONS`` lists every kind the controller watches and the webhook suspends; adding a
kind is a module here plus one line below (and its pod sets in ``queues.jobs.KINDS``).
"""

from __future__ import annotations

from admission.jobs import batch, jobset, kubeflow
from admission.jobs.base import Integration

INTEGRATIONS: tuple[Integration, ...] = (batch.JOB, *kubeflow.ALL, jobset.JOBSET)
BY_KIND: dict[tuple[str, str], Integration] = {(i.ref.api_version, i.ref.kind): i for i in INTEGRATIONS}
