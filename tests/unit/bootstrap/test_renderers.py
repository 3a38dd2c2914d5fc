"""The pure bootstrap renderers (docs/worker.md) and the reconciler's pure helpers."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from gpustack_operator.cli import build_parser
from gpustack_operator.controllers.bootstrap import BootstrapConfig
from gpustack_operator.domain.bootstrap import (
    DEFAULT_NFD_IMAGE,
    BootstrapSettings,
    parse_disabled_applications,
    render_cpu_info_rule,
    render_device_manager,
    render_device_manager_rbac,
    render_nfd,
    render_runtime_classes,
)
from gpustack_operator.domain.bootstrap.common import MANIFEST_COMPARISON
from gpustack_operator.domain.labels import CPU_ANNOTATION_ATTRIBUTES
from gpustack_operator.domain.manufacturers import KNOWN_MANUFACTURERS
from gpustack_operator.environment import load_manufacturers
from gpustack_operator.worker.common import (
    METADATA_OR_SPEC_CHANGED,
    contains,
    is_up_to_date,
)

IMAGE = "example.com/gpustack-operator:1.0"


def by_name(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def test_disabled_applications() -> None:
    assert parse_disabled_applications([]) == frozenset()
    assert parse_disabled_applications(["*"]) == {"node-feature-discovery", "device-manager"}
    assert parse_disabled_applications(["device-manager, ", "node-feature-discovery"]) == {
        "node-feature-discovery",
        "device-manager",
    }
    with pytest.raises(ValueError, match="unknown application 'kueue'"):
        parse_disabled_applications(["kueue"])


def test_nfd_objects_follow_the_reference_values() -> None:
    settings = BootstrapSettings(namespace="gs", pci_class_prefixes=("03", "12"))
    objects = render_nfd(settings)
    for obj in objects:
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpustack-operator"
        if obj["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert obj["metadata"]["namespace"] == "gs"
    configs = by_name(objects, "ConfigMap")
    worker = yaml.safe_load(
        configs["node-feature-discovery-worker-conf"]["data"]["nfd-worker.conf"]
    )
    assert worker["core"]["labelSources"] == ["cpu", "pci", "custom"]
    assert worker["sources"]["pci"] == {
        "deviceClassWhitelist": ["03", "12"],
        "deviceLabelFields": ["vendor"],
    }
    master = yaml.safe_load(
        configs["node-feature-discovery-master-conf"]["data"]["nfd-master.conf"]
    )
    assert master["restrictions"]["nodeFeatureNamespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "gs"}
    }
    assert "acceleratable.feature.gpustack.ai" in master["extraLabelNs"]
    workloads = [*by_name(objects, "Deployment").values(), *by_name(objects, "DaemonSet").values()]
    assert {w["metadata"]["name"] for w in workloads} == {
        "node-feature-discovery-master",
        "node-feature-discovery-gc",
        "node-feature-discovery-worker",
    }
    for workload in workloads:
        pod = workload["spec"]["template"]["spec"]
        assert pod["tolerations"] == [{"operator": "Exists"}]
        container = pod["containers"][0]
        assert container["image"] == DEFAULT_NFD_IMAGE
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] and security["runAsNonRoot"]
        assert security["capabilities"] == {"drop": ["ALL"]}
        assert not security["allowPrivilegeEscalation"]
        selector = workload["spec"]["selector"]["matchLabels"]
        assert selector.items() <= workload["spec"]["template"]["metadata"]["labels"].items()


def test_cpu_info_rule() -> None:
    manufacturers = load_manufacturers({"GPUSTACK_NVIDIA_PCI_VENDOR_ID": "0302_10df"})
    rule = render_cpu_info_rule(("02", "0b"), manufacturers)
    assert rule["metadata"]["name"] == "gpustack-cpu-info"
    annotate, detect, label = rule["spec"]["rules"]
    assert len(annotate["annotations"]) == len(CPU_ANNOTATION_ATTRIBUTES) == 13
    assert annotate["annotations"]["feature.gpustack.ai/cpu-physical-cores"] == (
        "@cpu.model.physical_cores"
    )
    assert annotate["annotations"]["feature.gpustack.ai/cpu-boost-freq"] == "@cpu.model.boost_freq"
    expressions = detect["matchFeatures"][0]["matchExpressions"]
    assert expressions["class"] == {"op": "InRegexp", "value": ["^02", "^0b"]}
    vendors = expressions["vendor"]["value"]
    assert vendors == sorted(vendors) and "10df" in vendors and "10de" not in vendors
    assert detect["vars"] == {"has-acceleratable-devices": "true"}
    assert label["labels"] == {"feature.gpustack.ai/acceleratable": "false"}
    assert label["matchFeatures"][0] == {
        "feature": "rule.matched",
        "matchExpressions": {"has-acceleratable-devices": {"op": "DoesNotExist"}},
    }


def test_device_manager_daemonsets() -> None:
    env = {"GPUSTACK_B": "2", "GPUSTACK_A": "1"}
    settings = BootstrapSettings(namespace="gs", propagated_env=env, image_pull_policy="Always")
    objects = render_device_manager(settings, ["nvidia", "thead", "amd"], IMAGE)
    daemonsets = by_name(objects, "DaemonSet")
    assert sorted(daemonsets) == [
        "gpustack-operator-device-manager-amd",
        "gpustack-operator-device-manager-nvidia",
        "gpustack-operator-device-manager-thead",
    ]
    selectors = [
        tuple(sorted(d["spec"]["selector"]["matchLabels"].items())) for d in daemonsets.values()
    ]
    assert len(set(selectors)) == 3, "DaemonSets must not select each other's pods"
    nvidia = daemonsets["gpustack-operator-device-manager-nvidia"]
    assert nvidia["spec"]["updateStrategy"]["rollingUpdate"] == {"maxUnavailable": 1, "maxSurge": 0}
    assert nvidia["spec"]["revisionHistoryLimit"] == 5
    pod = nvidia["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"feature.node.kubernetes.io/pci-10de.present": "true"}
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["serviceAccountName"] == "gpustack-operator-device-manager"
    container = pod["containers"][0]
    assert container["image"] == IMAGE and container["imagePullPolicy"] == "Always"
    names = [e["name"] for e in container["env"]]
    assert names[:4] == [
        "KUBERNETES_NODE_NAME",
        "KUBERNETES_POD_NAME",
        "KUBERNETES_POD_NAMESPACE",
        "KUBERNETES_POD_IP",
    ]
    assert names[-2:] == ["GPUSTACK_A", "GPUSTACK_B"]
    assert container["startupProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["resources"]["requests"] == {"cpu": "100m", "memory": "128Mi"}
    assert container["securityContext"]["privileged"] is False
    assert "/dev" not in {m["mountPath"] for m in container["volumeMounts"]}
    thead = daemonsets["gpustack-operator-device-manager-thead"]["spec"]["template"]["spec"]
    assert thead["containers"][0]["securityContext"]["privileged"] is True
    assert "runtimeClassName" not in thead
    mounts = {m["mountPath"]: m.get("readOnly") for m in thead["containers"][0]["volumeMounts"]}
    assert mounts["/usr/local/PPU_SDK"] is True and mounts["/sys"] is True
    assert mounts["/dev"] is True
    with pytest.raises(KeyError):
        render_device_manager(settings, ["nvidiaa"], IMAGE)


def test_agent_command_line_is_accepted_by_the_real_parser() -> None:
    """The DaemonSet's args must be flags `device-manager serve` really has."""
    settings = BootstrapSettings()
    for ds in by_name(
        render_device_manager(settings, KNOWN_MANUFACTURERS, IMAGE), "DaemonSet"
    ).values():
        args = ds["spec"]["template"]["spec"]["containers"][0]["args"]
        parsed = build_parser({}).parse_args(args)
        assert parsed.manufacturer == [args[-1].split("=", 1)[1]]


def test_agent_rbac_is_least_privilege() -> None:
    objects = render_device_manager_rbac(BootstrapSettings(namespace="gs"))
    cluster_role = by_name(objects, "ClusterRole")["gpustack-operator-device-manager"]
    assert cluster_role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]}
    ]
    role = by_name(objects, "Role")["gpustack-operator-device-manager"]
    assert role["metadata"]["namespace"] == "gs"
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]
    bindings = [
        *by_name(objects, "RoleBinding").values(),
        *by_name(objects, "ClusterRoleBinding").values(),
    ]
    for binding in bindings:
        assert binding["roleRef"]["name"] != "cluster-admin"
        assert binding["subjects"] == [
            {
                "kind": "ServiceAccount",
                "name": "gpustack-operator-device-manager",
                "namespace": "gs",
            }
        ]


def test_runtime_classes_only_where_needed() -> None:
    manufacturers = load_manufacturers({"GPUSTACK_NVIDIA_ACCELERATABLE_RUNTIME_NAME": "nv"})
    classes = render_runtime_classes(manufacturers.values())
    assert [(c["metadata"]["name"], c["handler"]) for c in classes] == [
        ("mthreads", "mthreads"),
        ("nv", "nv"),
    ]


def test_config_from_environment() -> None:
    env = {
        "GPUSTACK_PCI_CLASS_PREFIXES": "03",
        "GPUSTACK_WORKER_MANUFACTURER": "nvidia",
        "KUBERNETES_POD_NAMESPACE": "ops",
        "KUBERNETES_POD_NAME": "worker-0",
        "HOME": "/root",
    }
    config = BootstrapConfig.from_environment(env, disabled=["device-manager"])
    assert config.namespace == "ops" and config.pod_name == "worker-0"
    assert config.disabled == {"device-manager"}
    assert config.settings.pci_class_prefixes == ("03",)
    assert config.settings.propagated_env == {
        "GPUSTACK_PCI_CLASS_PREFIXES": "03",
        "GPUSTACK_WORKER_MANUFACTURER": "nvidia",
    }
    assert config.manufacturers == KNOWN_MANUFACTURERS
    with pytest.raises(ValueError, match="unknown manufacturer"):
        BootstrapConfig.from_environment({}, manufacturers=["nvidia", "acme"])
    with pytest.raises(ValueError, match="GPUSTACK_PCI_CLASS_PREFIXES"):
        BootstrapConfig.from_environment({"GPUSTACK_PCI_CLASS_PREFIXES": "zz"})


def test_up_to_date_tolerates_server_defaults_but_not_drift() -> None:
    want = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "x", "labels": {"a": "1"}},
        "data": {"k": "v"},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    have = {
        "metadata": {"name": "x", "labels": {"a": "1", "extra": "ok"}, "resourceVersion": "7"},
        "data": {"k": "v"},
        "spec": {"containers": [{"name": "c", "image": "i", "imagePullPolicy": "IfNotPresent"}]},
    }

    def applied(have: dict[str, Any] | None) -> bool:
        return is_up_to_date(have, want, MANIFEST_COMPARISON)

    assert applied(have)
    assert not applied(None)
    assert not applied({**have, "data": {"k": "other"}})
    assert not applied({**have, "data": {"k": "v", "dropped": "key"}})  # data is owned whole
    assert not applied({**have, "metadata": {"name": "x", "labels": {}}})
    two = {"spec": {"containers": [*have["spec"]["containers"], {"name": "d"}]}}
    assert not contains(two, {"spec": want["spec"]})


def test_spec_changed_ignores_status_and_bookkeeping() -> None:
    predicate = METADATA_OR_SPEC_CHANGED
    old = {"metadata": {"name": "x", "resourceVersion": "1"}, "spec": {"a": 1}, "status": {"n": 1}}
    status_only = {**old, "metadata": {"name": "x", "resourceVersion": "2"}, "status": {"n": 2}}
    assert not predicate.update(old, status_only)
    assert predicate.update(old, {**old, "spec": {"a": 2}})
    assert predicate.update(old, {**old, "data": {"x": "y"}})
    assert predicate.update(old, {**old, "metadata": {"name": "x", "labels": {"l": "v"}}})


def _schedulable(pod: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a Node with *labels* passes the pod's nodeSelector and required affinity
    (Kubernetes: every selector entry matches; one term's expressions all hold)."""
    if any(labels.get(k) != v for k, v in pod.get("nodeSelector", {}).items()):
        return False
    terms = (
        pod.get("affinity", {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", {})
        .get("nodeSelectorTerms")
    )
    if not terms:
        return True
    return any(
        all(
            (e["key"] not in labels) if e["operator"] == "DoesNotExist" else False
            for e in term["matchExpressions"]
        )
        for term in terms
    )


@pytest.mark.parametrize("coexistence", [True, False])
def test_device_manager_stays_off_nodes_vendor_stacks_describe(coexistence: bool) -> None:
    """docs/devices.md, "Coexistence": by default no agent on a node GFD or the AMD labeller
    already labels; with coexistence off, one on every node with the vendor's PCI device."""
    settings = BootstrapSettings(coexistence=coexistence)
    daemonsets = by_name(
        render_device_manager(settings, ["nvidia", "amd", "thead"], IMAGE), "DaemonSet"
    )

    def pod(mfr: str) -> dict[str, Any]:
        spec: dict[str, Any] = daemonsets[f"gpustack-operator-device-manager-{mfr}"]["spec"]
        return spec["template"]["spec"]

    nvidia_pci = {"feature.node.kubernetes.io/pci-10de.present": "true"}
    amd_pci = {"feature.node.kubernetes.io/pci-1002.present": "true"}
    gfd = {**nvidia_pci, "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}
    mig_mixed = {**nvidia_pci, "nvidia.com/mig.strategy": "mixed"}
    labeller = {**amd_pci, "amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}
    assert _schedulable(pod("nvidia"), nvidia_pci)
    assert _schedulable(pod("amd"), amd_pci)
    assert _schedulable(pod("nvidia"), gfd) is not coexistence
    assert _schedulable(pod("nvidia"), mig_mixed) is not coexistence
    assert _schedulable(pod("amd"), labeller) is not coexistence
    assert "affinity" not in pod("thead")
