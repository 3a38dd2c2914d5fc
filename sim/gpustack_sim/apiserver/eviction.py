"""Pod eviction and PodDisruptionBudget status, as kube-apiserver and the disruption
controller keep them.

``POST .../pods/<name>/eviction`` deletes a Pod unless that would leave fewer healthy Pods
than the one PodDisruptionBudget selecting it wants: then it answers 429 and the client
retries. A PDB's status (healthy, desired and expected Pods, disruptions allowed) is what the
disruption controller of kube-controller-manager computes from the selected Pods' ``Ready``
condition; here one pass of the simulator's background controllers keeps it
(docs/simulator.md, "Pod eviction").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from gpustack_sim.apiserver.errors import ApiError, bad_request
from gpustack_sim.apiserver.kinds import KindInfo
from gpustack_sim.apiserver.patches import clone
from gpustack_sim.apiserver.rbac import label_selector_matches
from gpustack_sim.apiserver.store import Store, check_preconditions

PDB_RESOURCE = ("policy", "poddisruptionbudgets")
EVICTION_VERSIONS = ("policy/v1", "policy/v1beta1")
EVICTION_KIND = {"group": "policy", "version": "v1", "kind": "Eviction"}
MAX_DISRUPTED_PODS = 2000
DELETION_TIMEOUT = timedelta(minutes=2)
"""How long an eviction's entry in ``disruptedPods`` counts the Pod as gone."""
_REFUSED = "Cannot evict pod as it would violate the pod's disruption budget."
_TIME = "%Y-%m-%dT%H:%M:%SZ"


def _now() -> datetime:
    return datetime.now(UTC)


def _stamp(when: datetime) -> str:
    return when.strftime(_TIME)


def is_ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def success() -> dict[str, Any]:
    """The ``Status`` a granted eviction answers: the create handler gives it code 201."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


def _too_many_requests(retry_after: int, cause: str) -> ApiError:
    details: dict[str, Any] = {"causes": [{"reason": "DisruptionBudget", "message": cause}]}
    headers = {}
    if retry_after:
        details["retryAfterSeconds"] = retry_after
        headers["Retry-After"] = str(retry_after)
    return ApiError(429, _REFUSED, "TooManyRequests", details, headers)


def _forbidden(pdb: str, why: str) -> ApiError:
    return ApiError(
        403,
        f'poddisruptionbudgets.policy "{pdb}" is forbidden: {why}',
        "Forbidden",
        {"name": pdb, "group": "policy", "kind": "poddisruptionbudgets"},
    )


def _selects(pdb: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """A PDB's selector against a Pod's labels; a missing or empty one selects nothing."""
    selector = (pdb.get("spec") or {}).get("selector")
    if not selector or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        return False
    return label_selector_matches(selector, (pod.get("metadata") or {}).get("labels") or {})


def delete_options(
    eviction: Mapping[str, Any], name: str, query_dry_run: Sequence[str]
) -> dict[str, Any]:
    """The DeleteOptions an Eviction carries, with the request's ``dryRun``; 400 for an
    Eviction of another Pod or with another ``dryRun``."""
    if eviction.get("apiVersion") not in EVICTION_VERSIONS or eviction.get("kind") != "Eviction":
        raise bad_request(
            f"the body must be a policy/v1 (or policy/v1beta1) Eviction, not "
            f"{eviction.get('apiVersion')}/{eviction.get('kind')}"
        )
    if (eviction.get("metadata") or {}).get("name") != name:
        raise bad_request("name in URL does not match name in Eviction object")
    options = dict(eviction.get("deleteOptions") or {})
    own = list(options.get("dryRun") or [])
    if own and query_dry_run and own != list(query_dry_run):
        raise bad_request(
            f"Non-matching dry-run options in request and content: "
            f"[{' '.join(query_dry_run)}] and [{' '.join(own)}]"
        )
    options["dryRun"] = own or list(query_dry_run)
    return options


class Evictions:
    """Grants or refuses evictions against the stored PDBs and deletes the Pods."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def evict(
        self, pod_info: KindInfo, namespace: str, name: str, options: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Evict one Pod as kube-apiserver's eviction subresource does; returns the
        ``Status`` to answer or raises the refusal."""
        pod = self.store.get_stored(pod_info, namespace, name)
        dry_run = "All" in (options.get("dryRun") or [])
        preconditions = dict(options.get("preconditions") or {})
        phase = (pod.get("status") or {}).get("phase")
        deleting = bool(pod["metadata"].get("deletionTimestamp"))
        if phase in ("Succeeded", "Failed", "Pending") or deleting:
            # No budget applies: it disrupts nothing (more). A Pending one must not have
            # started since it was read.
            if not deleting and phase == "Pending" and not preconditions.get("resourceVersion"):
                preconditions["resourceVersion"] = pod["metadata"]["resourceVersion"]
            self._delete(pod_info, pod, preconditions, options, dry_run)
            return success()
        budgets = [
            b for _, b in self.store.select(self._pdb_info(), namespace, None) if _selects(b, pod)
        ]
        if len(budgets) > 1:
            raise ApiError(
                500,
                "This pod has more than one PodDisruptionBudget, which the eviction "
                "subresource does not support.",
                "",
            )
        if budgets and not self._unhealthy_may_go(budgets[0], pod):
            self._check_and_decrement(budgets[0], name, dry_run)
        elif budgets and not preconditions.get("resourceVersion"):
            preconditions["resourceVersion"] = pod["metadata"]["resourceVersion"]
        self._delete(pod_info, pod, preconditions, options, dry_run)
        return success()

    def _pdb_info(self) -> KindInfo:
        info = self.store.info_by_resource(PDB_RESOURCE)
        assert info is not None, "PodDisruptionBudget is a built-in kind"
        return info

    @staticmethod
    def _unhealthy_may_go(pdb: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
        """A Pod that is not Ready counts for no budget: it may go when the policy says
        AlwaysAllow, or (IfHealthyBudget, the default) while the budget is met."""
        if is_ready(pod):
            return False
        if (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
            return True
        status = pdb.get("status") or {}
        desired = int(status.get("desiredHealthy") or 0)
        return desired > 0 and int(status.get("currentHealthy") or 0) >= desired

    def _check_and_decrement(self, pdb: dict[str, Any], pod_name: str, dry_run: bool) -> None:
        name = pdb["metadata"]["name"]
        status = pdb.get("status") or {}
        if int(status.get("observedGeneration") or 0) < int(pdb["metadata"].get("generation") or 1):
            raise _too_many_requests(
                10, f"The disruption budget {name} is still being processed by the server."
            )
        allowed = int(status.get("disruptionsAllowed") or 0)
        if allowed < 0:
            raise _forbidden(name, "pdb disruptions allowed is negative")
        if len(status.get("disruptedPods") or {}) > MAX_DISRUPTED_PODS:
            raise _forbidden(
                name,
                "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
            )
        if allowed == 0:
            raise _too_many_requests(
                0,
                f"The disruption budget {name} needs {int(status.get('desiredHealthy') or 0)} "
                f"healthy pods and has {int(status.get('currentHealthy') or 0)} currently",
            )
        if dry_run:
            return
        new = clone(pdb)
        new_status = new.setdefault("status", {})
        new_status["disruptionsAllowed"] = allowed - 1
        if allowed - 1 == 0:
            _set_allowed_condition(new_status, int(status.get("observedGeneration") or 0))
        new_status["disruptedPods"] = {
            **(status.get("disruptedPods") or {}),
            pod_name: _stamp(_now()),
        }
        self.store.controller_write(self._pdb_info(), new, pdb)

    def _delete(
        self,
        info: KindInfo,
        pod: dict[str, Any],
        preconditions: Mapping[str, Any],
        options: Mapping[str, Any],
        dry_run: bool,
    ) -> None:
        """Mark the Pod ``DisruptionTarget`` and delete it with the eviction's options."""
        meta = pod["metadata"]
        name, namespace = meta["name"], meta["namespace"]
        check_preconditions(info, name, meta, preconditions)
        rv = preconditions.get("resourceVersion")
        if dry_run:
            self.store.delete_as(info, namespace, name, preconditions=preconditions, dry_run=True)
            return
        marked = clone(pod)
        _set_pod_condition(marked, "DisruptionTarget", "EvictionByEvictionAPI")
        pod = self.store.controller_write(info, marked, pod)
        self.store.delete_as(
            info,
            namespace,
            name,
            preconditions={
                **preconditions,
                **({"resourceVersion": pod["metadata"]["resourceVersion"]} if rv else {}),
            },
            propagation=options.get("propagationPolicy"),
            grace_period=options.get("gracePeriodSeconds"),
        )


def _set_pod_condition(pod: dict[str, Any], kind: str, reason: str) -> None:
    conditions = pod.setdefault("status", {}).setdefault("conditions", [])
    now = _stamp(_now())
    for condition in conditions:
        if condition.get("type") == kind:
            if condition.get("status") != "True":
                condition["lastTransitionTime"] = now
            condition.update(status="True", reason=reason, message="Eviction API: evicting")
            return
    conditions.append(
        {
            "type": kind,
            "status": "True",
            "lastProbeTime": None,
            "lastTransitionTime": now,
            "reason": reason,
            "message": "Eviction API: evicting",
        }
    )


def _set_allowed_condition(status: dict[str, Any], generation: int) -> None:
    """``DisruptionAllowed``: True (SufficientPods) while an eviction may go, else False."""
    allowed = int(status.get("disruptionsAllowed") or 0) > 0
    wanted = {
        "type": "DisruptionAllowed",
        "status": "True" if allowed else "False",
        "reason": "SufficientPods" if allowed else "InsufficientPods",
        "message": "",
        "observedGeneration": generation,
    }
    conditions = status.setdefault("conditions", [])
    for condition in conditions:
        if condition.get("type") == "DisruptionAllowed":
            if condition.get("status") != wanted["status"]:
                condition["lastTransitionTime"] = _stamp(_now())
            condition.update(wanted)
            return
    conditions.append({**wanted, "lastTransitionTime": _stamp(_now())})


def _scaled(value: Any, total: int, round_up: bool) -> int:
    """An int-or-percent of *total*, as the disruption controller rounds it."""
    text = str(value)
    if text.endswith("%"):
        share = int(text[:-1]) * total / 100
        return math.ceil(share) if round_up else math.floor(share)
    return int(text)


def _expected_scale(store: Store, pods: Sequence[Mapping[str, Any]]) -> int | None:
    """The replicas of the selected Pods' controllers; None when a Pod has none."""
    owners: dict[str, int] = {}
    for pod in pods:
        refs = (pod.get("metadata") or {}).get("ownerReferences") or []
        ref = next((r for r in refs if r.get("controller")), None)
        if ref is None:
            return None
        owner = store.by_uid(str(ref.get("uid", "")))
        replicas = ((owner or {}).get("spec") or {}).get("replicas")
        owners[str(ref.get("uid"))] = int(replicas) if replicas is not None else 1
    return sum(owners.values())


def budget_status(
    store: Store, pdb: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], now: datetime
) -> dict[str, Any]:
    """What the disruption controller stores as one PDB's status."""
    spec = pdb.get("spec") or {}
    status: dict[str, Any] = clone(pdb.get("status") or {})
    selected = [p for p in pods if _selects(pdb, p)]
    disrupted: dict[str, str] = {}
    for pod in selected:
        pod_name = pod["metadata"]["name"]
        since = (status.get("disruptedPods") or {}).get(pod_name)
        if since and not pod["metadata"].get("deletionTimestamp"):
            when = datetime.strptime(since, _TIME).replace(tzinfo=UTC)
            if when + DELETION_TIMEOUT > now:
                disrupted[pod_name] = since
    healthy = sum(
        1
        for p in selected
        if is_ready(p)
        and not p["metadata"].get("deletionTimestamp")
        and p["metadata"]["name"] not in disrupted
    )
    if spec.get("minAvailable") is not None and not str(spec["minAvailable"]).endswith("%"):
        expected, desired = len(selected), int(spec["minAvailable"])
    else:
        scale = _expected_scale(store, selected)
        expected = scale if scale is not None else 0
        if spec.get("maxUnavailable") is not None:
            desired = max(0, expected - _scaled(spec["maxUnavailable"], expected, True))
        else:
            desired = _scaled(spec.get("minAvailable", 0), expected, True)
    allowed = max(0, healthy - desired) if expected > 0 else 0
    new_status: dict[str, Any] = {
        **status,
        "observedGeneration": int(pdb["metadata"].get("generation") or 1),
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "disruptionsAllowed": allowed,
    }
    if disrupted:
        new_status["disruptedPods"] = disrupted
    else:
        new_status.pop("disruptedPods", None)
    _set_allowed_condition(new_status, new_status["observedGeneration"])
    return new_status


def update_budgets(store: Store, namespaces: Iterable[str]) -> bool:
    """The disruption controller stand-in: one pass over the PDBs of *namespaces*; True when
    it wrote."""
    info = store.info_by_resource(PDB_RESOURCE)
    pod_info = store.info_by_resource(("", "pods"))
    if info is None or pod_info is None:
        return False
    now = _now()
    changed = False
    for namespace in sorted(set(namespaces)):
        pods = [p for _, p in store.select(pod_info, namespace, None)]
        for _, pdb in store.select(info, namespace, None):
            status = budget_status(store, pdb, pods, now)
            if _same_status(status, pdb.get("status") or {}):
                continue
            new = clone(pdb)
            new["status"] = status
            store.controller_write(info, new, pdb)
            changed = True
    return changed


def _same_status(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """Equal but for the conditions' transition times."""

    def plain(status: Mapping[str, Any]) -> dict[str, Any]:
        conditions = [
            {k: v for k, v in c.items() if k != "lastTransitionTime"}
            for c in status.get("conditions") or []
        ]
        return {**status, "conditions": conditions}

    return plain(new) == plain(old)
