"""Write the topology example dumps (examples/topology-*.yaml) from published label facts.

Each dump is a ``v1`` ``List`` of Nodes shaped like ``kubectl get nodes -o yaml`` on the
platform it names, carrying the topology labels that platform documents (docs/topology.md,
"Published level sets", cites each source). Run ``python hack/topology_examples.py`` to
regenerate them; the tests read the files, not this script.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

INTEL_SPR = {  # NFD cpu source on a Sapphire Rapids host (family 6, model 143)
    "feature.node.kubernetes.io/cpu-model.family": "6",
    "feature.node.kubernetes.io/cpu-model.id": "143",
    "feature.node.kubernetes.io/cpu-model.vendor_id": "Intel",
}


def gpu_node(
    name: str,
    *,
    product: str,
    gpus: int,
    memory_mib: int,
    cpu: int,
    ram_gi: int,
    arch: str = "amd64",
    cpu_labels: dict[str, str] | None = None,
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A node labelled by NVIDIA GPU Feature Discovery (k8s-device-plugin's GFD labels)."""
    labels = {
        **(cpu_labels or {}),
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "kubernetes.io/arch": arch,
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/gpu.memory": str(memory_mib),
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/mig.strategy": "none",
        **(extra or {}),
    }
    amounts = {
        "cpu": str(cpu),
        "memory": f"{ram_gi}Gi",
        "ephemeral-storage": "3750335768Ki",
        "pods": "110",
        "nvidia.com/gpu": str(gpus),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(sorted(labels.items()))},
        "spec": {},
        "status": {
            "capacity": amounts,
            "allocatable": amounts,
            "conditions": [{"type": "Ready", "status": "True"}],
            "nodeInfo": {"architecture": arch, "operatingSystem": "linux"},
        },
    }


def gke_a3_ultra() -> list[dict[str, Any]]:
    """GKE A3 Ultra (a3-ultragpu-8g: 8x H200) on reserved capacity: two blocks, two
    sub-blocks each, one host per VM."""
    nodes = []
    for i in range(8):
        block, sub = f"b{i // 4 + 1}", f"sb{i // 2 + 1}"
        nodes.append(
            gpu_node(
                f"gke-a3u-{i + 1}",
                product="NVIDIA-H200",
                gpus=8,
                memory_mib=143771,
                cpu=224,
                ram_gi=2952,
                cpu_labels=INTEL_SPR,
                extra={
                    "cloud.google.com/gce-topology-block": f"{block}-5a1f0d3c",
                    "cloud.google.com/gce-topology-subblock": f"{sub}-9e2b41aa",
                    "cloud.google.com/gce-topology-host": f"h{i + 1}-77c0e5d2",
                    "cloud.google.com/gke-nodepool": "a3-ultra",
                    "node.kubernetes.io/instance-type": "a3-ultragpu-8g",
                    "topology.kubernetes.io/zone": "us-central1-b",
                },
            )
        )
    return nodes


def eks_p5() -> list[dict[str, Any]]:
    """EKS p5.48xlarge (8x H100) nodes; four carry three network layers, two a fourth."""
    nodes = []
    for i in range(6):
        extra = {
            "node.kubernetes.io/instance-type": "p5.48xlarge",
            "topology.k8s.aws/network-node-layer-1": "nn-e50490a237cb0f01a",
            "topology.k8s.aws/network-node-layer-2": f"nn-2b1c{i // 3}a7e9d40f6c1",
            "topology.k8s.aws/network-node-layer-3": f"nn-9f3d{i // 2}c02b17e88a4",
            "topology.kubernetes.io/zone": "us-east-1a",
        }
        if i >= 4:
            extra["topology.k8s.aws/network-node-layer-4"] = f"nn-4c7a{i}e51d09b3f2"
        nodes.append(
            gpu_node(
                f"ip-10-0-{i + 1}-17.ec2.internal",
                product="NVIDIA-H100-80GB-HBM3",
                gpus=8,
                memory_mib=81559,
                cpu=192,
                ram_gi=2048,
                cpu_labels={
                    "feature.node.kubernetes.io/cpu-model.family": "25",
                    "feature.node.kubernetes.io/cpu-model.id": "1",
                    "feature.node.kubernetes.io/cpu-model.vendor_id": "AMD",
                },
                extra=extra,
            )
        )
    return nodes


def gb200_rack() -> list[dict[str, Any]]:
    """One GB200 NVL72 rack (18 trays of 4 GPUs) split into two NVLink partitions: GFD's
    ``nvidia.com/gpu.clique`` is ``<ClusterUUID>.<CliqueID>``."""
    uuid = "7b968a6d-c8aa-45e1-9e07-e1e51be99c31"
    return [
        gpu_node(
            f"gb200-tray-{i + 1:02d}",
            product="NVIDIA-GB200",
            gpus=4,
            memory_mib=189471,
            cpu=144,
            ram_gi=884,
            arch="arm64",
            extra={"nvidia.com/gpu.clique": f"{uuid}.{1 if i < 9 else 2}"},
        )
        for i in range(18)
    ]


def topograph_on_prem() -> list[dict[str, Any]]:
    """DGX H100 nodes on an InfiniBand fabric labelled by Topograph >= 1.0 (tier 0 is the
    leaf switch nearest the node), plus two older nodes still carrying Topograph 0.5 keys."""
    nodes = []
    for i in range(8):
        nodes.append(
            gpu_node(
                f"dgx-h100-{i + 1:02d}",
                product="NVIDIA-H100-80GB-HBM3",
                gpus=8,
                memory_mib=81559,
                cpu=224,
                ram_gi=2016,
                cpu_labels=INTEL_SPR,
                extra={
                    "fabric.topograph.run/tier-0": f"leaf{i // 2 + 1}",
                    "fabric.topograph.run/tier-1": f"spine{i // 4 + 1}",
                    "fabric.topograph.run/tier-2": "core1",
                },
            )
        )
    for i in range(2):
        nodes.append(
            gpu_node(
                f"dgx-h100-old-{i + 1}",
                product="NVIDIA-H100-80GB-HBM3",
                gpus=8,
                memory_mib=81559,
                cpu=224,
                ram_gi=2016,
                cpu_labels=INTEL_SPR,
                extra={
                    "network.topology.nvidia.com/core": "core1",
                    "network.topology.nvidia.com/spine": "spine3",
                    "network.topology.nvidia.com/leaf": "leaf9",
                },
            )
        )
    return nodes


def mixed() -> list[dict[str, Any]]:
    """GKE A3 Ultra nodes where some lack a level: two carry every level, two lack
    ``gce-topology-host`` (another level set), two carry none (on-demand VMs outside a
    reservation: they keep the pools of a cluster without TAS)."""
    nodes = []
    for i in range(6):
        extra = {
            "cloud.google.com/gke-nodepool": "a3-ultra",
            "node.kubernetes.io/instance-type": "a3-ultragpu-8g",
            "topology.kubernetes.io/zone": "us-central1-b",
        }
        if i < 4:
            extra["cloud.google.com/gce-topology-block"] = "b1-5a1f0d3c"
            extra["cloud.google.com/gce-topology-subblock"] = f"sb{i // 2 + 1}-9e2b41aa"
        if i < 2:
            extra["cloud.google.com/gce-topology-host"] = f"h{i + 1}-77c0e5d2"
        nodes.append(
            gpu_node(
                f"gke-mix-{i + 1}",
                product="NVIDIA-H200",
                gpus=8,
                memory_mib=143771,
                cpu=224,
                ram_gi=2952,
                cpu_labels=INTEL_SPR,
                extra=extra,
            )
        )
    return nodes


DUMPS = {
    "topology-gke-a3-ultra.yaml": (gke_a3_ultra, "GKE A3 Ultra on reserved capacity"),
    "topology-eks-p5.yaml": (eks_p5, "EKS p5.48xlarge over network layers"),
    "topology-gb200-rack.yaml": (gb200_rack, "a GB200 NVL72 rack with two NVLink cliques"),
    "topology-topograph.yaml": (topograph_on_prem, "an on-prem cluster labelled by Topograph"),
    "topology-mixed.yaml": (mixed, "GKE nodes of which some lack a level"),
}


def main() -> None:
    for file, (build, title) in DUMPS.items():
        header = (
            f"# Topology example: {title}.\n"
            "# Labels as the platform publishes them; sources in docs/topology.md\n"
            '# ("Published level sets"). Generated by hack/topology_examples.py. Try:\n'
            f"# `gpustack-operator plan --nodes examples/{file}`.\n"
        )
        body = yaml.safe_dump(
            {"apiVersion": "v1", "kind": "List", "items": build()}, sort_keys=False
        )
        (EXAMPLES / file).write_text(header + body)


if __name__ == "__main__":
    main()
