"""The install's queueing policy with a managedJobsNamespaceSelector: which namespaces are managed,
and the webhooks' scope that goes with it."""

from __future__ import annotations

import pytest

from admission.policy import Policy, parse_selector
from admission.webhook import configurations
from queues.kueue import codec
from queues.model import Config

CONFIG = Config.of(
    [
        codec.parse({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": "a100"}}),
        codec.parse(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "ClusterQueue",
                "metadata": {"name": "cq"},
                "spec": {
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", "nvidia.com/gpu"],
                            "flavors": [{"name": "a100", "resources": [{"name": "cpu", "nominalQuota": "8"},
                                                                       {"name": "nvidia.com/gpu", "nominalQuota": "8"}]}],
                        }
                    ],
                },
            }
        ),
        codec.parse({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                   "metadata": {"name": "q", "namespace": "ml"}, "spec": {"clusterQueue": "cq"}}),
    ]
)  # fmt: skip
LABELS = {"ml": {"gpu-team": "yes"}, "web": {}, "kube-system": {"gpu-team": "yes"}}


def test_by_default_the_namespaces_with_a_local_queue_are_managed() -> None:
    policy = Policy(namespace_labels=LABELS.get)
    assert policy.managed_namespace(CONFIG, "ml") and not policy.managed_namespace(CONFIG, "web")
    scope = configurations.Scope.of(CONFIG, policy)
    # ml's unlabelled objects that ask for a GPU go through the managed hooks; web's nothing
    assert scope.label("ml", LABELS["ml"], "turnstile-system") == configurations.EXTENDED
    assert scope.label("web", {}, "turnstile-system") is None
    every = configurations.Scope.of(CONFIG, Policy(managed_resources="all", namespace_labels=LABELS.get))
    assert every.label("ml", LABELS["ml"], "turnstile-system") == configurations.ALL  # CPU-only work is held too
    off = configurations.Scope.of(CONFIG, Policy(manage_without_queue=False, namespace_labels=LABELS.get))
    assert off.label("ml", LABELS["ml"], "turnstile-system") == configurations.ADVISED  # warnings only


def test_a_namespace_selector_chooses_the_managed_namespaces_and_the_webhooks_follow_it() -> None:
    policy = Policy(namespace_selector=parse_selector("{matchLabels: {gpu-team: 'yes'}}"), namespace_labels=LABELS.get)
    assert policy.managed_namespace(CONFIG, "ml")
    assert not policy.managed_namespace(CONFIG, "web")
    assert not policy.managed_namespace(CONFIG, "kube-system")  # never, whatever its labels
    assert not policy.managed_namespace(CONFIG, "turnstile-system")
    scope = configurations.Scope.of(CONFIG, policy)
    assert scope.label("ml", LABELS["ml"], "turnstile-system") == configurations.EXTENDED
    assert scope.label("ml", {}, "turnstile-system") == configurations.ADVISED  # has a queue, not selected
    assert scope.label("web", {"gpu-team": "yes"}, "turnstile-system") == configurations.EXTENDED
    assert scope.label("kube-system", LABELS["kube-system"], "turnstile-system") is None
    assert scope.label("turnstile-system", {"gpu-team": "yes"}, "turnstile-system") is None
    selector = configurations.namespace_selector(configurations.EXTENDED, "turnstile-system")
    assert {"key": configurations.SCOPE_LABEL, "operator": "In", "values": ["extended"]} in selector["matchExpressions"]
    assert {"key": configurations.NAME_LABEL, "operator": "NotIn", "values": ["kube-system", "turnstile-system"]} in (
        selector["matchExpressions"]
    )
    off = Policy(manage_without_queue=False, namespace_labels=LABELS.get)
    assert not off.managed_namespace(CONFIG, "ml")


@pytest.mark.parametrize("text", ["[a, b]", "{matchLabels: [x]}", "{selector: {}}", "{: :"])
def test_a_bad_selector_setting_is_refused_with_what_a_selector_is(text: str) -> None:
    with pytest.raises(ValueError):
        parse_selector(text)
