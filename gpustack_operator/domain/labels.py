"""Label and annotation keys the operator reads or writes (docs/labels.md).

One place for every key, so that the writers (device manager, worker) and the readers
(flavor/queue builders, plan) cannot drift apart. docs/labels.md documents each of them.
"""

from __future__ import annotations

from typing import Final

# Prefixes (docs/labels.md).
SYSTEM_PREFIX: Final = "gpustack.ai/"
FEATURE_PREFIX: Final = "feature.gpustack.ai/"
ACCELERATABLE_PREFIX: Final = "acceleratable.feature.gpustack.ai/"
GENERAL_PREFIX: Final = "general.feature.gpustack.ai/"
CREDITS_PREFIX: Final = "credits.gpustack.ai/"
SCHEDULE_PREFIX: Final = "schedule.gpustack.ai/"
NOTE_PREFIX: Final = "note.gpustack.ai/"
RESOURCE_PREFIX: Final = "resource.gpustack.ai/"

# Node labels.
MANAGED_LABEL: Final = "gpustack.ai/managed"
LABEL_REPAIR_ANNOTATION: Final = "gpustack.ai/labels-repaired-for"
"""On a NodeFeature: the Node ``resourceVersion`` it was rewritten for, so NFD applies again
labels the Node lost (docs/worker.md, "Label repair")."""
ACCELERATABLE_LABEL: Final = "feature.gpustack.ai/acceleratable"
TOPOLOGY_LABEL: Final = "feature.gpustack.ai/topology"
"""The node's TAS group: its level set and tolerated taints, digested (docs/topology.md)."""
TOPOLOGY_NONE: Final = "none"
"""``feature.gpustack.ai/topology`` of a managed node TAS does not schedule while TAS is on:
plain flavors select it, so their Pods never land on TAS nodes of the same profile
(docs/topology.md, "Plain nodes")."""
NFD_CPU_VENDOR_LABEL: Final = "feature.node.kubernetes.io/cpu-model.vendor_id"
NFD_CPU_FAMILY_LABEL: Final = "feature.node.kubernetes.io/cpu-model.family"
NFD_CPU_ID_LABEL: Final = "feature.node.kubernetes.io/cpu-model.id"
OS_LABEL: Final = "kubernetes.io/os"
ARCH_LABEL: Final = "kubernetes.io/arch"

# Node annotations written by the NodeFeatureRule `gpustack-cpu-info` (docs/worker.md).
CPU_ANNOTATION_PREFIX: Final = "feature.gpustack.ai/cpu-"
CPU_NAME_ANNOTATION: Final = "feature.gpustack.ai/cpu-name"
CPU_FAMILY_ANNOTATION: Final = "feature.gpustack.ai/cpu-family"
CPU_ANNOTATION_ATTRIBUTES: Final = (
    "name",
    "family",
    "physical-cores",
    "threads-per-core",
    "logical-cores",
    "stepping",
    "cache-line",
    "hz",
    "boost-freq",
    "cache-l1i",
    "cache-l1d",
    "cache-l2",
    "cache-l3",
)

# Suffixes carried by the general (gKey) and accelerated (aKey) label families.
SUFFIX_CPU: Final = ".cpu"
SUFFIX_RAM: Final = ".ram"
SUFFIX_STORAGE: Final = ".storage"
SUFFIX_FLAVOR: Final = ".z-flavor"
SUFFIX_QUEUE: Final = ".z-queue"
SUFFIX_COHORT: Final = ".z-cohort"
SUFFIX_COUNT: Final = ".count"
SUFFIX_PRODUCT: Final = ".product"
SUFFIX_MEMORY: Final = ".memory"
SUFFIX_CORES: Final = ".cores"
SUFFIX_FAMILY: Final = ".family"
SUFFIX_COMCAP: Final = ".comcap"
SUFFIX_SLICED: Final = ".sliced.partitions"
SUFFIX_DRIVER_VERSION: Final = ".driver-version"
SUFFIX_RUNTIME_VERSION: Final = ".runtime-version"
SUFFIX_RESOURCE: Final = ".resource"
SUFFIX_DRA: Final = ".dra"

# The longest suffix each key family carries; docs/naming.md truncates keys so that it still fits
# in the 63-character name part of a label key.
GENERAL_KEY_MAX_LEN: Final = 63 - max(
    len(s) for s in (SUFFIX_CPU, SUFFIX_RAM, SUFFIX_STORAGE, SUFFIX_FLAVOR, SUFFIX_QUEUE)
)
DEVICE_KEY_MAX_LEN: Final = 63 - len(SUFFIX_SLICED)

# Object labels and annotations (docs/labels.md).
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE: Final = "gpustack-operator"
PART_OF_LABEL: Final = "app.kubernetes.io/part-of"
PART_OF_WORKER: Final = "gpustack-operator-worker"
PART_OF_DEVICE_MANAGER: Final = "gpustack-operator-device-manager"
NFD_NODE_NAME_LABEL: Final = "nfd.node.kubernetes.io/node-name"
RESOURCE_TYPE_LABEL: Final = "resource.gpustack.ai/type"
RESOURCE_TYPE_NODES: Final = "nodes"
RESOURCE_TYPE_INSTANCETYPES: Final = "instancetypes"
QUEUE_ANNOTATION: Final = "schedule.gpustack.ai/queue"
COHORT_ANNOTATION: Final = "schedule.gpustack.ai/cohort"
CLUSTER_QUEUE_ANNOTATION: Final = "schedule.gpustack.ai/cluster-queue"
KUEUE_QUEUE_NAME_LABEL: Final = "kueue.x-k8s.io/queue-name"


def note(name: str) -> str:
    """The ``note.gpustack.ai/<name>`` annotation key."""
    return NOTE_PREFIX + name


def general_key(gkey: str, suffix: str = "") -> str:
    """``general.feature.gpustack.ai/<gKey><suffix>``."""
    return f"{GENERAL_PREFIX}{gkey}{suffix}"


def accelerated_key(akey: str, suffix: str = "") -> str:
    """``acceleratable.feature.gpustack.ai/<aKey><suffix>``."""
    return f"{ACCELERATABLE_PREFIX}{akey}{suffix}"


# Readable keys on LocalQueues, so a workload author finds a pool with a label selector
# (docs/labels.md, "On Kueue objects"; docs/workloads.md, "Finding a pool").
DEVICE_MODEL_LABEL: Final = "gpustack.ai/device-model"
MANUFACTURER_LABEL: Final = "gpustack.ai/manufacturer"
POOL_ACCELERATABLE_LABEL: Final = "gpustack.ai/acceleratable"
UNIT_ANNOTATION: Final = "gpustack.ai/unit"


HOST_LABELS_ANNOTATION: Final = "vcluster.loft.sh/managed-labels"
"""The label keys the host owns on a synced Node, one per line."""


INSTANCE_TYPE_LABEL: Final = "node.kubernetes.io/instance-type"
