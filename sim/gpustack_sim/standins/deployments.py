"""Deployments that roll out: the Deployment and ReplicaSet controllers' stand-ins for
``sim --serve`` (docs/simulator.md, "Deployment and ReplicaSet stand-in").

On a kind cluster kube-controller-manager gives every Deployment one ReplicaSet per pod
template and every ReplicaSet its Pods; ``kubectl rollout status``, ``kubectl get pods -l``
and clients' ``deployment.ready()`` wait for that. Two stand-ins do the API side of both:

- :class:`ReplicaSetStandIn` keeps ``spec.replicas`` Pods owned by each ReplicaSet (creating
  them from the template, deleting the newest first) and writes the ReplicaSet's status;
- :class:`DeploymentStandIn` keeps one ReplicaSet per distinct template, named
  ``<deployment>-<pod-template-hash>``, scales the current one to ``spec.replicas`` and the
  older ones to 0 at once (no surge or unavailability limits), and writes the Deployment's
  status, conditions and revision.

The Pod lifecycle stand-in binds and starts the Pods; the garbage collector removes
ReplicaSets and Pods whose owner is gone. Like the other stand-ins they write through the
store.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from gpustack_operator.domain.nodeview import labels_of, metadata
from gpustack_sim.apiserver.errors import ApiError
from gpustack_sim.apiserver.store import Key, key_of, now_rfc3339
from gpustack_sim.standins.standin import KeyedStandIn

if TYPE_CHECKING:
    from gpustack_sim.apiserver.server import SimServer

__all__ = ["DeploymentStandIn", "ReplicaSetStandIn", "pod_template_hash"]

APPS: Final = "apps/v1"
HASH_LABEL: Final = "pod-template-hash"
REVISION: Final = "deployment.kubernetes.io/revision"
DESIRED_REPLICAS: Final = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS: Final = "deployment.kubernetes.io/max-replicas"
DEFAULT_HISTORY: Final = 10
# k8s.io/apimachinery pkg/util/rand: the alphabet SafeEncodeString maps each character to.
_SAFE_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"
_FNV_OFFSET: Final = 0x811C9DC5
_FNV_PRIME: Final = 0x01000193


def pod_template_hash(template: Mapping[str, Any], collisions: int = 0) -> str:
    """The ``pod-template-hash`` of *template*: FNV-1a (32 bit) of the template without that
    label, plus the collision count, written in the safe alphabet (docs/simulator.md,
    "Deployment and ReplicaSet stand-in")."""
    data = json.dumps(_without_hash(template), sort_keys=True, separators=(",", ":")).encode()
    if collisions:
        data += str(collisions).encode()
    value = _FNV_OFFSET
    for byte in data:
        value = ((value ^ byte) * _FNV_PRIME) & 0xFFFFFFFF
    return "".join(_SAFE_ALPHABET[ord(c) % len(_SAFE_ALPHABET)] for c in str(value))


def _without_hash(template: Mapping[str, Any]) -> dict[str, Any]:
    meta = dict(template.get("metadata") or {})
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k != HASH_LABEL}
    if labels:
        meta["labels"] = labels
    else:
        meta.pop("labels", None)
    out = dict(template)
    out["metadata"] = meta
    return out


def _controller(obj: Mapping[str, Any], kind: str) -> str | None:
    """The name of *obj*'s controlling owner when it is a *kind*, else None."""
    for ref in metadata(obj).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == kind:
            return str(ref.get("name") or "") or None
    return None


def _owned_by(objs: list[dict[str, Any]], owner: Mapping[str, Any]) -> list[dict[str, Any]]:
    uid = metadata(owner).get("uid")
    return [
        o
        for o in objs
        if any(
            r.get("controller") and r.get("uid") == uid
            for r in metadata(o).get("ownerReferences") or []
        )
    ]


def _owner_reference(owner: Mapping[str, Any]) -> dict[str, Any]:
    meta = metadata(owner)
    return {
        "apiVersion": owner.get("apiVersion", APPS),
        "kind": owner.get("kind", ""),
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _replicas(obj: Mapping[str, Any]) -> int:
    value = (obj.get("spec") or {}).get("replicas")
    return 1 if value is None else int(value)


def _is_ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _active(pod: Mapping[str, Any]) -> bool:
    """Counted by its ReplicaSet: not being deleted and not finished."""
    if metadata(pod).get("deletionTimestamp"):
        return False
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


class ReplicaSetStandIn(KeyedStandIn[Key]):
    """Keeps each ReplicaSet's Pods at ``spec.replicas`` and writes its status."""

    name = "sim-replicasets"
    noun = "replicaset"

    def __init__(self, sim: SimServer) -> None:
        super().__init__(sim)
        # The order this stand-in created Pods in: creationTimestamp counts whole seconds.
        self._created: dict[Key, int] = {}
        self._count = 0

    def initial_keys(self) -> list[Key]:
        return [key_of(rs) for rs in self.sim.store.list(APPS, "ReplicaSet")]

    def on_event(self, event_type: str, obj: dict[str, Any]) -> None:
        if obj.get("apiVersion") == APPS and obj.get("kind") == "ReplicaSet":
            if event_type == "DELETED":
                self.forget(key_of(obj))
            else:
                self.mark(key_of(obj))
        elif obj.get("apiVersion") == "v1" and obj.get("kind") == "Pod":
            if event_type == "DELETED":
                self._created.pop(key_of(obj), None)
            owner = _controller(obj, "ReplicaSet")
            if owner:
                self.mark((key_of(obj)[0], owner))

    def reconcile(self, key: Key) -> None:
        """Create or delete Pods of the ReplicaSet at *key*, then write its status."""
        namespace, name = key
        rs = self.sim.store.get(APPS, "ReplicaSet", name, namespace)
        if rs is None or metadata(rs).get("deletionTimestamp"):
            return
        pods = [p for p in _owned_by(self.sim.store.list("v1", "Pod", namespace), rs) if _active(p)]
        wanted = _replicas(rs)
        for _ in range(wanted - len(pods)):
            pod = self.sim.store.create(self._pod(rs))
            self._count += 1
            self._created[key_of(pod)] = self._count
            pods.append(pod)
        if len(pods) > wanted:
            pods.sort(key=self._age, reverse=True)
            for pod in pods[: len(pods) - wanted]:
                self.sim.store.delete("v1", "Pod", metadata(pod)["name"], namespace)
            pods = pods[len(pods) - wanted :]
        self._write_status(rs, pods)

    def _age(self, pod: Mapping[str, Any]) -> tuple[str, int]:
        """Sorts Pods oldest first: by creation time, then by the order they were made in."""
        return (
            str(metadata(pod).get("creationTimestamp") or ""),
            self._created.get(key_of(pod), 0),
        )

    def _pod(self, rs: Mapping[str, Any]) -> dict[str, Any]:
        template = (rs.get("spec") or {}).get("template") or {}
        template_meta = template.get("metadata") or {}
        meta: dict[str, Any] = {
            "generateName": f"{metadata(rs)['name']}-",
            "namespace": metadata(rs).get("namespace"),
            "ownerReferences": [_owner_reference(rs)],
        }
        for field in ("labels", "annotations", "finalizers"):
            if template_meta.get(field):
                meta[field] = template_meta[field]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": template.get("spec") or {},
        }

    def _write_status(self, rs: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        template_labels = (
            ((rs.get("spec") or {}).get("template") or {}).get("metadata") or {}
        ).get("labels") or {}
        ready = sum(1 for p in pods if _is_ready(p))
        status = dict(rs.get("status") or {})
        status.update(
            replicas=len(pods),
            fullyLabeledReplicas=sum(
                1 for p in pods if all(labels_of(p).get(k) == v for k, v in template_labels.items())
            ),
            readyReplicas=ready,
            availableReplicas=ready,
            observedGeneration=metadata(rs).get("generation", 1),
        )
        if status != rs.get("status"):
            self.sim.store.update_status({**rs, "status": status})


class DeploymentStandIn(KeyedStandIn[Key]):
    """Keeps one ReplicaSet per pod template of each Deployment and writes its status."""

    name = "sim-deployments"
    noun = "deployment"

    def initial_keys(self) -> list[Key]:
        return [key_of(d) for d in self.sim.store.list(APPS, "Deployment")]

    def on_event(self, event_type: str, obj: dict[str, Any]) -> None:
        if obj.get("apiVersion") != APPS:
            return
        if obj.get("kind") == "Deployment":
            if event_type == "DELETED":
                self.forget(key_of(obj))
            else:
                self.mark(key_of(obj))
        elif obj.get("kind") == "ReplicaSet":
            owner = _controller(obj, "Deployment")
            if owner:
                self.mark((key_of(obj)[0], owner))

    def reconcile(self, key: Key) -> None:
        """Make the Deployment at *key* own its current ReplicaSet, scale them, write status."""
        namespace, name = key
        deployment = self.sim.store.get(APPS, "Deployment", name, namespace)
        if deployment is None or metadata(deployment).get("deletionTimestamp"):
            return
        owned = _owned_by(self.sim.store.list(APPS, "ReplicaSet", namespace), deployment)
        template = (deployment.get("spec") or {}).get("template") or {}
        current = next(
            (
                rs
                for rs in owned
                if _without_hash((rs.get("spec") or {}).get("template") or {})
                == _without_hash(template)
            ),
            None,
        )
        created = current is None
        revision = max((_revision(rs) for rs in owned), default=0)
        wanted = _replicas(deployment)
        if current is None:
            current = self._create_replicaset(deployment, revision + 1)
            if current is None:
                return
        else:
            if _revision(current) < revision:  # a rollback: the old template is current again
                current = self._set_replicaset(current, wanted, revision + 1)
            elif _replicas(current) != wanted:
                current = self._set_replicaset(current, wanted, _revision(current))
        old = [rs for rs in owned if metadata(rs).get("uid") != metadata(current).get("uid")]
        for rs in old:
            if _replicas(rs) != 0:
                self._set_replicaset(rs, 0, _revision(rs))
        self._prune_history(deployment, old)
        owned = _owned_by(self.sim.store.list(APPS, "ReplicaSet", namespace), deployment)
        self._write_status(deployment, current, owned, created)

    def _create_replicaset(
        self, deployment: Mapping[str, Any], revision: int
    ) -> dict[str, Any] | None:
        spec = deployment.get("spec") or {}
        template = _without_hash(spec.get("template") or {})
        collisions = int((deployment.get("status") or {}).get("collisionCount") or 0)
        hashed = pod_template_hash(template, collisions)
        labels = {**(template["metadata"].get("labels") or {}), HASH_LABEL: hashed}
        selector = dict(spec.get("selector") or {})
        selector["matchLabels"] = {**(selector.get("matchLabels") or {}), HASH_LABEL: hashed}
        replicas = _replicas(deployment)
        meta = metadata(deployment)
        body = {
            "apiVersion": APPS,
            "kind": "ReplicaSet",
            "metadata": {
                "name": f"{meta['name']}-{hashed}",
                "namespace": meta.get("namespace"),
                "labels": labels,
                "annotations": _annotations(replicas, revision),
                "ownerReferences": [_owner_reference(deployment)],
            },
            "spec": {
                "replicas": replicas,
                "minReadySeconds": int(spec.get("minReadySeconds") or 0),
                "selector": selector,
                "template": {**template, "metadata": {**template["metadata"], "labels": labels}},
            },
        }
        try:
            return self.sim.store.create(body)
        except ApiError as exc:
            if exc.code != 409:
                raise
        # the name is taken by a ReplicaSet of another template: hash again with one more
        # collision, as the Deployment controller does through status.collisionCount
        status = {**(deployment.get("status") or {}), "collisionCount": collisions + 1}
        self.sim.store.update_status({**deployment, "status": status})
        return None

    def _set_replicaset(self, rs: dict[str, Any], replicas: int, revision: int) -> dict[str, Any]:
        meta = dict(metadata(rs))
        meta["annotations"] = {
            **(meta.get("annotations") or {}),
            **_annotations(replicas, revision),
        }
        return self.sim.store.update(
            {**rs, "metadata": meta, "spec": {**rs["spec"], "replicas": replicas}}
        )

    def _prune_history(self, deployment: Mapping[str, Any], old: list[dict[str, Any]]) -> None:
        """Delete the oldest scaled-down ReplicaSets beyond ``spec.revisionHistoryLimit``."""
        limit = (deployment.get("spec") or {}).get("revisionHistoryLimit")
        limit = DEFAULT_HISTORY if limit is None else int(limit)
        idle = sorted(
            (
                rs
                for rs in old
                if (rs.get("status") or {}).get("replicas", 0) == 0 and _replicas(rs) == 0
            ),
            key=_revision,
        )
        for rs in idle[: max(len(idle) - limit, 0)]:
            self.sim.store.delete(
                APPS, "ReplicaSet", metadata(rs)["name"], metadata(rs).get("namespace")
            )

    def _write_status(
        self,
        deployment: dict[str, Any],
        current: Mapping[str, Any],
        owned: list[dict[str, Any]],
        created: bool,
    ) -> None:
        spec = deployment.get("spec") or {}
        wanted = _replicas(deployment)

        def total(field: str, sets: list[Any]) -> int:
            return sum(int((rs.get("status") or {}).get(field) or 0) for rs in sets)

        available = total("availableReplicas", owned)
        updated = total("replicas", [current])
        generation = metadata(deployment).get("generation", 1)
        status: dict[str, Any] = {
            k: v for k, v in (deployment.get("status") or {}).items() if k == "collisionCount"
        }
        status.update(
            observedGeneration=generation,
            replicas=total("replicas", owned),
            updatedReplicas=updated,
            readyReplicas=total("readyReplicas", owned),
            availableReplicas=available,
        )
        unavailable = sum(_replicas(rs) for rs in owned) - available
        if unavailable > 0:
            status["unavailableReplicas"] = unavailable
        rs_name = metadata(current).get("name")
        minimum = wanted - _max_unavailable(spec, wanted)
        done = updated == wanted and status["replicas"] == wanted and available >= wanted
        previous = {
            c.get("type"): c for c in (deployment.get("status") or {}).get("conditions") or []
        }
        if done:
            reason, message = (
                "NewReplicaSetAvailable",
                f'ReplicaSet "{rs_name}" has successfully progressed.',
            )
        elif created:
            reason, message = "NewReplicaSetCreated", f'Created new replica set "{rs_name}"'
        else:
            reason, message = "ReplicaSetUpdated", f'ReplicaSet "{rs_name}" is progressing.'
        enough = available >= minimum
        ours = {
            "Available": _condition(
                previous,
                "Available",
                enough,
                "MinimumReplicasAvailable" if enough else "MinimumReplicasUnavailable",
                "Deployment has minimum availability."
                if enough
                else "Deployment does not have minimum availability.",
            ),
            "Progressing": _condition(previous, "Progressing", True, reason, message),
        }
        # conditions of other types (written by others) are kept, in place, as the controller
        # replaces only its own
        kept = [ours.pop(c.get("type"), c) for c in previous.values()]
        status["conditions"] = [*kept, *ours.values()]
        meta = dict(metadata(deployment))
        revision = str(_revision(current))
        if (meta.get("annotations") or {}).get(REVISION) != revision:
            meta["annotations"] = {**(meta.get("annotations") or {}), REVISION: revision}
            deployment = self.sim.store.update({**deployment, "metadata": meta})
        if status == deployment.get("status"):
            return
        self.sim.store.update_status({**deployment, "status": status})


def _annotations(replicas: int, revision: int) -> dict[str, str]:
    return {
        DESIRED_REPLICAS: str(replicas),
        MAX_REPLICAS: str(replicas),
        REVISION: str(revision),
    }


def _revision(rs: Mapping[str, Any]) -> int:
    try:
        return int((metadata(rs).get("annotations") or {}).get(REVISION) or 0)
    except ValueError:
        return 0


def _max_unavailable(spec: Mapping[str, Any], replicas: int) -> int:
    """``rollingUpdate.maxUnavailable`` (default 25%, rounded down); 0 for Recreate."""
    strategy = spec.get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return 0
    value = (strategy.get("rollingUpdate") or {}).get("maxUnavailable", "25%")
    if isinstance(value, str) and value.endswith("%"):
        return replicas * int(value[:-1]) // 100
    return min(int(value), replicas)


def _condition(
    previous: Mapping[Any, Mapping[str, Any]], kind: str, true: bool, reason: str, message: str
) -> dict[str, Any]:
    """A Deployment condition; ``lastTransitionTime`` moves only when its status does."""
    now = now_rfc3339()
    status = "True" if true else "False"
    before = previous.get(kind) or {}
    same = before.get("status") == status
    unchanged = same and before.get("reason") == reason and before.get("message") == message
    return {
        "type": kind,
        "status": status,
        "lastUpdateTime": before.get("lastUpdateTime", now) if unchanged else now,
        "lastTransitionTime": before.get("lastTransitionTime", now) if same else now,
        "reason": reason,
        "message": message,
    }
