"""Property tests: any node input a cluster (or a careless file) can produce.

Never an exception; every generated name, label key and label value is valid for Kubernetes;
the same input (in any node order) gives the same output; the worker's labels are a fixed
point of its own computation.
"""

from __future__ import annotations

import copy
import json
import math
from fractions import Fraction
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_operator.domain.manufacturers import KNOWN_MANUFACTURERS, default_manufacturers
from gpustack_operator.domain.names import normalize_name, sanitize_label_value
from gpustack_operator.domain.node.capacity import worker_capacity_labels
from gpustack_operator.domain.node.devices import DetectedDevice, device_labels, group_devices
from gpustack_operator.domain.plan.desired import desired_state
from gpustack_operator.domain.plan.plan import plan_state
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.domain.profiles import format_node_profile, parse_node_profile
from gpustack_operator.domain.quantities import GI, ceil_value, floor_gi, parse_quantity
from gpustack_operator.domain.validation import (
    is_valid_dns_label,
    is_valid_dns_subdomain,
    is_valid_label_key,
    is_valid_label_value,
)

from .nodes import CPU_NAME, FAMILY, MODEL, VENDOR, A, G

MFRS = default_manufacturers()
FAST = settings(max_examples=200, deadline=None)

texts = st.text(max_size=300)
label_values = st.one_of(
    st.sampled_from(
        ["", "true", "false", "AMD", "Intel", "VendorUnknown", "25", "1", "@cpu.model.name"]
    ),
    st.text(alphabet="abcXYZ019-_. ", max_size=63),
    texts,
)
quantities = st.one_of(
    st.none(),
    st.sampled_from(
        ["16", "500m", "31Gi", "32G", "1e3", "0", "-4", "1e60", "1e99", "12Q", "", "x"]
    ),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    texts,
)
node_names = st.one_of(
    st.from_regex(r"[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True),
    st.sampled_from(["n" * 63, "n" * 64, "a." * 100 + "b"]),
    texts,
)
akeys = st.one_of(
    st.sampled_from(["nvidia-tesla-t4", "amd-mi300x", "ascend-910b", "acme-x1", "nvidia-"]),
    st.builds(lambda m, t: f"{m}-{t}", st.sampled_from(KNOWN_MANUFACTURERS), texts),
)


@st.composite
def nodes(draw: st.DrawFn, name: str | None = None) -> dict[str, Any]:
    labels: dict[str, Any] = {}
    for key in (
        VENDOR,
        FAMILY,
        MODEL,
        "kubernetes.io/os",
        "kubernetes.io/arch",
        "gpustack.ai/managed",
    ):
        if draw(st.booleans()):
            labels[key] = draw(label_values)
    for akey in draw(st.lists(akeys, max_size=2)):
        labels[A + akey] = draw(st.sampled_from(["true", "true", "false", "x"]))
        for suffix in (".count", ".sliced.partitions", ".cpu", ".ram", ".storage", ".product"):
            if draw(st.booleans()):
                labels[A + akey + suffix] = draw(
                    st.one_of(st.sampled_from(["2", "0", "-1", "8"]), label_values)
                )
    if draw(st.booleans()):
        gkey = draw(st.sampled_from(["amd-25-1", "generic-x", "weird_key"]))
        for suffix in (".cpu", ".ram", ".storage"):
            if draw(st.booleans()):
                labels[G + gkey + suffix] = draw(
                    st.one_of(quantities.filter(lambda q: isinstance(q, str)), label_values)
                )
    annotations = {}
    if draw(st.booleans()):
        annotations[CPU_NAME] = draw(
            st.one_of(texts, st.sampled_from(["AMD EPYC 7763 64-Core Processor", "(TM)", "@x"]))
        )
    capacity = {
        res: q
        for res in ("cpu", "memory", "ephemeral-storage")
        if (q := draw(quantities)) is not None
    }
    allocatable = {"nvidia.com/gpu": draw(quantities)} if draw(st.booleans()) else {}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name if name is not None else draw(node_names),
            "labels": labels,
            "annotations": annotations,
        },
        "status": {"capacity": capacity, "allocatable": allocatable},
    }


def assert_valid_object(obj: dict[str, Any]) -> None:
    meta = obj["metadata"]
    assert is_valid_dns_subdomain(meta["name"]), meta["name"]
    if "namespace" in meta:
        assert is_valid_dns_label(meta["namespace"])
    for key, value in meta.get("labels", {}).items():
        assert is_valid_label_key(key) and is_valid_label_value(value), (key, value)
    for key, value in meta.get("annotations", {}).items():
        assert is_valid_label_key(key) and isinstance(value, str), key
    spec = obj.get("spec", {})
    for key, value in {**spec.get("labels", {}), **spec.get("nodeLabels", {})}.items():
        assert is_valid_label_key(key) and is_valid_label_value(value), (key, value)
    if obj["kind"] == "ClusterQueue":
        assert is_valid_dns_subdomain(spec["cohortName"])
    if obj["kind"] == "LocalQueue":
        assert is_valid_label_value(meta["name"]) and len(meta["name"]) == 31


@FAST
@given(nodes())
def test_worker_labels_are_valid_and_a_fixed_point(node: dict[str, Any]) -> None:
    labels = worker_capacity_labels(node, MFRS)
    for key, value in labels.items():
        assert is_valid_label_key(key) and is_valid_label_value(value), (key, value)
    again = copy.deepcopy(node)
    again["metadata"]["labels"] = {
        k: v
        for k, v in again["metadata"]["labels"].items()
        if not (k.startswith(G) or k == "gpustack.ai/managed")
    }
    again["metadata"]["labels"].update(labels)
    assert worker_capacity_labels(again, MFRS) == labels


@FAST
@given(st.lists(nodes(), max_size=4), st.randoms(use_true_random=False))
def test_desired_state_is_valid_and_order_independent(
    node_list: list[dict[str, Any]], rng: Any
) -> None:
    state = desired_state(
        node_list, ["default", "team-a", "kube-system"], ChainPolicy(manufacturers=MFRS)
    )
    for obj in state.objects():
        assert_valid_object(obj)
    shuffled = list(node_list)
    rng.shuffle(shuffled)
    again = desired_state(shuffled, ["team-a", "default"], ChainPolicy(manufacturers=MFRS))
    assert json.dumps(again.as_list(), sort_keys=True) == json.dumps(
        state.as_list(), sort_keys=True
    )


@FAST
@given(
    st.lists(
        st.builds(
            DetectedDevice,
            # Long slug-safe names reach the key budget every run, not only by luck.
            name=st.one_of(texts, st.text(alphabet="abcxyz0189 -.", min_size=30, max_size=120)),
            memory_mib=st.integers(min_value=0, max_value=2**70),
            cores=st.integers(min_value=0, max_value=10**30),
            driver_version=texts,
            runtime_version=texts,
            compute_capability=texts,
            family=texts,
        ),
        max_size=4,
    ),
    st.sampled_from(KNOWN_MANUFACTURERS),
    st.booleans(),
)
def test_device_labels_are_valid(
    devices: list[DetectedDevice], mfr: str, with_memory: bool
) -> None:
    groups = group_devices(mfr, devices, with_memory=with_memory)
    for key, value in device_labels(groups).items():
        assert is_valid_label_key(key) and is_valid_label_value(value), (key, value)
        # the user's <aKey>.sliced.partitions must fit too (docs/naming.md)
        if key.endswith(".count"):
            a_key = key.removesuffix(".count")
            assert is_valid_label_key(a_key + ".sliced.partitions"), a_key


@FAST
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "manufacturer": st.sampled_from(KNOWN_MANUFACTURERS),
                "name": texts.filter(bool),
                "memoryMiB": st.integers(min_value=0, max_value=2**50),
                "count": st.integers(min_value=1, max_value=16),
            }
        ),
        min_size=1,
        max_size=3,
    ),
    nodes(name="sim-node"),
)
def test_plan_with_sim_devices_is_valid(
    devices: list[dict[str, Any]], node: dict[str, Any]
) -> None:
    node["metadata"]["annotations"]["sim.gpustack.ai/devices"] = json.dumps(devices)
    state = plan_state([node], ["default"], ChainPolicy(manufacturers=MFRS))
    for obj in state.objects():
        assert_valid_object(obj)


@FAST
@given(texts, st.text(max_size=20), st.integers(min_value=-5, max_value=300), st.booleans())
def test_string_shaping_never_fails(text: str, prefix: str, max_len: int, cpu: bool) -> None:
    assert is_valid_label_value(sanitize_label_value(text))
    slug = normalize_name(text, prefix, max_len, cpu_name=cpu)
    assert len(slug) <= max(max_len, 0)
    assert slug == "" or is_valid_label_value(slug)
    parse_quantity(text)
    parse_node_profile(text)


@FAST
@given(
    st.from_regex(r"[a-z0-9]{1,8}(-[a-z0-9]{1,8}){0,4}", fullmatch=True),
    st.one_of(st.just(""), st.from_regex(r"[a-z0-9]{1,8}(-[a-z0-9]{1,8}){0,3}", fullmatch=True)),
    st.integers(0, 10**9),
    st.integers(0, 10**9),
    st.integers(0, 10**9),
    st.integers(1, 10**9),
    st.one_of(st.none(), st.integers(1, 10**9)),
)
def test_profile_names_round_trip(
    gkey: str, akey: str, cpu: int, ram: int, stg: int, acc: int, sliced: int | None
) -> None:
    spec = f"{cpu}c-{ram}g-{stg}g" + (
        f"-{acc}d" + (f"-{sliced}s" if sliced else "") if akey else ""
    )
    parsed = parse_node_profile(format_node_profile(gkey, akey, spec))
    assert parsed is not None
    assert (parsed.gkey, parsed.akey, parsed.cpu, parsed.ram, parsed.storage) == (
        gkey,
        akey,
        cpu,
        ram,
        stg,
    )
    if akey:
        assert (parsed.accelerators, parsed.sliced) == (acc, sliced)


def test_quantities_beyond_int64_are_treated_as_absent() -> None:
    """A float such as 1e64 in status.allocatable must not become an unstorable quota."""
    from gpustack_operator.domain.quantities import parse_quantity

    assert parse_quantity(1e64) is None
    assert parse_quantity(str(2**63)) is None
    assert parse_quantity(2**63 - 1) == 2**63 - 1


@given(
    numerator=st.integers(min_value=-(2**70), max_value=2**70),
    denominator=st.integers(min_value=1, max_value=10**9),
)
def test_rounding_without_fractions_equals_math_rounding(numerator: int, denominator: int) -> None:
    value = Fraction(numerator, denominator)
    assert ceil_value(value) == math.ceil(value)
    assert floor_gi(value) == math.floor(value / GI)
