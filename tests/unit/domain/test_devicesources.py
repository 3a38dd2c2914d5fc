"""Device pools from what the GPU stacks publish (docs/devices.md, "Sources", "Precedence",
"Quota resources"), checked on the source functions and on every example dump through the
same code ``plan`` runs."""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from gpustack_operator.cli import main
from gpustack_operator.commands.plan import read_cluster_file, read_nodes_file
from gpustack_operator.domain.chain.flavors import flavor_nodes
from gpustack_operator.domain.chain.queues import QuotaResources
from gpustack_operator.domain.manufacturers import default_manufacturers
from gpustack_operator.domain.node.capacity import worker_capacity_labels
from gpustack_operator.domain.node.devicesources import (
    derive_devices,
    node_device_diagnostics,
)
from gpustack_operator.domain.node.devicesources.amd import amd_pools
from gpustack_operator.domain.node.devicesources.dra import dra_pools, node_slices
from gpustack_operator.domain.node.devicesources.gfd import gfd_pools
from gpustack_operator.domain.node.devicesources.merge import decode_resource, encode_resource
from gpustack_operator.domain.node.devicesources.model import (
    COUNT_MISSING,
    DESCRIBED_BY_AGENT,
    EXCLUDED_MIG_PROFILE,
    NO_ALLOCATABLE,
)
from gpustack_operator.domain.node.nodedevices import HOST_RESOURCES
from gpustack_operator.domain.node.nodefeature import merge_node_features, worker_node_feature
from gpustack_operator.domain.nodeview import labels_of, name_of, status_field
from gpustack_operator.domain.plan.plan import plan_state
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.domain.profiles import parse_node_profile
from gpustack_operator.domain.quantities import parse_quantity

from .nodes import make_node

MFRS = default_manufacturers()
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
DUMPS = sorted(p.name for p in EXAMPLES.glob("*.yaml") if p.name != "cluster.yaml")
A = "acceleratable.feature.gpustack.ai/"

GFD_A100 = {
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.memory": "40960",
    "nvidia.com/gpu.family": "ampere",
    "nvidia.com/gpu.compute.major": "8",
    "nvidia.com/gpu.compute.minor": "0",
    "nvidia.com/cuda.driver-version.full": "550.90.07",
    "nvidia.com/cuda.runtime-version.full": "12.4",
}


def test_gfd_full_cards_give_the_agents_labels() -> None:
    derived = derive_devices(GFD_A100, {"nvidia.com/gpu": "8"}, MFRS)
    assert derived.diagnostics == ()
    q = A + "nvidia-a100-sxm4-40gb"
    assert derived.labels == {
        A + "nvidia.driver-version": "550.90.07",
        A + "nvidia.runtime-version": "12.4",
        q: "true",
        q + ".comcap": "8.0",
        q + ".cores": "0",
        q + ".count": "8",
        q + ".family": "Ampere",
        q + ".memory": "40Gi",
        q + ".product": "NVIDIA-A100-SXM4-40GB",
    }


def test_shared_suffix_is_not_part_of_the_model_and_replicas_slice() -> None:
    labels = {
        **GFD_A100,
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-SHARED",
        "nvidia.com/gpu.replicas": "4",
        "nvidia.com/gpu.sharing-strategy": "time-slicing",
    }
    pools, problems = gfd_pools(labels, {"nvidia.com/gpu": "32"})
    assert problems == [] and len(pools) == 1
    assert (pools[0].product, pools[0].sliced, pools[0].resource) == (
        "NVIDIA-A100-SXM4-40GB",
        4,
        "nvidia.com/gpu",
    )
    renamed, _ = gfd_pools(
        {**labels, "nvidia.com/gpu.sharing-strategy": "mps"}, {"nvidia.com/gpu.shared": "32"}
    )
    assert renamed[0].resource == "nvidia.com/gpu.shared" and renamed[0].sliced == 4
    derived = derive_devices({**labels}, {"nvidia.com/gpu.shared": "32"}, MFRS)
    q = A + "nvidia-a100-sxm4-40gb"
    assert derived.labels[q + ".resource"] == "nvidia.com_gpu.shared"
    assert derived.labels[q + ".sliced.partitions"] == "4"


def test_mig_mixed_gives_one_pool_per_profile_and_reports_the_rest() -> None:
    labels = {
        "nvidia.com/mig.strategy": "mixed",
        "nvidia.com/mig-1g.10gb.count": "7",
        "nvidia.com/mig-1g.10gb.memory": "9728",
        "nvidia.com/mig-1g.10gb.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
        "nvidia.com/mig-2g.20gb.count": "3",
        "nvidia.com/mig-2g.20gb.product": "NVIDIA-A100-SXM4-80GB-MIG-2g.20gb",
        "nvidia.com/mig-3g.40gb.count": "2",
    }
    allocatable = {"nvidia.com/mig-1g.10gb": "7", "nvidia.com/mig-3g.40gb": "2"}
    pools, problems = gfd_pools(labels, allocatable)
    assert [(p.product, p.count, p.resource) for p in pools] == [
        ("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", 7, "nvidia.com/mig-1g.10gb")
    ]
    assert [p.reason for p in problems] == [EXCLUDED_MIG_PROFILE, EXCLUDED_MIG_PROFILE]
    assert "no allocatable nvidia.com/mig-2g.20gb" in problems[0].detail
    assert "product is missing" in problems[1].detail


def test_gfd_problems_are_reported() -> None:
    _, problems = gfd_pools(GFD_A100, {})
    assert [p.reason for p in problems] == [NO_ALLOCATABLE]
    _, problems = gfd_pools({"nvidia.com/gpu.product": "Tesla-T4"}, {"nvidia.com/gpu": "1"})
    assert [p.reason for p in problems] == [COUNT_MISSING]
    node = make_node("g", labels=GFD_A100)
    (why,) = node_device_diagnostics(node, MFRS)
    assert why.reason == NO_ALLOCATABLE and str(why).startswith("nvidia-gfd: NVIDIA-A100")


def test_amd_labeller_plain_and_beta_forms() -> None:
    plain = {
        "amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM",
        "amd.com/gpu.vram": "192G",
        "amd.com/gpu.cu-count": "304",
        "amd.com/gpu.family": "AI",
        "amd.com/gpu.driver-version": "6.8.5",
    }
    beta = {
        "beta.amd.com/gpu.product-name.AMD_Instinct_MI300X_OAM": "8",
        "beta.amd.com/gpu.vram.192G": "8",
        "beta.amd.com/gpu.cu-count.304": "8",
    }
    for labels in (plain, beta):
        pools, problems = amd_pools(labels, {"amd.com/gpu": "8"})
        assert problems == []
        assert (pools[0].product, pools[0].count, pools[0].memory_mib, pools[0].cores) == (
            "AMD Instinct MI300X OAM",
            8,
            192 * 1024,
            304,
        )
    _, problems = amd_pools(plain, {})
    assert [p.reason for p in problems] == [NO_ALLOCATABLE]


def test_agent_wins_and_the_card_is_counted_once() -> None:
    """docs/devices.md, "Precedence": our agent describes nvidia here, GFD is ignored."""
    agent = {
        A + "nvidia": "true",
        A + "nvidia-a100-sxm4-40gb": "true",
        A + "nvidia-a100-sxm4-40gb.count": "8",
    }
    derived = derive_devices({**GFD_A100, **agent}, {"nvidia.com/gpu": "8"}, MFRS)
    assert derived.labels == {} and derived.pools == ()
    assert [d.reason for d in derived.diagnostics] == [DESCRIBED_BY_AGENT]


def test_worker_labels_are_a_fixed_point_on_a_gfd_node() -> None:
    """The worker reads its own derived labels back: publishing again changes nothing, and
    labels derived earlier from vendor labels that are gone are dropped."""
    node = make_node(
        "g",
        cpu="64",
        memory="256Gi",
        storage="500Gi",
        labels=GFD_A100,
        allocatable={"nvidia.com/gpu": "8"},
    )
    first = worker_capacity_labels(node, MFRS)
    feature = worker_node_feature(node, "gpustack-system", MFRS)
    assert feature is not None
    merged = merge_node_features(node, [feature], owned="worker")
    assert worker_capacity_labels(merged, MFRS) == first
    merged["metadata"]["labels"] = {
        k: v for k, v in labels_of(merged).items() if not k.startswith("nvidia.com/")
    }
    assert not any(k.startswith(A) for k in worker_capacity_labels(merged, MFRS))


def test_resource_label_round_trips() -> None:
    for resource in ("nvidia.com/mig-1g.10gb", "nvidia.com/gpu.shared", "amd.com/gpu"):
        assert decode_resource(encode_resource(resource)) == resource
    assert decode_resource("nonsense") == ""


# --- every example dump, through plan's code -------------------------------------------------


def queue_name(queue: dict[str, Any]) -> str:
    return str(queue["metadata"]["name"])


def _devices(node: Any, resource: str, slices: list[Any]) -> int:
    """Devices of *resource* on *node*: its allocatable count, plus DRA devices published in
    ResourceSlices of the node (resource ``<driver>/<type>``)."""
    quantity = parse_quantity(status_field(node, "allocatable").get(resource))
    count = int(quantity) if quantity is not None and quantity > 0 else 0
    for item in slices:
        spec = item["spec"]
        if spec["nodeName"] == name_of(node):
            count += sum(
                1
                for d in spec["devices"]
                if f"{spec['driver']}/{d['attributes']['type']['string']}" == resource
            )
    return count


@pytest.mark.parametrize("mode", list(QuotaResources))
@pytest.mark.parametrize("dump", DUMPS)
def test_example_device_quota_is_the_allocatable_of_the_pools_resource(
    dump: str, mode: QuotaResources
) -> None:
    """docs/devices.md, "Quota resources": per flavor, the device quota is the allocatable
    of the pool's resource on its nodes (DRA: the devices of its slices), never zero; each
    card is counted once overall."""
    nodes, namespaces, slices = read_cluster_file(EXAMPLES / dump)
    state = plan_state(
        nodes,
        namespaces,
        ChainPolicy(manufacturers=MFRS, quota_resources=mode),
        resource_slices=slices,
    )
    by_flavor = flavor_nodes(state.nodes, MFRS)
    covered: Counter[str] = Counter()
    device_queues = 0
    for queue in state.cluster_queues:
        for group in queue["spec"]["resourceGroups"]:
            device = [r for r in group["coveredResources"] if r not in HOST_RESOURCES]
            if not device:
                continue
            device_queues += 1
            (resource,) = device
            for flavor in group["flavors"]:
                members = by_flavor[flavor["name"]]
                quota = {r["name"]: r["nominalQuota"] for r in flavor["resources"]}[resource]
                pool = resource
                if mode == QuotaResources.CREDITS:
                    assert resource.startswith("credits.gpustack.ai/")
                    # The flavor's name parses as the pool's profile even where the TAS
                    # queue's name was cut to stay a DNS label (docs/naming.md).
                    profile = parse_node_profile(flavor["name"])
                    assert profile is not None and profile.akey
                    label = labels_of(members[0]).get(A + profile.akey + ".resource", "")
                    mfr = resource.rsplit("/", 1)[1]
                    pool = decode_resource(label) or MFRS[mfr].resource_name
                expected = sum(_devices(n, pool, slices) for n in members)
                assert int(quota) == expected > 0, (dump, queue["metadata"]["name"])
                covered[pool] += int(quota)
    assert device_queues > 0
    # Each card is counted once, and a card no pool counts has a reason that says so
    # (docs/devices.md, "Why a device gets no pool"; none in the GPU-stack dumps), Neuron
    # cores counted as their devices included.
    unpooled: Counter[str] = Counter()
    for node in nodes:
        for diagnostic in node_device_diagnostics(node, MFRS, node_slices(name_of(node), slices)):
            if diagnostic.resource and diagnostic.reason != DESCRIBED_BY_AGENT:
                unpooled[diagnostic.resource] += _devices(node, diagnostic.resource, [])
    for resource, total in covered.items():
        advertised = sum(_devices(n, resource, slices) for n in state.nodes)
        assert total + unpooled[resource] == advertised, (dump, resource)


def test_example_markers_mig_profiles_and_counting_once() -> None:
    nodes, namespaces = read_nodes_file(EXAMPLES / "mixed-stacks.yaml")
    state = plan_state(nodes, namespaces, ChainPolicy(manufacturers=MFRS))
    queues = {q["metadata"]["name"]: q for q in state.cluster_queues}
    sliced = {n for n in queues if n.endswith("s") and "-1d-" in n}
    assert {n.split("--")[-1] for n in sliced} == {
        "nvidia-tesla-t4-1d-4s",
        "nvidia-l4-1d-4s",
        "nvidia-a10g-1d-4s",
    }
    for name in sliced:
        for flavor in queues[name]["spec"]["resourceGroups"][0]["flavors"]:
            assert all(r["borrowingLimit"] == "0" for r in flavor["resources"])
    mig = sorted(n.split("--")[-1] for n in queues if "-mig-" in n)
    assert mig == [
        "nvidia-a100-sxm4-40gb-mig-1g-5gb-1d",
        "nvidia-a100-sxm4-80gb-mig-1g-10gb-1d",
        "nvidia-a100-sxm4-80gb-mig-3g-40gb-1d",
    ]
    a100 = next(q for n, q in queues.items() if n.endswith("--nvidia-a100-sxm4-40gb-1d"))
    (flavor,) = a100["spec"]["resourceGroups"][0]["flavors"]
    assert {r["name"]: r["nominalQuota"] for r in flavor["resources"]}["nvidia.com/gpu"] == "16"
    assert sorted(name_of(n) for n in flavor_nodes(state.nodes, MFRS)[flavor["name"]]) == [
        "dgx-a100-1",
        "dgx-a100-agent",
    ]


def test_dra_devices_become_pools_only_where_no_label_source_describes_them() -> None:
    """docs/devices.md, "DRA" and "Precedence": slices of the node, grouped by product and
    memory; GFD labels for the same manufacturer win."""
    _, _, slices = read_cluster_file(EXAMPLES / "dra-h100.yaml")
    foreign = copy.deepcopy(dict(slices[0]))
    foreign["spec"]["nodeName"] = "other"
    unknown = copy.deepcopy(dict(slices[0]))
    unknown["spec"]["driver"] = "fpga.example.com"
    pools, problems = dra_pools("h100-dra-1", [*slices, foreign, unknown])
    assert [
        (p.product, p.count, p.memory_mib, p.resource, p.compute_capability) for p in pools
    ] == [("NVIDIA H100 80GB HBM3", 4, 80 * 1024, "gpu.nvidia.com/gpu", "9.0")]
    assert [p.reason for p in problems] == ["unknown-vendor"]
    derived = derive_devices({}, {}, MFRS, node_name="h100-dra-1", slices=slices)
    q = A + "nvidia-h100-80gb-hbm3-dra"  # a model of its own: never a device-plugin flavor
    assert derived.labels[q + ".dra"] == "true"
    assert derived.labels[q + ".resource"] == "gpu.nvidia.com_gpu"
    with_gfd = derive_devices(
        GFD_A100, {"nvidia.com/gpu": "8"}, MFRS, node_name="h100-dra-1", slices=slices
    )
    assert [p.source for p in with_gfd.pools] == ["nvidia-gfd"]
    assert [d.reason for d in with_gfd.diagnostics] == [DESCRIBED_BY_AGENT]


def test_plan_table_names_each_pools_resource(capsys: pytest.CaptureFixture[str]) -> None:
    """The table shows a pool's resource when it is not the manufacturer's, and the quota
    line names the covered resource."""
    assert main(["plan", "--nodes", str(EXAMPLES / "gfd-mig-mixed.yaml")]) == 0
    out = capsys.readouterr().out
    assert "nvidia-a100-sxm4-80gb-mig-1g-10gb x28 (nvidia.com/mig-1g.10gb)" in out
    assert "ephemeral-storage=3576Gi nvidia.com/mig-1g.10gb=28" in out
    assert (
        main(["plan", "--nodes", str(EXAMPLES / "gfd-a100.yaml"), "--quota-resources", "credits"])
        == 0
    )
    assert "ephemeral-storage=7152Gi credits=16" in capsys.readouterr().out


def test_unpooled_devices_are_judged_once_their_sources_had_their_chance() -> None:
    """docs/devices.md, "Why a device gets no pool": settling time, or the agent's word."""
    from gpustack_operator.domain.manufacturers import default_manufacturers
    from gpustack_operator.domain.node.devicesources import Diagnostic, judged_diagnostics

    manufacturers = default_manufacturers()
    gpu = Diagnostic("allocatable", "model-unknown", "nvidia.com/gpu (2): ...", "nvidia.com/gpu")
    efa = Diagnostic("allocatable", "unknown-resource", "vpc.amazonaws.com/efa (1)", "x/efa")
    found = ((gpu, 2), (efa, 1))

    judged, wait = judged_diagnostics(found, {}, manufacturers, seen_for=10.0, settling=300.0)
    assert judged == () and wait == 290.0
    judged, wait = judged_diagnostics(found, {}, manufacturers, seen_for=300.0, settling=300.0)
    assert judged == found and wait is None
    # Our agent has published NVIDIA's devices: what it found is final for nvidia.com/gpu.
    agent = {"acceleratable.feature.gpustack.ai/nvidia": "true"}
    judged, wait = judged_diagnostics(found, agent, manufacturers, seen_for=1.0, settling=300.0)
    assert judged == ((gpu, 2),) and wait == 299.0
    # A reason already reported stays reported while it holds.
    judged, _ = judged_diagnostics(
        found, {}, manufacturers, seen_for=0.0, settling=300.0, reported={efa}
    )
    assert judged == ((efa, 1),)
