#!/usr/bin/env python3
"""Measure the simulator with the official Kubernetes Python client (PyPI ``kubernetes``).

Not a test (CI does not run it): a client nobody here wrote, pointed at ``gpustack-operator
sim --serve`` (HTTPS, the kubeconfig it writes: its CA and an administrator's client
certificate), runs 53 named checks of what clients lean on: config loading, discovery, CRUD
with every patch type, Deployments and their ``/scale``, Jobs, RBAC, a CRD and its custom
objects, watches, the dynamic client with server-side apply, errors, Tables, pagination,
access reviews, TokenRequest, Leases and ``events.k8s.io``. Each check prints PASS or FAIL
with a reason; the exit status is 1 when any fails. docs/simulator.md, "The official Python
client", records the count and what is left.

Before the checks it seeds the cluster as kind's is at start (``hack/kindlike.py``: kind's
namespaces, a Ready Node, the kube-system workloads and running Pods; the simulator's
ServiceAccount stand-in creates the ``default`` ServiceAccounts).

    .venv/bin/python hack/official_client_checks.py [-v] [--e2e SRC]

The checks run in order and build on each other (one namespace, one CRD), so they run as a
whole.

``--e2e SRC`` runs the client's own end-to-end tests instead (``kubernetes/e2e_test`` of a
checkout SRC of kubernetes-client/python; neither the package nor this repository ships
them) against the same seeded simulator, and prints pytest's count.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kindlike  # hack/ is on the path of a script run from it
from kubernetes import client, config, dynamic, watch
from kubernetes.client.exceptions import ApiException

E2E_TEST_SECONDS = 120
# The client's e2e tests import ``kubernetes.e2e_test``: the checkout's folder joins the
# installed package's path, so the installed client runs them.
E2E_RUNNER = """
import sys, kubernetes, pytest
kubernetes.__path__.append(sys.argv[1])
sys.exit(pytest.main(sys.argv[2:]))
"""
CHECKS: list[tuple[str, Callable[[Context], None]]] = []


def check(name: str) -> Callable[[Callable[[Context], None]], Callable[[Context], None]]:
    """Register a check under *name* (the order of definition is the order of running)."""

    def register(fn: Callable[[Context], None]) -> Callable[[Context], None]:
        CHECKS.append((name, fn))
        return fn

    return register


def expect(condition: object, why: str) -> None:
    """Fail the check with *why* unless *condition* holds."""
    if not condition:
        raise AssertionError(why)


def eventually(what: str, probe: Callable[[], object], within: float = 10.0) -> Any:
    """Poll *probe* until it returns something truthy, at most *within* seconds."""
    deadline = time.monotonic() + within
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within:g}s")
        time.sleep(0.05)


def api_error(call: Callable[[], object]) -> ApiException:
    """The ApiException *call* raises (the check fails when it succeeds)."""
    try:
        call()
    except ApiException as exc:
        return exc
    raise AssertionError("the call succeeded where the server should refuse it")


class Context:
    """The clients, one namespace of its own, and what earlier checks left for later ones."""

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig
        self.api: client.ApiClient | None = None
        self.ns = f"official-{uuid.uuid4().hex[:6]}"
        self.crd_group = "checks.example.com"
        self.crd_plural = "widgets"
        self.crd_version = "v1"

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def apps(self) -> client.AppsV1Api:
        return client.AppsV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def configmap(self, name: str, labels: dict[str, str] | None = None) -> Any:
        body = {"metadata": {"name": name, "labels": labels or {}}, "data": {"a": "1"}}
        return self.core.create_namespaced_config_map(self.ns, body)


# -- config, version, discovery -----------------------------------------------------------


@check("config: load the kubeconfig (CA, client certificate)")
def _config(ctx: Context) -> None:
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(ctx.kubeconfig), client_configuration=configuration)
    expect(configuration.host.startswith("https://"), f"host {configuration.host} is not HTTPS")
    expect(configuration.ssl_ca_cert, "no CA certificate in the configuration")
    expect(configuration.cert_file and configuration.key_file, "no client certificate")
    ctx.api = client.ApiClient(configuration)


@check("version: /version")
def _version(ctx: Context) -> None:
    info = client.VersionApi(ctx.api).get_code()
    expect(info.major == "1" and info.git_version.startswith("v1."), f"version {info}")


@check("discovery: /api versions")
def _core_versions(ctx: Context) -> None:
    versions = client.CoreApi(ctx.api).get_api_versions()
    expect("v1" in versions.versions, f"versions {versions.versions}")


@check("discovery: /apis groups")
def _groups(ctx: Context) -> None:
    groups = {g.name for g in client.ApisApi(ctx.api).get_api_versions().groups}
    for group in ("apps", "batch", "rbac.authorization.k8s.io", "coordination.k8s.io"):
        expect(group in groups, f"group {group} missing from {sorted(groups)}")


@check("discovery: core/v1 resources")
def _core_resources(ctx: Context) -> None:
    names = {r.name for r in ctx.core.get_api_resources().resources}
    for name in ("pods", "pods/status", "configmaps", "namespaces", "serviceaccounts/token"):
        expect(name in names, f"resource {name} missing")


# -- the kind-like seed ---------------------------------------------------------------------


@check("seed: a Ready Node and running kube-system Pods")
def _seeded(ctx: Context) -> None:
    nodes = ctx.core.list_node().items
    expect(nodes, "no Node")
    ready = [
        c.status
        for c in nodes[0].status.conditions or []
        if c.type == "Ready"  # kind's node is Ready once its kubelet reported
    ]
    expect(ready == ["True"], f"Ready conditions {ready}")
    pods = ctx.core.list_namespaced_pod("kube-system", field_selector="status.phase=Running").items
    expect(pods, "no running Pod in kube-system (fieldSelector status.phase=Running)")


# -- core/v1 --------------------------------------------------------------------------------


@check("namespace: create, read, patch, default ServiceAccount")
def _namespace(ctx: Context) -> None:
    ns = ctx.core.create_namespace({"metadata": {"name": ctx.ns}})
    expect(ns.status.phase == "Active", f"status.phase {ns.status.phase}")
    patched = ctx.core.patch_namespace(ctx.ns, {"metadata": {"labels": {"team": "a"}}})
    expect(patched.metadata.labels.get("team") == "a", f"labels {patched.metadata.labels}")
    eventually(
        "the default ServiceAccount",
        lambda: [
            sa
            for sa in ctx.core.list_namespaced_service_account(ctx.ns).items
            if sa.metadata.name == "default"
        ],
    )


@check("configmap: create and read")
def _cm_create(ctx: Context) -> None:
    created = ctx.configmap("cm-read")
    read = ctx.core.read_namespaced_config_map("cm-read", ctx.ns)
    expect(read.metadata.uid == created.metadata.uid, "uid differs")
    expect(read.data == {"a": "1"}, f"data {read.data}")


@check("configmap: list by label and by field selector")
def _cm_labels(ctx: Context) -> None:
    ctx.configmap("cm-red", {"colour": "red"})
    ctx.configmap("cm-blue", {"colour": "blue"})
    names = [
        c.metadata.name
        for c in ctx.core.list_namespaced_config_map(ctx.ns, label_selector="colour in (red)").items
    ]
    expect(names == ["cm-red"], f"names {names}")
    items = ctx.core.list_namespaced_config_map(
        ctx.ns, field_selector="metadata.name=cm-blue"
    ).items
    expect([c.metadata.name for c in items] == ["cm-blue"], f"{len(items)} items")


@check("configmap: merge patch")
def _cm_merge(ctx: Context) -> None:
    patched = ctx.core.patch_namespaced_config_map(
        "cm-read", ctx.ns, {"data": {"b": "2"}}, _content_type="application/merge-patch+json"
    )
    expect(patched.data == {"a": "1", "b": "2"}, f"data {patched.data}")


@check("configmap: JSON patch")
def _cm_json(ctx: Context) -> None:
    patched = ctx.core.patch_namespaced_config_map(
        "cm-read", ctx.ns, [{"op": "replace", "path": "/data/a", "value": "x"}]
    )
    expect(patched.data.get("a") == "x", f"data {patched.data}")


@check("configmap: replace, and a stale resourceVersion is a 409")
def _cm_replace(ctx: Context) -> None:
    current = ctx.core.read_namespaced_config_map("cm-read", ctx.ns)
    stale = current.metadata.resource_version
    current.data = {"c": "3"}
    replaced = ctx.core.replace_namespaced_config_map("cm-read", ctx.ns, current)
    expect(replaced.data == {"c": "3"}, f"data {replaced.data}")
    current.metadata.resource_version = stale
    exc = api_error(lambda: ctx.core.replace_namespaced_config_map("cm-read", ctx.ns, current))
    expect(exc.status == 409 and exc.reason == "Conflict", f"{exc.status} {exc.reason}")


@check("configmap: delete collection by label")
def _cm_delete_collection(ctx: Context) -> None:
    ctx.core.delete_collection_namespaced_config_map(ctx.ns, label_selector="colour")
    left = [c.metadata.name for c in ctx.core.list_namespaced_config_map(ctx.ns).items]
    expect("cm-red" not in left and "cm-blue" not in left and "cm-read" in left, f"left {left}")


@check("secret: data and stringData")
def _secret(ctx: Context) -> None:
    ctx.core.create_namespaced_secret(
        ctx.ns,
        {
            "metadata": {"name": "s"},
            "data": {"a": base64.b64encode(b"one").decode()},
            "stringData": {"b": "two"},
        },
    )
    read = ctx.core.read_namespaced_secret("s", ctx.ns)
    expect(read.type == "Opaque", f"type {read.type}")
    expect(base64.b64decode(read.data["b"]) == b"two", f"data {read.data}")
    expect(read.string_data is None, "stringData was stored")


@check("service: create (clusterIP, status) and delete returns the object")
def _service(ctx: Context) -> None:
    body = {"metadata": {"name": "svc"}, "spec": {"ports": [{"port": 80}], "selector": {"a": "b"}}}
    svc = ctx.core.create_namespaced_service(ctx.ns, body)
    expect(svc.spec.cluster_ip, "no clusterIP")
    expect(svc.spec.ports[0].protocol == "TCP", f"protocol {svc.spec.ports[0].protocol}")
    expect(svc.status is not None and svc.status.load_balancer is not None, "no status")
    deleted = ctx.core.delete_namespaced_service("svc", ctx.ns)
    expect(getattr(deleted, "kind", None) == "Service", f"DELETE answered {type(deleted)}")


@check("serviceaccount: create, list, delete")
def _serviceaccount(ctx: Context) -> None:
    ctx.core.create_namespaced_service_account(ctx.ns, {"metadata": {"name": "robot"}})
    names = {s.metadata.name for s in ctx.core.list_namespaced_service_account(ctx.ns).items}
    expect({"default", "robot"} <= names, f"names {names}")
    ctx.core.delete_namespaced_service_account("robot", ctx.ns)


@check("pod: create with status defaults")
def _pod(ctx: Context) -> None:
    body = {
        "metadata": {"name": "p", "labels": {"app": "p"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    pod = ctx.core.create_namespaced_pod(ctx.ns, body)
    expect(pod.status.phase == "Pending", f"phase {pod.status.phase}")
    expect(pod.status.qos_class == "BestEffort", f"qosClass {pod.status.qos_class}")


@check("pod: strategic merge patch of containers")
def _pod_strategic(ctx: Context) -> None:
    patch = {"spec": {"containers": [{"name": "c", "image": "busybox:2"}]}}
    pod = ctx.core.patch_namespaced_pod(
        "p", ctx.ns, patch, _content_type="application/strategic-merge-patch+json"
    )
    images = [c.image for c in pod.spec.containers]
    expect(images == ["busybox:2"], f"images {images}")


@check("pod: status read and patch")
def _pod_status(ctx: Context) -> None:
    ctx.core.patch_namespaced_pod_status("p", ctx.ns, {"status": {"phase": "Running"}})
    pod = ctx.core.read_namespaced_pod_status("p", ctx.ns)
    expect(pod.status.phase == "Running", f"phase {pod.status.phase}")


@check("pod: delete")
def _pod_delete(ctx: Context) -> None:
    ctx.core.delete_namespaced_pod("p", ctx.ns, grace_period_seconds=0)
    eventually(
        "the Pod is gone",
        lambda: not ctx.core.list_namespaced_pod(ctx.ns).items,
    )


# -- apps, batch, rbac ------------------------------------------------------------------------


def _deployment() -> dict[str, Any]:
    labels = {"app": "web"}
    return {
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]},
            },
        },
    }


@check("deployment: create and read")
def _deploy(ctx: Context) -> None:
    ctx.apps.create_namespaced_deployment(ctx.ns, _deployment())
    read = ctx.apps.read_namespaced_deployment("web", ctx.ns)
    expect(read.spec.replicas == 1, f"replicas {read.spec.replicas}")


@check("deployment: read /scale")
def _scale_read(ctx: Context) -> None:
    scale = ctx.apps.read_namespaced_deployment_scale("web", ctx.ns)
    expect(scale.kind == "Scale" and scale.spec.replicas == 1, f"scale {scale}")


@check("deployment: patch /scale")
def _scale_patch(ctx: Context) -> None:
    ctx.apps.patch_namespaced_deployment_scale("web", ctx.ns, {"spec": {"replicas": 3}})
    read = ctx.apps.read_namespaced_deployment("web", ctx.ns)
    expect(read.spec.replicas == 3, f"replicas {read.spec.replicas}")


@check("deployment: status read and patch")
def _deploy_status(ctx: Context) -> None:
    # The Deployment controller rewrites the replica counts at once; a condition of a type
    # it does not own is left in place, as on a real cluster.
    condition = {"type": "Checked", "status": "True", "reason": "Probe", "message": "patched"}
    ctx.apps.patch_namespaced_deployment_status(
        "web", ctx.ns, {"status": {"conditions": [condition]}}
    )
    status = ctx.apps.read_namespaced_deployment_status("web", ctx.ns).status
    found = {c.type: c.reason for c in status.conditions or []}
    expect(found.get("Checked") == "Probe", f"conditions {found}")


@check("job: create and list (batch/v1)")
def _job(ctx: Context) -> None:
    body = {
        "metadata": {"name": "once"},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox"}],
                }
            }
        },
    }
    batch = client.BatchV1Api(ctx.api)
    batch.create_namespaced_job(ctx.ns, body)
    names = [j.metadata.name for j in batch.list_namespaced_job(ctx.ns).items]
    expect(names == ["once"], f"names {names}")
    batch.delete_namespaced_job("once", ctx.ns, propagation_policy="Background")


@check("rbac: Role, RoleBinding, ClusterRole")
def _role(ctx: Context) -> None:
    rbac = client.RbacAuthorizationV1Api(ctx.api)
    rule = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}
    rbac.create_namespaced_role(ctx.ns, {"metadata": {"name": "reader"}, "rules": [rule]})
    rbac.create_namespaced_role_binding(
        ctx.ns,
        {
            "metadata": {"name": "reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ctx.ns}],
        },
    )
    binding = rbac.read_namespaced_role_binding("reader", ctx.ns)
    expect(binding.role_ref.name == "reader", f"roleRef {binding.role_ref}")
    name = f"{ctx.ns}-viewer"
    rbac.create_cluster_role({"metadata": {"name": name}, "rules": []})
    names = {r.metadata.name for r in rbac.list_cluster_role().items}
    expect(name in names, f"{name} not listed")
    rbac.delete_cluster_role(name)


# -- CRDs and custom objects ------------------------------------------------------------------


@check("crd: create with ApiextensionsV1Api and wait for Established")
def _crd(ctx: Context) -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {"size": {"type": "integer"}, "replicas": {"type": "integer"}},
            },
            "status": {
                "type": "object",
                "properties": {"ready": {"type": "boolean"}, "replicas": {"type": "integer"}},
            },
        },
    }
    body = {
        "metadata": {"name": f"{ctx.crd_plural}.{ctx.crd_group}"},
        "spec": {
            "group": ctx.crd_group,
            "scope": "Namespaced",
            "names": {"plural": ctx.crd_plural, "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": ctx.crd_version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                        },
                    },
                }
            ],
        },
    }
    ext = client.ApiextensionsV1Api(ctx.api)
    ext.create_custom_resource_definition(body)

    def established() -> bool:
        crd = ext.read_custom_resource_definition(f"{ctx.crd_plural}.{ctx.crd_group}")
        conditions = crd.status.conditions or [] if crd.status else []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    eventually("Established", established)


def _widget(ctx: Context, name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{ctx.crd_group}/{ctx.crd_version}",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"size": 1},
    }


@check("custom objects: create, get, merge patch, delete")
def _custom_crud(ctx: Context) -> None:
    args = (ctx.crd_group, ctx.crd_version, ctx.ns, ctx.crd_plural)
    ctx.custom.create_namespaced_custom_object(*args, _widget(ctx, "w1"))
    got = ctx.custom.get_namespaced_custom_object(*args, "w1")
    expect(got["spec"] == {"size": 1}, f"spec {got['spec']}")
    patched = ctx.custom.patch_namespaced_custom_object(*args, "w1", {"spec": {"size": 2}})
    expect(patched["spec"]["size"] == 2, f"spec {patched['spec']}")
    ctx.custom.create_namespaced_custom_object(*args, _widget(ctx, "w2"))
    ctx.custom.delete_namespaced_custom_object(*args, "w2")


@check("custom objects: status subresource")
def _custom_status(ctx: Context) -> None:
    args = (ctx.crd_group, ctx.crd_version, ctx.ns, ctx.crd_plural)
    ctx.custom.patch_namespaced_custom_object_status(*args, "w1", {"status": {"ready": True}})
    got = ctx.custom.get_namespaced_custom_object_status(*args, "w1")
    expect(got.get("status") == {"ready": True}, f"status {got.get('status')}")
    # A write to the main resource leaves the status alone.
    ctx.custom.patch_namespaced_custom_object(*args, "w1", {"status": {"ready": False}})
    got = ctx.custom.get_namespaced_custom_object(*args, "w1")
    expect(got["status"] == {"ready": True}, f"status {got['status']}")


@check("custom objects: /scale subresource")
def _custom_scale(ctx: Context) -> None:
    args = (ctx.crd_group, ctx.crd_version, ctx.ns, ctx.crd_plural)
    ctx.custom.patch_namespaced_custom_object_scale(*args, "w1", {"spec": {"replicas": 4}})
    scale = ctx.custom.get_namespaced_custom_object_scale(*args, "w1")
    expect(scale["spec"]["replicas"] == 4, f"scale {scale}")


@check("custom objects: list cluster-wide")
def _custom_list(ctx: Context) -> None:
    listed = ctx.custom.list_cluster_custom_object(ctx.crd_group, ctx.crd_version, ctx.crd_plural)
    names = [i["metadata"]["name"] for i in listed["items"]]
    expect(names == ["w1"], f"names {names}")
    expect(listed["kind"] == "WidgetList", f"kind {listed['kind']}")


# -- watches ----------------------------------------------------------------------------------


@contextlib.contextmanager
def _watch_stream(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Iterator[Any]:
    w = watch.Watch()
    try:
        yield w.stream(fn, *args, **kwargs)
    finally:
        w.stop()


@check("watch: ADDED, MODIFIED, DELETED")
def _watch_events(ctx: Context) -> None:
    rv = ctx.core.list_namespaced_config_map(ctx.ns).metadata.resource_version
    ctx.configmap("watched")
    ctx.core.patch_namespaced_config_map("watched", ctx.ns, {"data": {"z": "1"}})
    ctx.core.delete_namespaced_config_map("watched", ctx.ns)
    seen: list[str] = []
    with _watch_stream(
        ctx.core.list_namespaced_config_map,
        ctx.ns,
        resource_version=rv,
        field_selector="metadata.name=watched",
        timeout_seconds=10,
    ) as stream:
        for event in stream:
            seen.append(event["type"])
            if event["type"] == "DELETED":
                break
    expect(seen == ["ADDED", "MODIFIED", "DELETED"], f"events {seen}")


@check("watch: resume from a resourceVersion")
def _watch_resume(ctx: Context) -> None:
    ctx.configmap("resume-1")
    rv = ctx.core.read_namespaced_config_map("resume-1", ctx.ns).metadata.resource_version
    ctx.configmap("resume-2")
    with _watch_stream(
        ctx.core.list_namespaced_config_map, ctx.ns, resource_version=rv, timeout_seconds=10
    ) as stream:
        first = next(iter(stream))
    expect(
        first["type"] == "ADDED" and first["object"].metadata.name == "resume-2",
        f"first event {first['type']} {first['object'].metadata.name}",
    )


@check("watch: timeout_seconds ends the stream")
def _watch_timeout(ctx: Context) -> None:
    rv = ctx.core.list_namespaced_config_map(ctx.ns).metadata.resource_version
    events = list(
        watch.Watch().stream(
            ctx.core.list_namespaced_config_map, ctx.ns, resource_version=rv, timeout_seconds=1
        )
    )
    expect(events == [], f"{len(events)} events")


@check("watch: custom objects")
def _watch_custom(ctx: Context) -> None:
    args = (ctx.crd_group, ctx.crd_version, ctx.ns, ctx.crd_plural)
    with _watch_stream(
        ctx.custom.list_namespaced_custom_object, *args, timeout_seconds=10
    ) as stream:
        first = next(iter(stream))
    expect(
        first["type"] == "ADDED" and first["object"]["metadata"]["name"] == "w1",
        f"first event {first['type']}",
    )


# -- the dynamic client -----------------------------------------------------------------------


@check("dynamic: discovery of a kind")
def _dynamic_discovery(ctx: Context) -> None:
    dyn = dynamic.DynamicClient(ctx.api)
    resource = dyn.resources.get(api_version="apps/v1", kind="Deployment")
    expect(resource.name == "deployments" and resource.namespaced, f"resource {resource}")
    widget = dyn.resources.get(api_version=f"{ctx.crd_group}/{ctx.crd_version}", kind="Widget")
    expect(widget.name == ctx.crd_plural, f"widget {widget}")


@check("dynamic: create and get")
def _dynamic_create(ctx: Context) -> None:
    dyn = dynamic.DynamicClient(ctx.api)
    cms = dyn.resources.get(api_version="v1", kind="ConfigMap")
    cms.create(body={"metadata": {"name": "dyn"}, "data": {"k": "v"}}, namespace=ctx.ns)
    got = cms.get(name="dyn", namespace=ctx.ns)
    expect(got.data.k == "v", f"data {got.data}")


@check("dynamic: patch")
def _dynamic_patch(ctx: Context) -> None:
    dyn = dynamic.DynamicClient(ctx.api)
    cms = dyn.resources.get(api_version="v1", kind="ConfigMap")
    patched = cms.patch(
        name="dyn",
        namespace=ctx.ns,
        body={"data": {"k": "w"}},
        content_type="application/merge-patch+json",
    )
    expect(patched.data.k == "w", f"data {patched.data}")


@check("dynamic: server-side apply and field managers")
def _dynamic_apply(ctx: Context) -> None:
    dyn = dynamic.DynamicClient(ctx.api)
    cms = dyn.resources.get(api_version="v1", kind="ConfigMap")
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}}
    cms.server_side_apply(body={**body, "data": {"a": "1"}}, namespace=ctx.ns, field_manager="one")
    applied = cms.server_side_apply(
        body={**body, "data": {"b": "2"}}, namespace=ctx.ns, field_manager="two"
    )
    expect(dict(applied.data) == {"a": "1", "b": "2"}, f"data {applied.data}")
    managers = {m.manager for m in applied.metadata.managedFields}
    expect(managers == {"one", "two"}, f"managers {managers}")
    exc = api_error(
        lambda: cms.server_side_apply(
            body={**body, "data": {"a": "9"}}, namespace=ctx.ns, field_manager="two"
        )
    )
    expect(exc.status == 409, f"status {exc.status}")


# -- errors -----------------------------------------------------------------------------------


@check("errors: 404 NotFound")
def _not_found(ctx: Context) -> None:
    exc = api_error(lambda: ctx.core.read_namespaced_config_map("absent", ctx.ns))
    expect(exc.status == 404 and exc.reason == "Not Found", f"{exc.status} {exc.reason}")
    expect('"reason":"NotFound"' in (exc.body or "").replace(" ", ""), f"body {exc.body}")


@check("errors: 409 AlreadyExists")
def _already_exists(ctx: Context) -> None:
    exc = api_error(lambda: ctx.configmap("cm-read"))
    expect(exc.status == 409, f"status {exc.status}")
    expect("AlreadyExists" in (exc.body or ""), f"body {exc.body}")


@check("errors: 422 Invalid")
def _invalid(ctx: Context) -> None:
    exc = api_error(lambda: ctx.configmap("Not_A_Name"))
    expect(exc.status == 422, f"status {exc.status}")
    expect("Invalid" in (exc.body or ""), f"body {exc.body}")


@check("errors: 422 for a Pod without containers")
def _invalid_pod(ctx: Context) -> None:
    # The client's own models refuse a container without a name before sending it.
    body = {"metadata": {"name": "bad"}, "spec": {"containers": []}}
    exc = api_error(lambda: ctx.core.create_namespaced_pod(ctx.ns, body))
    expect(exc.status == 422, f"status {exc.status}")
    expect("spec.containers: Required value" in (exc.body or ""), f"body {exc.body}")


# -- tables and pagination --------------------------------------------------------------------


@check("tables: a list as meta.k8s.io/v1 Table")
def _table(ctx: Context) -> None:
    assert ctx.api is not None
    response = ctx.api.call_api(
        *ctx.api.param_serialize(
            "GET",
            f"/api/v1/namespaces/{ctx.ns}/configmaps",
            header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
            auth_settings=["BearerToken"],
        )
    )
    response.read()
    table = json.loads(response.data)
    expect(table.get("kind") == "Table", f"kind {table.get('kind')}")
    columns = [c["name"] for c in table["columnDefinitions"]]
    expect(columns[:1] == ["Name"] and table["rows"], f"columns {columns}")


@check("pagination: limit and continue")
def _pagination(ctx: Context) -> None:
    for i in range(5):
        ctx.configmap(f"page-{i}", {"page": "yes"})
    names: list[str] = []
    token: str | None = None
    pages = 0
    while True:
        listed = ctx.core.list_namespaced_config_map(
            ctx.ns, label_selector="page", limit=2, _continue=token
        )
        pages += 1
        names += [c.metadata.name for c in listed.items]
        token = listed.metadata._continue
        if not token:
            break
    expect(pages == 3 and sorted(names) == [f"page-{i}" for i in range(5)], f"{pages} {names}")


@check("dry run: create with dryRun=All stores nothing")
def _dry_run(ctx: Context) -> None:
    body = {"metadata": {"name": "dry"}, "data": {"a": "1"}}
    ctx.core.create_namespaced_config_map(ctx.ns, body, dry_run="All")
    exc = api_error(lambda: ctx.core.read_namespaced_config_map("dry", ctx.ns))
    expect(exc.status == 404, f"status {exc.status}")


@check("server-side apply: typed client, apply-patch+yaml")
def _typed_apply(ctx: Context) -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "typed"}, "data": {}}
    cm = ctx.core.patch_namespaced_config_map(
        "typed",
        ctx.ns,
        {**body, "data": {"x": "1"}},
        field_manager="typed",
        _content_type="application/apply-patch+yaml",
    )
    expect(cm.data == {"x": "1"}, f"data {cm.data}")
    expect(cm.metadata.managed_fields[0].operation == "Apply", "operation")


# -- auth, tokens, leases, events -------------------------------------------------------------


@check("auth: SelfSubjectAccessReview")
def _ssar(ctx: Context) -> None:
    review = client.AuthorizationV1Api(ctx.api).create_self_subject_access_review(
        {"spec": {"resourceAttributes": {"verb": "list", "resource": "pods"}}}
    )
    expect(review.status.allowed is True, f"status {review.status}")


@check("auth: SelfSubjectReview")
def _ssr(ctx: Context) -> None:
    review = client.AuthenticationV1Api(ctx.api).create_self_subject_review({})
    user = review.status.user_info
    expect("system:masters" in (user.groups or []), f"user {user}")


@check("auth: TokenRequest for a ServiceAccount")
def _token_request(ctx: Context) -> None:
    token = ctx.core.create_namespaced_service_account_token(
        "default", ctx.ns, {"spec": {"expirationSeconds": 3600}}
    )
    expect(token.status.token and token.status.expiration_timestamp, f"status {token.status}")


@check("leases: create, renew, list (coordination.k8s.io)")
def _lease(ctx: Context) -> None:
    coordination = client.CoordinationV1Api(ctx.api)
    coordination.create_namespaced_lease(
        ctx.ns, {"metadata": {"name": "leader"}, "spec": {"holderIdentity": "a"}}
    )
    renewed = coordination.patch_namespaced_lease(
        "leader", ctx.ns, {"spec": {"renewTime": "2026-01-01T00:00:00.000000Z"}}
    )
    expect(renewed.spec.holder_identity == "a" and renewed.spec.renew_time, f"{renewed.spec}")
    names = [x.metadata.name for x in coordination.list_namespaced_lease(ctx.ns).items]
    expect(names == ["leader"], f"names {names}")


@check("events: events.k8s.io/v1 create and list")
def _events(ctx: Context) -> None:
    events = client.EventsV1Api(ctx.api)
    events.create_namespaced_event(
        ctx.ns,
        {
            "metadata": {"name": "e1"},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "reportingController": "checks.example.com/official",
            "reportingInstance": "checks",
            "action": "Check",
            "reason": "Checked",
            "type": "Normal",
            "regarding": {"kind": "ConfigMap", "name": "cm-read", "namespace": ctx.ns},
        },
    )
    listed = events.list_namespaced_event(ctx.ns).items
    expect([e.reason for e in listed] == ["Checked"], f"{len(listed)} events")


@check("namespace: delete")
def _namespace_delete(ctx: Context) -> None:
    ctx.core.delete_namespace(ctx.ns)

    def gone() -> bool:
        try:
            ctx.core.read_namespace(ctx.ns)
        except ApiException as exc:
            return exc.status == 404
        return False

    eventually("the namespace is gone", gone, within=30)


# -- running ----------------------------------------------------------------------------------


@contextlib.contextmanager
def seeded_simulator(workdir: Path) -> Iterator[Path]:
    """``gpustack-operator sim --serve`` in a child process, seeded as a fresh kind cluster
    (``hack/kindlike.py``); yields its kubeconfig."""
    kubeconfig = workdir / "kubeconfig.yaml"
    kubectl = shutil.which("kubectl", path=str(Path(sys.executable).parent))
    if kubectl is None:
        raise SystemExit("kubectl not found next to this Python: run `make install-dev`")
    command = [sys.executable, "-m", "gpustack_operator", "sim", "--serve"]
    with (workdir / "sim.log").open("w") as log, kindlike.simulator(command, kubeconfig, log):
        kindlike.seed(kindlike.kubectl_runner(Path(kubectl), kubeconfig))
        yield kubeconfig


def run_e2e(source: Path, kubeconfig: Path) -> int:
    """The client's own e2e tests from the checkout *source*, against the simulator."""
    package = source / "kubernetes"
    tests = package / "e2e_test"
    if not tests.is_dir():
        raise SystemExit(f"{tests} is missing: give a checkout of kubernetes-client/python")
    command = [
        sys.executable, "-P", "-c", E2E_RUNNER, str(package),
        "-q", "-rfEs", "-p", "no:cacheprovider", "-o", "addopts=", "--rootdir", str(source),
        "--timeout", str(E2E_TEST_SECONDS), str(tests),
    ]  # fmt: skip
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    # Their YAML fixtures are named relative to the checkout.
    return subprocess.run(command, env=env, cwd=source, check=False).returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-v", action="store_true", help="print the traceback of each failure")
    parser.add_argument(
        "--e2e", type=Path, metavar="SRC", help="run the e2e tests of this client checkout"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, seeded_simulator(Path(tmp)) as kubeconfig:
        if args.e2e is not None:
            return run_e2e(args.e2e.resolve(), kubeconfig)
        ctx = Context(kubeconfig)
        failed = 0
        for name, fn in CHECKS:
            try:
                fn(ctx)
            except Exception as exc:  # every failure is reported, none stops the run
                failed += 1
                reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
                print(f"FAIL {name}: {reason}", flush=True)
                if args.v:
                    traceback.print_exc()
            else:
                print(f"PASS {name}", flush=True)
        print(f"{len(CHECKS) - failed} of {len(CHECKS)} checks pass")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
