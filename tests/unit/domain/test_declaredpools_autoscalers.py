"""Declared pools as Karpenter and the cluster autoscaler really size them (docs/autoscaling.md).

Each case is what the autoscaler's own source does (the docs cite it): Karpenter never
launches a node that would pass a limit's remainder, a static NodePool holds ``replicas``
nodes, Karpenter on Azure names its GPUs under ``karpenter.azure.com/sku-gpu-*``, an AWS GPU
name belongs to one manufacturer; the cluster autoscaler reads a Cluster API group's labels
from its machine template too. Pools that do not bound cpu or memory say so in words.
"""

from __future__ import annotations

from typing import Any

from gpustack_operator.domain.chain.declaredpools import (
    DeclaredPool,
    PoolRejection,
    capi_pool,
    karpenter_pool,
    pools_from_objects,
)
from gpustack_operator.domain.chain.kueue import KueueVersion
from gpustack_operator.domain.chain.poolchain import (
    ProvisioningSettings,
    declared_pool_chain,
    pool_cluster_queue,
)
from gpustack_operator.domain.manufacturers import default_manufacturers
from gpustack_operator.domain.plan.plan import plan_state
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.render import render_table

BY_RESOURCE = ChainPolicy(manufacturers=default_manufacturers()).manufacturers_by_resource


def _nodepool(
    requirements: dict[str, list[str]], limits: dict[str, Any], **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "gpu"},
        "spec": {
            "template": {
                "spec": {
                    "requirements": [
                        {"key": k, "operator": "In", "values": v} for k, v in requirements.items()
                    ]
                }
            },
            "limits": limits,
            **spec,
        },
    }


AWS_H100 = {
    "karpenter.k8s.aws/instance-gpu-name": ["h100"],
    "karpenter.k8s.aws/instance-gpu-manufacturer": ["nvidia"],
    "karpenter.k8s.aws/instance-gpu-count": ["8"],
}


def _quotas(pool: DeclaredPool) -> dict[str, str]:
    queue = pool_cluster_queue(pool, [], KueueVersion.V1BETA2)
    (group,) = queue["spec"]["resourceGroups"]
    (flavor,) = group["flavors"]
    return {r["name"]: r["nominalQuota"] for r in flavor["resources"]}


def test_a_device_limit_stops_at_whole_nodes() -> None:
    """12 GPUs of 8-GPU nodes: the second node would pass the remaining 4, so 8."""
    pool = karpenter_pool(_nodepool(AWS_H100, {"nvidia.com/gpu": "12"}))
    assert isinstance(pool, DeclaredPool)
    assert (pool.max_devices, pool.max_nodes) == (8, 1)
    assert _quotas(pool)["nvidia.com/gpu"] == "8"


def test_a_cpu_limit_stops_at_whole_nodes_of_a_known_size() -> None:
    """limits.cpu 400 over p5.48xlarge (192 vCPUs): two nodes, whatever the GPU limit."""
    requirements = {**AWS_H100, "node.kubernetes.io/instance-type": ["p5.48xlarge"]}
    pool = karpenter_pool(_nodepool(requirements, {"nvidia.com/gpu": "64", "cpu": "400"}))
    assert isinstance(pool, DeclaredPool)
    assert (pool.max_devices, pool.max_nodes) == (16, 2)


def test_a_static_nodepool_holds_replicas_times_its_gpus() -> None:
    pool = karpenter_pool(_nodepool(AWS_H100, {}, replicas=3))
    assert isinstance(pool, DeclaredPool)
    assert (pool.max_devices, pool.max_nodes) == (24, 3)
    bounded = karpenter_pool(_nodepool(AWS_H100, {"nodes": "2"}, replicas=3))
    assert isinstance(bounded, DeclaredPool) and bounded.max_devices == 16


def test_karpenter_on_azure_reads_its_sku_gpu_requirements() -> None:
    requirements = {
        "karpenter.azure.com/sku-gpu-name": ["A100"],
        "karpenter.azure.com/sku-gpu-manufacturer": ["nvidia"],
        "karpenter.azure.com/sku-gpu-count": ["4"],
        "karpenter.azure.com/sku-cpu": ["96"],
        "karpenter.azure.com/sku-memory": ["901120"],
    }
    pool = karpenter_pool(_nodepool(requirements, {"nodes": "2"}))
    assert isinstance(pool, DeclaredPool)
    assert (pool.product, pool.resource, pool.max_devices) == ("NVIDIA A100", "nvidia.com/gpu", 8)
    assert _quotas(pool)["cpu"] == "192"


def test_an_aws_gpu_name_tells_its_manufacturer() -> None:
    requirements = {
        "karpenter.k8s.aws/instance-gpu-name": ["l40s"],
        "karpenter.k8s.aws/instance-gpu-count": ["4"],
    }
    pool = karpenter_pool(_nodepool(requirements, {"nodes": "3"}))
    assert isinstance(pool, DeclaredPool)
    assert (pool.manufacturer, pool.max_devices) == ("nvidia", 12)
    unknown = karpenter_pool(
        _nodepool({"karpenter.k8s.aws/instance-gpu-name": ["x9"]}, {"nodes": "3"})
    )
    assert isinstance(unknown, PoolRejection) and "manufacturer is not known" in unknown.reason


def test_cpu_and_memory_come_from_what_the_pool_says() -> None:
    """instance-cpu/instance-memory requirements, or one known instance type's allocatable."""
    sized = {
        **AWS_H100,
        "karpenter.k8s.aws/instance-cpu": ["192"],
        "karpenter.k8s.aws/instance-memory": ["2097152"],
    }
    pool = karpenter_pool(_nodepool(sized, {"nodes": "2"}))
    assert isinstance(pool, DeclaredPool)
    assert _quotas(pool)["cpu"] == "384" and _quotas(pool)["memory"] == "4Ti"
    typed = {**AWS_H100, "node.kubernetes.io/instance-type": ["p5.48xlarge"]}
    pool = karpenter_pool(_nodepool(typed, {"nodes": "2"}))
    assert isinstance(pool, DeclaredPool)
    assert _quotas(pool)["cpu"] == "383"  # 2 x 191450m, rounded up


def test_a_pool_that_bounds_no_cpu_says_unbounded_not_a_sentinel() -> None:
    pool = karpenter_pool(_nodepool(AWS_H100, {"nvidia.com/gpu": "16"}))
    assert isinstance(pool, DeclaredPool)
    state = plan_state(
        [],
        [],
        ChainPolicy(manufacturers=default_manufacturers()),
        pool_objects=[_nodepool(AWS_H100, {"nvidia.com/gpu": "16"})],
    )
    table = render_table(state, default_manufacturers())
    assert "cpu=unbounded memory=unbounded nvidia.com/gpu=16" in table
    assert "1G" not in table and "1000000000Gi" not in table and "?" not in table
    (queue,) = [q for q in state.cluster_queues if q["metadata"]["name"] == "pool-karpenter-gpu"]
    assert queue["metadata"]["annotations"]["note.gpustack.ai/unbounded"] == "cpu,memory"


def _machine_deployment(namespace: str, name: str, **extra: Any) -> dict[str, Any]:
    annotations = {
        "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size": "2",
        "capacity.cluster-autoscaler.kubernetes.io/gpu-type": "nvidia.com/gpu",
        "capacity.cluster-autoscaler.kubernetes.io/gpu-count": "4",
        **extra.pop("annotations", {}),
    }
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "MachineDeployment",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": extra.pop("spec", {}),
    }


def test_two_node_groups_of_one_name_the_second_gets_a_reason() -> None:
    labels = {"capacity.cluster-autoscaler.kubernetes.io/labels": "node.cluster.x-k8s.io/pool=a"}
    objects = [
        _machine_deployment("team-b", "md", annotations=labels),
        _machine_deployment("team-a", "md", annotations=labels),
    ]
    results = pools_from_objects(objects, [], BY_RESOURCE)
    sound = [r for r in results if isinstance(r, DeclaredPool)]
    rejected = [r for r in results if isinstance(r, PoolRejection)]
    assert [p.key for p in sound] == ["capi.md"]
    (reason,) = rejected
    assert "team-b/md" in reason.reason and "team-a/md" in reason.reason
    assert pools_from_objects(list(reversed(objects)), [], BY_RESOURCE) == results


def test_labels_only_in_the_machine_template_select_the_nodes() -> None:
    spec = {
        "template": {
            "metadata": {},
            "spec": {
                "metadata": {
                    "labels": {"node.cluster.x-k8s.io/pool": "a100", "app": "not-propagated"}
                }
            },
        }
    }
    pool = capi_pool(_machine_deployment("default", "md", spec=spec), BY_RESOURCE)
    assert isinstance(pool, DeclaredPool)
    assert dict(pool.node_selector) == {"node.cluster.x-k8s.io/pool": "a100"}


def test_a_name_that_loses_its_provisioning_check_says_so() -> None:
    labels = {"capacity.cluster-autoscaler.kubernetes.io/labels": "node.cluster.x-k8s.io/pool=a"}
    results = pools_from_objects(
        [_machine_deployment("default", "md.a100", annotations=labels)], [], BY_RESOURCE
    )
    chain = declared_pool_chain(
        results, [], KueueVersion.V1BETA2, ProvisioningSettings(served=True)
    )
    assert "pool-capi-md.a100" in chain.cluster_queues and not chain.admission_checks
    (warning,) = chain.warnings
    assert "no provisioning check" in warning.reason


def test_gpus_only_in_the_infrastructure_templates_capacity_are_seen() -> None:
    """The autoscaler reads the template's status.capacity under the annotations."""
    group = _machine_deployment(
        "default",
        "md-h200",
        annotations={"capacity.cluster-autoscaler.kubernetes.io/labels": "pool=h200"},
        spec={
            "template": {
                "spec": {
                    "infrastructureRef": {
                        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                        "kind": "DockerMachineTemplate",
                        "name": "h200",
                    }
                }
            }
        },
    )
    for key in ("gpu-type", "gpu-count"):
        del group["metadata"]["annotations"]["capacity.cluster-autoscaler.kubernetes.io/" + key]
    template = {
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "DockerMachineTemplate",
        "metadata": {"name": "h200", "namespace": "default"},
        "status": {"capacity": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "4"}},
    }
    assert pools_from_objects([group], [], BY_RESOURCE) == []
    (pool,) = pools_from_objects([group, template], [], BY_RESOURCE)
    assert isinstance(pool, DeclaredPool)
    assert (pool.resource, pool.devices_per_node, pool.max_devices) == ("nvidia.com/gpu", 4, 8)
    assert _quotas(pool)["cpu"] == "64"
    elsewhere = {**template, "metadata": {"name": "h200", "namespace": "other"}}
    assert pools_from_objects([group, elsewhere], [], BY_RESOURCE) == []


def test_queues_reports_unbounded_not_the_placeholder() -> None:
    from gpustack_operator.commands.queues import pool_rows

    state = plan_state(
        [],
        ["default"],
        ChainPolicy(manufacturers=default_manufacturers()),
        pool_objects=[_nodepool(AWS_H100, {"nvidia.com/gpu": "16"})],
    )
    (row,) = pool_rows(state.cluster_queues, state.local_queues)
    assert row["nominalQuota"] == {
        "cpu": "unbounded",
        "memory": "unbounded",
        "nvidia.com/gpu": "16",
    }
    assert row["quota"] == "16"
