"""What the real cluster's missing node agents would do, through the real API.

The tier runs no kubelet and no nfd-master (docs/realcluster.md, "What is not real"). This
stand-in does their API side, and nothing else, so that what Kueue, kube-scheduler and
kube-controller-manager decide is theirs:

- **registration and heartbeats**: a Node of a cluster file is created as a kubelet registers
  it (Ready, capacity and allocatable, the cards of its ``sim.gpustack.ai/devices`` annotation
  in allocatable as the device plugin would add them); while a Node is *alive* its Lease in
  ``kube-node-lease`` is renewed and its Ready heartbeat posted, so kube-controller-manager's
  node lifecycle controller treats it as a kubelet that reports. A Node a test stops keeping
  alive goes Unknown and is tainted by that controller, as on a real cluster.
- **NFD's merge**: the labels of every NodeFeature naming a Node land on it, and labels it put
  there earlier that no NodeFeature carries any more are removed (as nfd-master does; the
  rules are the simulator's NFD stand-in's, which it imports).
- **Pods**: a Pod bound to an alive Node runs: Running at once, and a Job's Pod Succeeded after
  ``run_seconds`` (the template annotation ``realcluster.gpustack.ai/run-seconds`` sets it per
  Job); a terminating Pod on a Node is removed, as the kubelet confirms a deletion.
"""

from __future__ import annotations

import contextlib
import datetime
import ssl
import time
from collections.abc import Iterable, Mapping
from typing import Any

import anyio
import httpx
import structlog

from gpustack_operator.domain.manufacturers import Manufacturer
from gpustack_operator.domain.node.simdevices import SIM_DEVICES_ANNOTATION
from gpustack_sim.standins.jobrunner import RUN_SECONDS_ANNOTATION
from gpustack_sim.standins.kubelet import card_resources, kubelet_defaults
from gpustack_sim.standins.nfdmaster import (
    DEFAULT_LABEL_NAMESPACES,
    NODE_NAME_LABEL,
    desired_labels,
    merge_node_labels,
)

log = structlog.get_logger(__name__)

LABEL_NAMESPACES = tuple(p.rstrip("/") for p in DEFAULT_LABEL_NAMESPACES)
"""The label namespaces nfd-master writes, as the simulator's NFD stand-in has them."""
NODE_LEASE_NAMESPACE = "kube-node-lease"
LEASE_SECONDS = 40
REGISTER_CONCURRENCY = 16
"""Registrations and label merges in flight at once (within httpx's pool of 100)."""


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class NodeAgents:
    """The kubelets' and nfd-master's API side for the Nodes of a test (module docstring)."""

    def __init__(
        self,
        server: str,
        tls: ssl.SSLContext,
        manufacturers: Mapping[str, Manufacturer],
        *,
        run_seconds: float = 3.0,
        heartbeat: float = 5.0,
        period: float = 0.3,
        pods_and_features: bool = True,
    ) -> None:
        self.server = server
        self._http = httpx.AsyncClient(
            base_url=server,
            verify=tls,
            timeout=20,
        )
        self.manufacturers = manufacturers
        self.run_seconds = run_seconds
        self.heartbeat = heartbeat
        self.period = period
        self.pods_and_features = pods_and_features
        """Also run Pods and merge NodeFeature labels (off on the simulated server, whose
        scheduler, Job runner and NFD-master stand-ins do both)."""
        self.alive: set[str] = set()
        self._started: dict[str, float] = {}
        """pod uid -> when this stand-in started it (monotonic)."""
        self.succeeded: list[tuple[str, str, str]] = []
        """(namespace, pod, node) of every Pod this stand-in ended Succeeded, in order: what
        a test reads when the Pod itself is gone by the time it looks."""

    async def aclose(self) -> None:
        await self._http.aclose()

    # --- requests ---------------------------------------------------------------------------

    async def _request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> httpx.Response:
        return await self._http.request(
            method, path, json=body, headers={"Content-Type": content_type}
        )

    async def _patch(self, path: str, patch: Mapping[str, Any], *, strategic: bool = False) -> None:
        kind = "strategic-merge-patch" if strategic else "merge-patch"
        response = await self._request("PATCH", path, patch, f"application/{kind}+json")
        if response.status_code not in (200, 201, 404, 409):
            log.warning(
                "node agents: patch refused",
                path=path,
                status=response.status_code,
                body=response.text[:300],
            )

    async def _items(self, path: str) -> list[dict[str, Any]]:
        response = await self._http.get(path)
        if response.status_code == 404:
            return []
        response.raise_for_status()
        return list(response.json().get("items") or [])

    # --- registration -----------------------------------------------------------------------

    async def register(
        self,
        nodes: Iterable[Mapping[str, Any]],
        *,
        features: Iterable[Mapping[str, Any]] = (),
        keep_alive: bool = True,
    ) -> None:
        """Create each Node as its kubelet registers it, and keep it alive.

        One POST per Node carries its status (kube-apiserver keeps a created Node's status, as
        a kubelet's registration relies on) and the labels nfd-master would merge from the
        NodeFeatures in *features* that name it: the end state of a create, a status patch and
        NFD's merge in one round trip. ``REGISTER_CONCURRENCY`` Nodes are in flight at once
        over the client's connection pool. ``keep_alive=False`` registers Nodes that no Lease
        or heartbeat follows (the worker benchmark, where nothing watches them).
        """
        by_node: dict[str, list[Mapping[str, Any]]] = {}
        for feature in features:
            node = ((feature.get("metadata") or {}).get("labels") or {}).get(NODE_NAME_LABEL)
            if node:
                by_node.setdefault(str(node), []).append(feature)
        limit = anyio.Semaphore(REGISTER_CONCURRENCY)

        async def one(node: Mapping[str, Any]) -> None:
            name = str((node.get("metadata") or {})["name"])
            async with limit:
                await self._create_node(node, by_node.get(name, []))
            if keep_alive:
                self.alive.add(name)

        async with anyio.create_task_group() as tg:
            for node in nodes:
                tg.start_soon(one, node)
        if keep_alive:
            await self._heartbeats()

    async def _create_node(
        self, node: Mapping[str, Any], features: list[Mapping[str, Any]]
    ) -> None:
        meta = node.get("metadata") or {}
        name = str(meta["name"])
        status = self._status(node)
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {k: v for k, v in meta.items() if k in ("name", "labels", "annotations")},
            "spec": dict(node.get("spec") or {}),
            "status": status,
        }
        if features and self.pods_and_features:
            body = merge_node_labels(body, desired_labels(features, LABEL_NAMESPACES)) or body
        response = await self._request("POST", "/api/v1/nodes", body)
        if response.status_code not in (200, 201, 409):
            raise RuntimeError(f"creating Node {name}: {response.status_code} {response.text}")
        created = (response.json().get("status") or {}) if response.status_code != 409 else {}
        if created.get("allocatable") != status["allocatable"]:
            # The Node was there already, or a server dropped the status: the kubelet's patch.
            await self._patch(f"/api/v1/nodes/{name}/status", {"status": status})

    def _status(self, node: Mapping[str, Any]) -> dict[str, Any]:
        status = {
            k: dict(v) if isinstance(v, Mapping) else v
            for k, v in (node.get("status") or {}).items()
            if k in ("capacity", "allocatable", "addresses", "nodeInfo")
        }
        status.setdefault("capacity", {}).setdefault("pods", "110")
        status.setdefault("allocatable", {}).setdefault("pods", "110")
        annotation = ((node.get("metadata") or {}).get("annotations") or {}).get(
            SIM_DEVICES_ANNOTATION
        )
        for resource, count in card_resources(
            annotation, self.manufacturers, with_memory=False
        ).items():
            status["capacity"].setdefault(resource, count)
            status["allocatable"].setdefault(resource, count)
        kubelet_defaults(status, now_rfc3339())
        return status

    # --- the loops --------------------------------------------------------------------------

    async def run(self) -> None:
        """Heartbeats, NFD's merge and Pods, until cancelled."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._every, self.heartbeat, self._heartbeats)
            if self.pods_and_features:
                tg.start_soon(self._every, self.period, self._merge_node_features)
                tg.start_soon(self._every, self.period, self._run_pods)

    @staticmethod
    async def _every(seconds: float, step: Any) -> None:
        while True:
            try:
                await step()
            except httpx.HTTPError as exc:  # the server restarts, a race, throttling: retry
                log.debug("node agents: step failed; retrying", step=step.__name__, error=str(exc))
            except Exception as exc:  # a defect here must show, but not stop the other loops
                log.warning("node agents: step failed", step=step.__name__, error=repr(exc))
            await anyio.sleep(seconds)

    async def _heartbeats(self) -> None:
        for name in sorted(self.alive):
            lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{NODE_LEASE_NAMESPACE}/leases"
            renewed = {
                "spec": {
                    "holderIdentity": name,
                    "leaseDurationSeconds": LEASE_SECONDS,
                    "renewTime": now_micro(),
                }
            }
            response = await self._request("GET", f"{lease_path}/{name}")
            if response.status_code == 404:
                await self._request(
                    "POST",
                    lease_path,
                    {
                        "apiVersion": "coordination.k8s.io/v1",
                        "kind": "Lease",
                        "metadata": {"name": name, "namespace": NODE_LEASE_NAMESPACE},
                        **renewed,
                    },
                )
            else:
                await self._patch(f"{lease_path}/{name}", renewed)
            await self.post_ready(name, True)

    async def post_ready(self, name: str, ready: bool) -> None:
        """The kubelet's Ready condition (NotReady as a kubelet reports a failing runtime)."""
        now = now_rfc3339()
        condition = {
            "type": "Ready",
            "status": "True" if ready else "False",
            "reason": "KubeletReady" if ready else "KubeletNotReady",
            "message": "kubelet is posting ready status" if ready else "container runtime is down",
            "lastHeartbeatTime": now,
        }
        node = await self._http.get(f"/api/v1/nodes/{name}")
        if node.status_code != 200:
            return
        for current in (node.json().get("status") or {}).get("conditions") or []:
            if current.get("type") == "Ready" and current.get("status") != condition["status"]:
                condition["lastTransitionTime"] = now
        await self._patch(
            f"/api/v1/nodes/{name}/status", {"status": {"conditions": [condition]}}, strategic=True
        )

    async def _merge_node_features(self) -> None:
        features = await self._items("/apis/nfd.k8s-sigs.io/v1alpha1/nodefeatures")
        by_node: dict[str, list[dict[str, Any]]] = {}
        for feature in features:
            node = ((feature.get("metadata") or {}).get("labels") or {}).get(NODE_NAME_LABEL)
            if node:
                by_node.setdefault(str(node), []).append(feature)
        changed: list[tuple[str, dict[str, Any]]] = []
        for node in await self._items("/api/v1/nodes"):
            name = node["metadata"]["name"]
            wanted = desired_labels(by_node.get(name, []), LABEL_NAMESPACES)
            merged = merge_node_labels(node, wanted)
            if merged is not None:
                changed.append((name, merged))
        limit = anyio.Semaphore(REGISTER_CONCURRENCY)

        async def put(name: str, merged: dict[str, Any]) -> None:
            async with limit:
                response = await self._request("PUT", f"/api/v1/nodes/{name}", merged)
            if response.status_code not in (200, 409, 404):
                log.warning("node agents: labels refused", node=name, body=response.text[:300])

        async with anyio.create_task_group() as tg:
            for name, merged in changed:
                tg.start_soon(put, name, merged)

    async def _run_pods(self) -> None:
        for pod in await self._items("/api/v1/pods"):
            meta, spec = pod["metadata"], pod.get("spec") or {}
            node = spec.get("nodeName")
            if not node:
                continue
            path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
            if meta.get("deletionTimestamp"):
                # The kubelet confirms a deletion once the containers stopped.
                await self._request("DELETE", path, {"gracePeriodSeconds": 0})
                self._started.pop(meta["uid"], None)
                continue
            if node not in self.alive:
                continue
            phase = (pod.get("status") or {}).get("phase")
            if phase == "Pending":
                await self._patch(f"{path}/status", {"status": self._running(pod)})
                self._started[meta["uid"]] = time.monotonic()
            elif phase == "Running" and self._finished(pod):
                await self._patch(f"{path}/status", {"status": self._succeeded(pod)})
                self._started.pop(meta["uid"], None)
                self.succeeded.append((meta["namespace"], meta["name"], node))

    def _finished(self, pod: Mapping[str, Any]) -> bool:
        meta = pod["metadata"]
        if not any(o.get("kind") == "Job" for o in meta.get("ownerReferences") or []):
            return False  # only a Job's Pods end; a DaemonSet's or a bare one's keep running
        started = self._started.setdefault(meta["uid"], time.monotonic())
        seconds = self.run_seconds
        given = (meta.get("annotations") or {}).get(RUN_SECONDS_ANNOTATION)
        with contextlib.suppress(ValueError, TypeError):
            seconds = float(given) if given is not None else seconds
        return time.monotonic() - started >= seconds

    @staticmethod
    def _containers(pod: Mapping[str, Any], state: Mapping[str, Any], ready: bool) -> list[Any]:
        return [
            {
                "name": c["name"],
                "image": c.get("image", ""),
                "imageID": "",
                "containerID": f"realcluster://{pod['metadata']['uid']}-{c['name']}",
                "ready": ready,
                "started": ready,
                "restartCount": 0,
                "state": dict(state),
            }
            for c in (pod.get("spec") or {}).get("containers") or []
        ]

    def _running(self, pod: Mapping[str, Any]) -> dict[str, Any]:
        now = now_rfc3339()
        conditions = [
            {"type": kind, "status": "True", "lastTransitionTime": now}
            for kind in (
                "PodReadyToStartContainers",
                "Initialized",
                "Ready",
                "ContainersReady",
                "PodScheduled",
            )
        ]
        return {
            "phase": "Running",
            "startTime": now,
            "hostIP": "127.0.0.1",
            "podIP": "127.0.0.1",
            "conditions": conditions,
            "containerStatuses": self._containers(pod, {"running": {"startedAt": now}}, True),
        }

    def _succeeded(self, pod: Mapping[str, Any]) -> dict[str, Any]:
        now = now_rfc3339()
        started = (pod.get("status") or {}).get("startTime") or now
        conditions = [
            {"type": kind, "status": "False", "reason": "PodCompleted", "lastTransitionTime": now}
            for kind in ("Ready", "ContainersReady")
        ]
        conditions += [
            {"type": kind, "status": "True", "lastTransitionTime": now}
            for kind in ("Initialized", "PodScheduled")
        ]
        terminated = {
            "terminated": {
                "exitCode": 0,
                "reason": "Completed",
                "startedAt": started,
                "finishedAt": now,
            }
        }
        return {
            "phase": "Succeeded",
            "conditions": conditions,
            "containerStatuses": self._containers(pod, terminated, False),
        }
