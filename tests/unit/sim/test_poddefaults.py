"""What a new Pod gets from the API's defaulting and admission (docs/simulator.md, "Pod
defaults")."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_sim.apiserver.poddefaults import (
    SERVICE_ACCOUNT_MOUNT,
    default_new_pod,
    image_pull_policy,
)


def pod(**spec: Any) -> dict[str, Any]:
    spec.setdefault("containers", [{"name": "c", "image": "busybox:1.36"}])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


def test_a_bare_pod_gets_the_api_defaults() -> None:
    new = pod()
    default_new_pod(new)
    spec = new["spec"]
    assert {k: spec[k] for k in ("restartPolicy", "dnsPolicy", "schedulerName")} == {
        "restartPolicy": "Always",
        "dnsPolicy": "ClusterFirst",
        "schedulerName": "default-scheduler",
    }
    assert spec["terminationGracePeriodSeconds"] == 30
    assert (spec["enableServiceLinks"], spec["securityContext"]) == (True, {})
    assert (spec["serviceAccountName"], spec["serviceAccount"]) == ("default", "default")
    assert (spec["priority"], spec["preemptionPolicy"]) == (0, "PreemptLowerPriority")
    container = spec["containers"][0]
    assert container["terminationMessagePath"] == "/dev/termination-log"
    assert container["terminationMessagePolicy"] == "File"
    assert container["imagePullPolicy"] == "IfNotPresent"


def test_the_default_tolerations_are_added_once() -> None:
    new = pod()
    default_new_pod(new)
    assert new["spec"]["tolerations"] == [
        {
            "key": f"node.kubernetes.io/{taint}",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        }
        for taint in ("not-ready", "unreachable")
    ]
    own = {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}
    everything = pod(tolerations=[own])
    default_new_pod(everything)
    keys = [t["key"] for t in everything["spec"]["tolerations"]]
    assert keys == ["node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"]
    wildcard = pod(tolerations=[{"operator": "Exists"}])
    default_new_pod(wildcard)
    assert wildcard["spec"]["tolerations"] == [{"operator": "Exists"}]


def test_the_service_account_token_is_mounted_unless_turned_off() -> None:
    new = pod(initContainers=[{"name": "init", "image": "busybox"}])
    default_new_pod(new)
    [volume] = new["spec"]["volumes"]
    assert volume["name"].startswith("kube-api-access-")
    for container in (*new["spec"]["containers"], *new["spec"]["initContainers"]):
        assert container["volumeMounts"] == [
            {"name": volume["name"], "readOnly": True, "mountPath": SERVICE_ACCOUNT_MOUNT}
        ]
    quiet = pod(automountServiceAccountToken=False, serviceAccountName="bot")
    default_new_pod(quiet)
    assert "volumes" not in quiet["spec"]
    assert quiet["spec"]["serviceAccount"] == "bot"


def test_written_values_are_kept_and_critical_pods_get_their_priority() -> None:
    new = pod(restartPolicy="Never", priorityClassName="system-node-critical")
    new["spec"]["containers"][0]["imagePullPolicy"] = "Never"
    new["spec"]["containers"][0]["ports"] = [
        {"containerPort": 53, "protocol": "UDP"},
        {"containerPort": 80},
    ]
    default_new_pod(new)
    assert new["spec"]["restartPolicy"] == "Never"
    assert new["spec"]["priority"] == 2_000_001_000
    container = new["spec"]["containers"][0]
    assert container["imagePullPolicy"] == "Never"
    assert [p["protocol"] for p in container["ports"]] == ["UDP", "TCP"]


@pytest.mark.parametrize(
    ("image", "policy"),
    [
        ("nginx", "Always"),
        ("nginx:latest", "Always"),
        ("registry:5000/team/nginx", "Always"),
        ("registry:5000/team/nginx:1.27", "IfNotPresent"),
        ("nginx@sha256:0123", "IfNotPresent"),
    ],
)
def test_image_pull_policy_follows_the_tag(image: str, policy: str) -> None:
    assert image_pull_policy(image) == policy
