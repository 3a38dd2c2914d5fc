"""The MultiKueue manager's objects (gpustack_operator/domain/chain/multikueue.py,
docs/multikueue.md): one ClusterQueue per distinct pool with the members' quotas summed, one
check per distinct set of members, LocalQueues named as the members name the pool, kubeconfigs
Kueue would refuse refused, and pool names that never depend on the cluster."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterable, Mapping
from typing import Any

import pytest
import yaml

from gpustack_operator.domain.chain.kueue import KueueVersion
from gpustack_operator.domain.chain.multikueue import (
    MULTIKUEUE_CONTROLLER,
    MULTIKUEUE_MANAGED_BY,
    NEUTRAL_FLAVOR,
    KubeconfigRefused,
    Member,
    MultiKueuePolicy,
    check_set_name,
    kueue_kubeconfig,
    manager_objects,
    member_object_name,
    member_pools,
)
from gpustack_operator.domain.labels import MANAGED_BY_LABEL
from gpustack_operator.domain.manufacturers import default_manufacturers
from gpustack_operator.domain.plan.plan import plan_state
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.domain.profiles import local_queue_name
from gpustack_operator.domain.validation import is_valid_dns_label
from tests.integration.gateway.support import example_nodes

JSON = dict[str, Any]
H100 = "NVIDIA H100 80GB HBM3"
MI300X = "AMD Instinct MI300X"
H100_POOL = "gpustack--intel-xeon-platinum-8358-ln-x64-1c-4g--nvidia-h100-80gb-hbm3-1d"
MI300X_POOL = "gpustack--intel-xeon-platinum-8358-ln-x64-1c-4g--amd-instinct-mi300x-1d"
CPU_POOL = "gpustack--amd-epyc-7763-64-core-processor-ln-x64-1c-2g"


def gpu_node(name: str, manufacturer: str, product: str, count: int = 8) -> JSON:
    """An example GPU node (Xeon host, 8 CPUs) carrying *count* simulated *product* cards."""
    node = copy.deepcopy(example_nodes(["gpu-t4-1"])[0])
    node["metadata"]["name"] = name
    node["metadata"]["annotations"]["sim.gpustack.ai/devices"] = json.dumps(
        [{"manufacturer": manufacturer, "name": product, "memoryMiB": 81920, "count": count}]
    )
    return node


def cpu_node(name: str) -> JSON:
    node = copy.deepcopy(example_nodes(["cpu-epyc-1"])[0])
    node["metadata"]["name"] = name
    return node


def chain(nodes: Iterable[JSON], namespaces: Iterable[str] = ("default", "team-a")) -> Any:
    return plan_state(
        list(nodes), list(namespaces), ChainPolicy(manufacturers=default_manufacturers())
    )


def kubeconfig(server: str = "https://10.0.0.1:6443", **user: Any) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": user or {"token": "t0ken"}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
    }


def member(name: str, nodes: Iterable[JSON]) -> Member:
    state = chain(nodes)
    return Member(
        name,
        kueue_kubeconfig(kubeconfig(), None),
        member_pools(state.cluster_queues, state.local_queues),
    )


def by_kind(objects: Iterable[JSON]) -> dict[str, dict[str, JSON]]:
    out: dict[str, dict[str, JSON]] = {}
    for obj in objects:
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}" if "namespace" in meta else meta["name"]
        out.setdefault(obj["kind"], {})[key] = obj
    return out


def quota(cluster_queue: Mapping[str, Any]) -> dict[str, str]:
    (group,) = cluster_queue["spec"]["resourceGroups"]
    (flavor,) = group["flavors"]
    assert flavor["name"] == NEUTRAL_FLAVOR
    assert [r["name"] for r in flavor["resources"]] == group["coveredResources"]
    return {r["name"]: r["nominalQuota"] for r in flavor["resources"]}


def check_members(objects: dict[str, dict[str, JSON]], cluster_queue: str) -> list[str]:
    """The clusters of the MultiKueueConfig behind the queue's one check."""
    checks = objects["ClusterQueue"][cluster_queue]["spec"]["admissionChecksStrategy"]
    (entry,) = checks["admissionChecks"]
    check = objects["AdmissionCheck"][entry["name"]]["spec"]
    assert check["controllerName"] == MULTIKUEUE_CONTROLLER
    config = objects["MultiKueueConfig"][check["parameters"]["name"]]
    clusters: list[str] = config["spec"]["clusters"]
    return clusters


# --- the manager's objects ---------------------------------------------------------------------


def two_members() -> list[Member]:
    """east: two H100 nodes and a CPU node; west: one MI300X node and two CPU nodes."""
    return [
        member(
            "east",
            [gpu_node("h1", "nvidia", H100), gpu_node("h2", "nvidia", H100), cpu_node("c1")],
        ),
        member("west", [gpu_node("m1", "amd", MI300X), cpu_node("c2"), cpu_node("c3")]),
    ]


def test_one_cluster_queue_per_distinct_pool_with_the_summed_quota() -> None:
    objects = by_kind(manager_objects(two_members()))
    queues = objects["ClusterQueue"]
    assert H100_POOL in queues and MI300X_POOL in queues and CPU_POOL in queues
    assert quota(queues[H100_POOL])["nvidia.com/gpu"] == "16"
    assert quota(queues[MI300X_POOL])["amd.com/gpu"] == "8"
    # The CPU pool: one node in east, two in west (32 CPUs and 128 GiB each).
    assert quota(queues[CPU_POOL]) == {"cpu": "96", "ephemeral-storage": "576Gi", "memory": "192Gi"}
    assert check_members(objects, H100_POOL) == ["east"]
    assert check_members(objects, MI300X_POOL) == ["west"]
    assert check_members(objects, CPU_POOL) == ["east", "west"]
    # One neutral flavor, no node labels: the members' own flavors steer placement.
    assert objects["ResourceFlavor"] == {
        NEUTRAL_FLAVOR: {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {
                "name": NEUTRAL_FLAVOR,
                "labels": {MANAGED_BY_LABEL: MULTIKUEUE_MANAGED_BY},
            },
            "spec": {},
        }
    }


def test_members_sharing_pools_share_one_check() -> None:
    objects = by_kind(manager_objects(two_members()))
    # east alone (H100 and the Xeon hosts' CPU pool), west alone, both: three checks.
    sets = sorted(tuple(c["spec"]["clusters"]) for c in objects["MultiKueueConfig"].values())
    assert sets == [("east",), ("east", "west"), ("west",)]
    for name, config in objects["MultiKueueConfig"].items():
        assert name == check_set_name(config["spec"]["clusters"])
        assert objects["AdmissionCheck"][name]["spec"]["parameters"] == {
            "apiGroup": "kueue.x-k8s.io",
            "kind": "MultiKueueConfig",
            "name": name,
        }
    for queue in objects["ClusterQueue"].values():
        strategy = queue["spec"]["admissionChecksStrategy"]["admissionChecks"]
        assert len(strategy) == 1 and "onFlavors" not in strategy[0]


def test_members_get_a_cluster_and_a_kubeconfig_secret_in_kueues_namespace() -> None:
    policy = MultiKueuePolicy(kueue_namespace="kueue-ns")
    objects = by_kind(manager_objects(two_members(), policy))
    assert set(objects["MultiKueueCluster"]) == {"east", "west"}
    cluster = objects["MultiKueueCluster"]["east"]
    assert cluster["spec"] == {
        "clusterSource": {
            "kubeConfig": {"location": "gpustack-multikueue-east", "locationType": "Secret"}
        }
    }
    secret = objects["Secret"]["kueue-ns/gpustack-multikueue-east"]
    stored = yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"]))
    assert stored["clusters"][0]["cluster"]["server"] == "https://10.0.0.1:6443"
    assert stored["users"][0]["user"] == {"token": "t0ken"}
    for kind in objects.values():
        for obj in kind.values():
            assert obj["metadata"]["labels"] == {MANAGED_BY_LABEL: MULTIKUEUE_MANAGED_BY}


def test_v1beta1_puts_the_kubeconfig_directly_under_spec() -> None:
    policy = MultiKueuePolicy(kueue_version=KueueVersion.V1BETA1)
    objects = by_kind(manager_objects(two_members(), policy))
    cluster = objects["MultiKueueCluster"]["east"]
    assert cluster["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    assert cluster["spec"] == {
        "kubeConfig": {"location": "gpustack-multikueue-east", "locationType": "Secret"}
    }


def test_local_queues_carry_the_members_names_in_the_managers_namespaces() -> None:
    objects = by_kind(manager_objects(two_members(), namespaces=["default", "kueue-system"]))
    assert objects["LocalQueue"] == {
        f"default/{local_queue_name(pool)}": objects["LocalQueue"][
            f"default/{local_queue_name(pool)}"
        ]
        for pool in objects["ClusterQueue"]
    }
    for pool in objects["ClusterQueue"]:
        assert objects["LocalQueue"][f"default/{local_queue_name(pool)}"]["spec"] == {
            "clusterQueue": pool
        }
    everywhere = by_kind(manager_objects(two_members()))
    assert {k.split("/")[0] for k in everywhere["LocalQueue"]} == {"default", "team-a"}


def test_a_member_without_pools_keeps_its_cluster_but_adds_nothing() -> None:
    east, west = two_members()
    objects = by_kind(manager_objects([east, Member("west", west.kubeconfig)]))
    assert set(objects["MultiKueueCluster"]) == {"east", "west"}
    assert MI300X_POOL not in objects["ClusterQueue"]
    assert check_members(objects, CPU_POOL) == ["east"]
    assert quota(objects["ClusterQueue"][CPU_POOL])["cpu"] == "32"
    assert "ResourceFlavor" not in by_kind(manager_objects([Member("west", west.kubeconfig)]))


def test_a_pool_growing_and_shrinking_changes_the_sum() -> None:
    small = member("east", [gpu_node("h1", "nvidia", H100)])
    large = member("east", [gpu_node("h1", "nvidia", H100), gpu_node("h2", "nvidia", H100)])
    for members, want in (([small], "8"), ([large], "16"), ([small], "8")):
        queue = by_kind(manager_objects(members))["ClusterQueue"][H100_POOL]
        assert quota(queue)["nvidia.com/gpu"] == want


# --- names that mean the same pool everywhere ---------------------------------------------------


def test_pool_names_depend_on_hardware_and_policy_never_on_the_cluster() -> None:
    """Same hardware in two differently named clusters, with different node names: the same
    ClusterQueue and LocalQueue names, in the members and in the manager."""
    east = chain([gpu_node("east-gpu-7", "nvidia", H100), cpu_node("east-cpu-1")])
    west = chain([gpu_node("ip-10-1-2-3", "nvidia", H100), cpu_node("node-b")])
    names = [
        (
            sorted(q["metadata"]["name"] for q in state.cluster_queues),
            sorted((q["metadata"]["namespace"], q["metadata"]["name"]) for q in state.local_queues),
        )
        for state in (east, west)
    ]
    assert names[0] == names[1]
    manager = [
        by_kind(manager_objects([member(name, nodes)]))
        for name, nodes in (
            ("east", [gpu_node("east-gpu-7", "nvidia", H100)]),
            ("Cluster_B@eu", [gpu_node("ip-10-1-2-3", "nvidia", H100)]),
        )
    ]
    assert (
        set(manager[0]["ClusterQueue"])
        == set(manager[1]["ClusterQueue"])
        == {
            H100_POOL,
            "gpustack--intel-xeon-platinum-8358-ln-x64-1c-2g",
        }
    )
    assert set(manager[0]["LocalQueue"]) == set(manager[1]["LocalQueue"])
    # Other hardware is another pool, with other names.
    other = chain([gpu_node("east-gpu-7", "amd", MI300X)])
    assert MI300X_POOL in {q["metadata"]["name"] for q in other.cluster_queues}
    assert local_queue_name(MI300X_POOL) != local_queue_name(H100_POOL)


@pytest.mark.parametrize(
    "name", ["east", "Cluster_B@eu", "a.b.c", "x" * 200, "UPPER", "-_-"[1:2] + "ok"]
)
def test_member_object_names_are_dns_labels(name: str) -> None:
    assert is_valid_dns_label(member_object_name(name))
    if is_valid_dns_label(name):
        assert member_object_name(name) == name


def test_member_object_names_of_distinct_members_differ() -> None:
    assert member_object_name("Cluster_B") != member_object_name("cluster-b")
    assert member_object_name("a.b") != member_object_name("a-b")


# --- kubeconfigs Kueue would refuse -------------------------------------------------------------


@pytest.mark.parametrize(
    ("cluster", "user", "named", "fix"),
    [
        (
            {"insecure-skip-tls-verify": True},
            {},
            "insecure-skip-tls-verify",
            "certificate-authority-data",
        ),
        (
            {"certificate-authority": "/etc/ca.crt"},
            {},
            "certificate-authority",
            "certificate-authority-data",
        ),
        ({"server": ""}, {}, "no 'server'", "API server URL"),
        ({"server": "https://bad_host:6443"}, {}, "neither an IP address", "DNS name"),
        ({}, {"tokenFile": "/var/run/token"}, "tokenFile", "multikueue-member"),
        ({}, {"exec": {"command": "aws"}}, "exec", "multikueue-member"),
        ({}, {"auth-provider": {"name": "gcp"}}, "auth-provider", "multikueue-member"),
        ({}, {"username": "admin", "password": "x"}, "basic authentication", "token"),
        ({}, {"client-certificate": "/c.crt"}, "client-certificate", "client-certificate-data"),
        ({}, {"client-key": "/c.key"}, "client-key", "client-key-data"),
    ],
)
def test_kubeconfigs_kueue_would_refuse_are_refused_with_the_fix(
    cluster: JSON, user: JSON, named: str, fix: str
) -> None:
    document = kubeconfig(**(user or {"token": "t"}))
    document["clusters"][0]["cluster"].update(cluster)
    with pytest.raises(KubeconfigRefused) as refused:
        kueue_kubeconfig(document, None, "member east")
    message = str(refused.value)
    assert message.startswith("member east: ")
    assert named in message and fix in message and "Kueue" in message


def test_an_inline_kubeconfig_keeps_only_the_selected_context() -> None:
    document = kubeconfig(**{"client-certificate-data": "Y2VydA==", "client-key-data": "a2V5"})
    document["clusters"][0]["cluster"]["certificate-authority-data"] = "Y2E="
    document["clusters"].append(
        {"name": "other", "cluster": {"server": "https://o:1", "insecure-skip-tls-verify": True}}
    )
    document["contexts"].append({"name": "o", "context": {"cluster": "other", "user": "u"}})
    stored = kueue_kubeconfig(document, "ctx")
    assert [c["name"] for c in stored["clusters"]] == ["c"]
    assert stored["current-context"] == "ctx"
    assert stored["users"][0]["user"]["client-key-data"] == "a2V5"
    with pytest.raises(KubeconfigRefused, match="insecure-skip-tls-verify"):
        kueue_kubeconfig(document, "o")
    with pytest.raises(KubeconfigRefused, match="no context 'missing'"):
        kueue_kubeconfig(document, "missing")


def test_dns_names_and_ip_addresses_are_trusted_servers() -> None:
    for server in ("https://API.Example.com:6443", "http://127.0.0.1:8080", "https://[::1]:6443"):
        kueue_kubeconfig(kubeconfig(server), None)
