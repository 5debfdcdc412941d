"""RBAC, as the real API server's authorizer answers a SubjectAccessReview.

The simulated server does not enforce RBAC on its own requests (a documented difference), but it
answers ``authorization.k8s.io/v1`` SubjectAccessReviews from the Roles, ClusterRoles and their
bindings it stores, as the real RBAC authorizer does, so an aggregated API server (Turnstile's
workloads and visibility API) is authorized the way it would be on a real cluster:

- ``system:masters`` may do anything (the real server's superuser group);
- a ClusterRoleBinding grants its ClusterRole's rules in every namespace and at the cluster scope;
- a RoleBinding grants its Role's (or ClusterRole's) rules in its own namespace only;
- a rule matches on verbs, apiGroups, resources (``resource/subresource`` for a subresource;
  ``*`` anywhere) and, when it lists them, resourceNames; subjects are Users, Groups and
  ServiceAccounts (``system:serviceaccount:NAMESPACE:NAME``).

ClusterRole aggregation (``aggregationRule``) and non-resource URLs are not modelled.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from admission.sim.server.object_store import ObjectStore
from admission.sim.server.objects import ApiError, Obj, Resource

RBAC = "rbac.authorization.k8s.io"
ROLES = Resource(RBAC, "v1", "roles", "Role", has_status=False)
CLUSTER_ROLES = Resource(RBAC, "v1", "clusterroles", "ClusterRole", namespaced=False, has_status=False)
ROLE_BINDINGS = Resource(RBAC, "v1", "rolebindings", "RoleBinding", has_status=False)
CLUSTER_ROLE_BINDINGS = Resource(
    RBAC, "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False, has_status=False
)
KINDS = (ROLES, CLUSTER_ROLES, ROLE_BINDINGS, CLUSTER_ROLE_BINDINGS)
SUPERUSERS = "system:masters"


def _subject_matches(subject: Obj, user: str, groups: Iterable[str]) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return bool(name == user)
    if kind == "Group":
        return name in set(groups)
    if kind == "ServiceAccount":
        return user == f"system:serviceaccount:{subject.get('namespace')}:{name}"
    return False


def _rule_matches(rule: Obj, attrs: Obj) -> bool:
    def has(key: str, value: str) -> bool:
        values = rule.get(key) or []
        return "*" in values or value in values

    resource = str(attrs.get("resource") or "")
    if attrs.get("subresource"):
        resource = f"{resource}/{attrs['subresource']}"
    names = rule.get("resourceNames") or []
    return (
        has("verbs", str(attrs.get("verb") or ""))
        and has("apiGroups", str(attrs.get("group") or ""))
        and (has("resources", resource) or "*/*" in (rule.get("resources") or []))
        and (not names or attrs.get("name") in names)
    )


def _rules(store: ObjectStore, ref: Obj, namespace: str) -> list[Obj]:
    kind, name = ref.get("kind"), str(ref.get("name"))
    try:
        role = store.get(CLUSTER_ROLES, "", name) if kind == "ClusterRole" else store.get(ROLES, namespace, name)
    except ApiError:
        return []  # a binding to a role that does not exist grants nothing
    return list(role.get("rules") or [])


def review(store: ObjectStore, spec: Obj) -> tuple[bool, str]:
    """Whether ``spec`` (a SubjectAccessReview's) is allowed, and why."""
    user, groups = str(spec.get("user") or ""), list(spec.get("groups") or [])
    attrs: Obj = spec.get("resourceAttributes") or {}
    if SUPERUSERS in groups:
        return True, f"{SUPERUSERS} may do anything"
    namespace = str(attrs.get("namespace") or "")
    for binding in store.list(CLUSTER_ROLE_BINDINGS, None)[0]:
        if any(_subject_matches(s, user, groups) for s in binding.get("subjects") or []):
            for rule in _rules(store, binding.get("roleRef") or {}, ""):
                if _rule_matches(rule, attrs):
                    return True, f'RBAC: allowed by ClusterRoleBinding "{binding["metadata"]["name"]}"'
    if namespace:
        for binding in store.list(ROLE_BINDINGS, namespace)[0]:
            if any(_subject_matches(s, user, groups) for s in binding.get("subjects") or []):
                for rule in _rules(store, binding.get("roleRef") or {}, namespace):
                    if _rule_matches(rule, attrs):
                        return True, f'RBAC: allowed by RoleBinding "{binding["metadata"]["name"]}/{namespace}"'
    return False, ""


def subject_access_review(store: ObjectStore, body: Any) -> Obj:
    """``POST /apis/authorization.k8s.io/v1/subjectaccessreviews``: the review with its status."""
    if not isinstance(body, dict) or not isinstance(body.get("spec"), dict):
        raise ApiError(400, "BadRequest", "a SubjectAccessReview needs a spec")
    spec: dict[str, Any] = body["spec"]
    if not spec.get("user") and not spec.get("groups"):
        raise ApiError(
            422,
            "Invalid",
            'SubjectAccessReview "" is invalid: spec.user: Invalid value: "": at least one of user or group must be '
            "specified",
        )
    allowed, reason = review(store, spec)
    out = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "metadata": {}, "spec": spec}
    out["status"] = {"allowed": allowed, **({"reason": reason} if reason else {})}
    return out
