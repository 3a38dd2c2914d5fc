"""The RBAC objects a real API server creates at start that clients bind to by name
(docs/simulator.md, "Authentication and authorization").

kube-apiserver's RBAC bootstrap (``plugin/pkg/auth/authorizer/rbac/bootstrappolicy``) stores
dozens of ClusterRoles; a cluster's users and tools mostly bind two of them: ``cluster-admin``
(bound to the group ``system:masters``) and ``system:auth-delegator`` (TokenReviews and
SubjectAccessReviews, for servers that delegate authentication). The simulator stores these,
labelled as the bootstrap labels them, when its authentication is on. The default grants of
``system:public-info-viewer``, ``system:discovery`` and ``system:basic-user`` are built into
the authorizer instead (``gpustack_sim/apiserver/rbac.py``).
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["bootstrap_objects"]

_RBAC: Final = "rbac.authorization.k8s.io/v1"
_META: Final = {
    "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
    "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
}


def _cluster_role(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": _RBAC,
        "kind": "ClusterRole",
        "metadata": {"name": name, **_META},
        "rules": rules,
    }


def bootstrap_objects() -> list[dict[str, Any]]:
    """The ClusterRoles and ClusterRoleBinding to store (fresh copies)."""
    return [
        _cluster_role(
            "cluster-admin",
            [
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                {"nonResourceURLs": ["*"], "verbs": ["*"]},
            ],
        ),
        {
            "apiVersion": _RBAC,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "cluster-admin", **_META},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:masters"}
            ],
        },
        _cluster_role(
            "system:auth-delegator",
            [
                {
                    "apiGroups": ["authentication.k8s.io"],
                    "resources": ["tokenreviews"],
                    "verbs": ["create"],
                },
                {
                    "apiGroups": ["authorization.k8s.io"],
                    "resources": ["subjectaccessreviews"],
                    "verbs": ["create"],
                },
            ],
        ),
    ]
