"""The chain's invariants as a stateful property (docs/architecture.md, "Invariants").

A Hypothesis rule-based state machine drives one simulated cluster, its worker on a clock the
test holds, through random bounded sequences of what people and the cluster do: teams
declared, edited (valid; refused: a text that is not UTF-8, kept under ``binaryData``, a
missing key, a broken document), removed; a declared pool likewise; nodes added, deleted,
cordoned and uncordoned, NotReady and Ready, in a driver upgrade or a MIG change ended in
either order, their device plugin down and back; Jobs submitted (the simulator's Kueue
stand-in admits them) and completed or deleted. After each step the cluster must rest, and
then:

(a) the worker's objects equal ``plan``'s for the same input, once no retiring queue holds
    admitted work (until then the new queues have only the rest, by design);
(b) for NVIDIA GPUs, the quota the queues that admit (not held) can reach, their own plus
    their Cohorts', is at most the devices the Nodes have, and no admission takes the GPUs
    admitted above those;
(c) every ClusterQueue that admits is reached by a LocalQueue, and every LocalQueue's queue
    exists;
(d) a refused declaration is never in force: the status ConfigMap keeps the last good one,
    and a Warning Event names the fix;
(e) every ResourceFlavor is in a queue while its nodes exist.

The timers are 0 so that the worker's memory and ``plan``'s assumptions agree at once
(docs/node-lifecycle.md, "What the worker remembers, and what `plan` assumes"). The run is
derandomized (one fixed sequence of examples, the same in CI every time) and bounded; set
``GPUSTACK_PROPERTY_EXAMPLES`` (examples, default 3) and ``GPUSTACK_PROPERTY_STEPS`` (steps
per example, default 8) for a longer search, e.g. ``GPUSTACK_PROPERTY_EXAMPLES=50``, and
``GPUSTACK_PROPERTY_SHRINK=1`` to shrink a failure. A failure lists the steps that led to it.
Each failing sequence found is kept as a regular test below.
"""

from __future__ import annotations

import copy
import functools
import inspect
import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    precondition,
    rule,
)

from gpustack_operator.domain.chain.declaredpools import (
    DECLARED_POOLS_CONFIGMAP,
    DECLARED_POOLS_KEY,
    is_pool_chain_object,
    validate_declared_pools,
)
from gpustack_operator.domain.chain.teams import TEAMS_CONFIGMAP, TEAMS_KEY, parse_teams
from gpustack_operator.domain.declarationstatus import STATUS_CONFIGMAP, statuses_of
from gpustack_operator.domain.node.availability import LifecycleTimers, format_time
from gpustack_operator.domain.nodeview import name_of
from gpustack_operator.domain.quantities import parse_quantity
from gpustack_sim.cluster.cluster import NotConverged, SimCluster
from gpustack_sim.cluster.multikueue import queued_job
from tests.conftest import shared_crds_dir
from tests.integration.worker.lifecycle import Clock
from tests.integration.worker.support import fast_config, node

pytestmark = pytest.mark.skipif(
    shared_crds_dir() is None,
    reason="needs the Kueue and NFD CRDs from ../shared/crds (or $GPUSTACK_SHARED_CRDS)",
)

EXAMPLES = int(os.environ.get("GPUSTACK_PROPERTY_EXAMPLES", "3"))
STEPS = int(os.environ.get("GPUSTACK_PROPERTY_STEPS", "8"))
TIMEOUT = 60.0
KUEUE = "kueue.x-k8s.io/v1beta2"
SYSTEM = "gpustack-system"
GPU = "nvidia.com/gpu"
UPGRADE = "nvidia.com/gpu-driver-upgrade-state"
MIG = "nvidia.com/mig.config.state"
ZERO = LifecycleTimers(soft_grace=0, maintenance_grace=0, join_window=0, device_grace=0)
TEAMS = """teams:
  - name: research
    namespaces: [research]
    shares:
      - pools: {manufacturer: nvidia}
        share: %d%%
"""
BAD_TEAMS = {
    "not-utf8": {"binaryData": {TEAMS_KEY: "//79"}},  # bytes ff fe fd
    "missing-key": {"data": {"other.yaml": TEAMS % 50}},
    "broken": {"data": {TEAMS_KEY: "teams: [\n"}},
    "over-100": {"data": {TEAMS_KEY: TEAMS % 150}},
}
CARDS = ("Tesla T4", "NVIDIA L4")
POOLS = """pools:
  - name: mi300x
    nodeSelector: {cloud.google.com/gke-nodepool: mi300x}
    accelerator: {product: AMD Instinct MI300X, resource: amd.com/gpu, perNode: 2}
    cpu: "8"
    memory: 32Gi
    maxNodes: %d
"""
"""An AMD pool no team selects (the teams share NVIDIA pools); NVIDIA_POOLS is one they would
select, which they leave whole (test_teams_leave_a_declared_pool_whole_as_plan_shows)."""
NVIDIA_POOLS = POOLS.replace("mi300x", "l4").replace("AMD Instinct MI300X", "NVIDIA L4")
NVIDIA_POOLS = NVIDIA_POOLS.replace("amd.com/gpu", GPU)
BAD_POOLS = {
    "not-utf8": {"binaryData": {DECLARED_POOLS_KEY: "//79"}},
    "missing-key": {"data": {"pool.yaml": POOLS % 2}},
    "broken": {"data": {DECLARED_POOLS_KEY: "pools: [\n"}},
    "not-a-list": {"data": {DECLARED_POOLS_KEY: "pools: {not: a list}"}},
}
DECLARED_QUEUE = "pool-declared-"
WORKLOAD = "Workload"


def gpu_node(name: str, product: str, cards: int, now: float) -> dict[str, Any]:
    """A Node of *cards* NVIDIA cards, labelled, Ready, its device plugin advertising them."""
    obj = node(name, cards=(product, cards))
    obj["status"]["capacity"][GPU] = str(cards)
    obj["status"]["allocatable"][GPU] = str(cards)
    obj["status"]["conditions"] = [
        {"type": "Ready", "status": "True", "lastTransitionTime": format_time(now - 3600)}
    ]
    obj["spec"] = {}
    return obj


def traced(step: Callable[..., Any]) -> Callable[..., Any]:
    """A rule that writes itself, with its arguments, into the machine's step trace, so a
    failure says which steps led to it (shrinking is off in CI)."""
    signature = inspect.signature(step)

    @functools.wraps(step)
    def run(self: ChainMachine, *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(self, *args, **kwargs).arguments
        shown = ", ".join(f"{k}={v!r}" for k, v in bound.items() if k != "self")
        self.trace.append(f"{step.__name__}({shown})")
        return step(self, *args, **kwargs)

    return run


def amount(value: Any) -> float:
    quantity = parse_quantity(str(value)) if value is not None else None
    return float(quantity) if quantity is not None else 0.0


class ChainMachine(RuleBasedStateMachine):
    """One simulated cluster per example; see the module docstring."""

    nodes = Bundle("nodes")
    jobs = Bundle("jobs")

    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        config = fast_config(lifecycle=ZERO, clock=self.clock)
        self.good_teams: str | None = None
        self.good_pools: str | None = None
        self.refused = 0
        self.held_steps = 0
        """Steps after which retiring queues still held work, so (a) waited (see converge)."""
        self.admitted: dict[str, float] = {}
        """Workload uid -> the devices it was admitted with, at the last look."""
        self.serial = 0
        self.trace: list[str] = ["start(gpu-0: 2 x Tesla T4)"]
        self.timeout = TIMEOUT
        self._portal_cm = start_blocking_portal()
        self.portal: BlockingPortal = self._portal_cm.__enter__()
        first = gpu_node("gpu-0", CARDS[0], 2, self.clock.now)
        self._cluster_cm = self.portal.wrap_async_context_manager(
            SimCluster([first], ["default", "research"], run_agents=False, worker_config=config)
        )
        self.cluster: SimCluster = self._cluster_cm.__enter__()
        self.policy = self.cluster.policy  # the chain's policy, declarations aside
        self.converge()

    def teardown(self) -> None:
        try:
            self._cluster_cm.__exit__(None, None, None)
        finally:
            self._portal_cm.__exit__(None, None, None)

    # --- helpers ------------------------------------------------------------------------

    def converge(self) -> None:
        """Wait until the cluster rests, then (a): its chain is ``plan``'s. While retiring
        queues still hold work the new ones have only the rest by design (docs/teams.md,
        "Never more admitted than exists, meanwhile"), so (a) waits until no work is held
        there; (b), (c) and (e) hold throughout."""
        try:
            self.portal.call(functools.partial(self.cluster.converge, self.timeout, match=False))
            if self.work_held_by_retiring_queues():
                self.held_steps += 1
                return
            self.portal.call(self.cluster.converge, self.timeout)
        except NotConverged as exc:
            steps = "\n    ".join(self.trace)
            raise AssertionError(f"{exc}\n  after the steps:\n    {steps}") from exc

    def work_held_by_retiring_queues(self) -> list[str]:
        """Admitted Workloads in ClusterQueues ``plan`` does not have (retiring ones)."""
        planned = {name_of(q) for q in self.cluster.expected().cluster_queues}
        return [
            name_of(wl)
            for wl in self.objects(WORKLOAD)
            if (admission := _admission(wl)) and admission.get("clusterQueue") not in planned
        ]

    def edit(self, name: str, change: Callable[[dict[str, Any]], None]) -> None:
        """Change a Node in the input and on the server (spec and metadata, then status)."""
        change(self.cluster.nodes[name])
        store = self.cluster.sim.store
        stored = store.get("v1", "Node", name)
        assert stored is not None
        change(stored)
        updated = copy.deepcopy(store.update(stored))
        updated["status"] = stored["status"]
        store.update_status(updated)

    def objects(self, kind: str, api_version: str = KUEUE) -> list[dict[str, Any]]:
        return self.cluster.sim.store.list(api_version, kind)

    # --- nodes ----------------------------------------------------------------------------

    @rule(target=nodes)
    @traced
    def initial(self) -> str:
        return "gpu-0"

    @precondition(lambda self: len(self.cluster.nodes) < 4)
    @rule(target=nodes, product=st.sampled_from(CARDS), cards=st.integers(1, 4))
    @traced
    def add_node(self, product: str, cards: int) -> str:
        self.serial += 1
        name = f"gpu-{self.serial}"
        self.cluster.add_node(gpu_node(name, product, cards, self.clock.now))
        self.converge()
        return name

    @precondition(lambda self: len(self.cluster.nodes) > 1)
    @rule(name=consumes(nodes))
    @traced
    def delete_node(self, name: str) -> None:
        if name in self.cluster.nodes:
            self.cluster.delete_node(name)
            self.converge()

    @rule(name=nodes, cordoned=st.booleans())
    @traced
    def cordon(self, name: str, cordoned: bool) -> None:
        if name not in self.cluster.nodes:
            return

        def change(n: dict[str, Any]) -> None:
            n.setdefault("spec", {})["unschedulable"] = cordoned

        self.edit(name, change)
        self.converge()

    @rule(name=nodes, status=st.sampled_from(("True", "False", "Unknown")))
    @traced
    def readiness(self, name: str, status: str) -> None:
        if name not in self.cluster.nodes:
            return
        since = format_time(self.clock.now)

        def change(n: dict[str, Any]) -> None:
            n["status"]["conditions"] = [
                {"type": "Ready", "status": status, "lastTransitionTime": since}
            ]

        self.edit(name, change)
        self.converge()

    @rule(name=nodes, up=st.booleans())
    @traced
    def device_plugin(self, name: str, up: bool) -> None:
        if name not in self.cluster.nodes:
            return

        def change(n: dict[str, Any]) -> None:
            status = n["status"]
            status["allocatable"][GPU] = status["capacity"][GPU] if up else "0"

        self.edit(name, change)
        self.converge()

    @rule(name=nodes, kind=st.sampled_from((UPGRADE, MIG)), label_first=st.booleans())
    @traced
    def maintenance(self, name: str, kind: str, label_first: bool) -> None:
        """A driver upgrade or MIG change: started (cordoned, devices gone), converged,
        then ended in either order within the step (docs/node-lifecycle.md)."""
        if name not in self.cluster.nodes:
            return
        started = "pod-deletion-required" if kind == UPGRADE else "pending"
        done = "upgrade-done" if kind == UPGRADE else "success"

        def start(n: dict[str, Any]) -> None:
            n["metadata"].setdefault("labels", {})[kind] = started
            n.setdefault("spec", {})["unschedulable"] = True
            n["status"]["allocatable"][GPU] = "0"

        def label(n: dict[str, Any]) -> None:
            n["metadata"]["labels"][kind] = done
            n["status"]["allocatable"][GPU] = n["status"]["capacity"][GPU]

        def uncordon(n: dict[str, Any]) -> None:
            n["spec"]["unschedulable"] = False

        self.edit(name, start)
        self.converge()
        for change in (label, uncordon) if label_first else (uncordon, label):
            self.edit(name, change)
        self.converge()

    # --- teams ----------------------------------------------------------------------------

    def _put_configmap(self, name: str, body: dict[str, Any]) -> None:
        """ConfigMap *name* in the system namespace with *body*'s data alone, as a person's
        `kubectl apply` leaves it."""
        store = self.cluster.sim.store
        found = store.get("v1", "ConfigMap", name, SYSTEM)
        meta = {"name": name, "namespace": SYSTEM}
        if found is None:
            store.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, **body})
        else:
            found.pop("data", None)
            found.pop("binaryData", None)
            store.update({**found, **body})

    def _put_teams(self, body: dict[str, Any]) -> None:
        self._put_configmap(TEAMS_CONFIGMAP, body)

    @rule(share=st.sampled_from((25, 50, 100)))
    @traced
    def declare_teams(self, share: int) -> None:
        text = TEAMS % share
        self._put_teams({"data": {TEAMS_KEY: text}})
        self.good_teams = text
        self._declared()
        self.converge()

    @precondition(lambda self: self.good_teams is not None)
    @rule(bad=st.sampled_from(sorted(BAD_TEAMS)))
    @traced
    def refuse_teams(self, bad: str) -> None:
        before = self._refused_count()
        self._put_teams(BAD_TEAMS[bad])
        self.refused += 1
        self.portal.call(self._wait_for, lambda: self._refused_count() > before)
        self.converge()  # the last good declaration's chain, unchanged
        status = statuses_of(
            self.cluster.sim.store.get("v1", "ConfigMap", STATUS_CONFIGMAP, SYSTEM)
        ).get("teams")
        assert status is not None and status.refused, "the refusal is published"
        assert status.text == self.good_teams, "(d) a refused declaration is never in force"
        assert "stays in force" in self._refusals()[-1]

    @precondition(lambda self: self.good_teams is not None)
    @rule()
    @traced
    def remove_teams(self) -> None:
        self.cluster.sim.store.delete("v1", "ConfigMap", TEAMS_CONFIGMAP, SYSTEM)
        self.good_teams = None
        self._declared()
        self.converge()

    def _declared(self) -> None:
        """``plan``'s policy: the good teams and pools declared, as the worker reads them."""
        manufacturers = self.policy.manufacturers
        self.cluster.policy = replace(
            self.policy,
            teams=parse_teams(self.good_teams, manufacturers) if self.good_teams else None,
            declared_pools=validate_declared_pools(
                self.good_pools, self.policy.manufacturers_by_resource
            )
            if self.good_pools
            else (),
        )

    # --- declared pools (docs/autoscaling.md, "Pools declared by a person") ---------------

    def _put_pools(self, body: dict[str, Any]) -> None:
        self._put_configmap(DECLARED_POOLS_CONFIGMAP, body)

    @rule(max_nodes=st.integers(1, 3))
    @traced
    def declare_pools(self, max_nodes: int, text: str = POOLS) -> None:
        text = text % max_nodes
        self._put_pools({"data": {DECLARED_POOLS_KEY: text}})
        self.good_pools = text
        self._declared()
        self.converge()

    @precondition(lambda self: self.good_pools is not None)
    @rule(bad=st.sampled_from(sorted(BAD_POOLS)))
    @traced
    def refuse_pools(self, bad: str) -> None:
        before = self._refused_count("DeclaredPoolsRefused")
        self._put_pools(BAD_POOLS[bad])
        self.portal.call(
            self._wait_for, lambda: self._refused_count("DeclaredPoolsRefused") > before
        )
        self.converge()  # the last good declaration's chain, unchanged
        status = statuses_of(
            self.cluster.sim.store.get("v1", "ConfigMap", STATUS_CONFIGMAP, SYSTEM)
        ).get("pools")
        assert status is not None and status.refused, "the refusal is published"
        assert status.text == self.good_pools, "(d) a refused declaration is never in force"
        assert "stays in force" in self._refusals("DeclaredPoolsRefused")[-1]

    @precondition(lambda self: self.good_pools is not None)
    @rule()
    @traced
    def remove_pools(self) -> None:
        self.cluster.sim.store.delete("v1", "ConfigMap", DECLARED_POOLS_CONFIGMAP, SYSTEM)
        self.good_pools = None
        self._declared()
        self.converge()

    # --- Jobs (the simulator's Kueue stand-in admits them) --------------------------------

    @rule(
        target=jobs,
        namespace=st.sampled_from(("default", "research")),
        pick=st.integers(0, 7),
        cards=st.integers(1, 3),
    )
    @traced
    def submit_job(self, namespace: str, pick: int, cards: int) -> str:
        """A Job of *cards* GPUs in one of the namespace's device queues (the *pick*-th)."""
        queues = sorted(
            name_of(lq)
            for lq in self.cluster.sim.store.list(KUEUE, "LocalQueue", namespace)
            if not lq["spec"]["clusterQueue"].startswith(DECLARED_QUEUE)
            and self._gpu_queue(lq["spec"]["clusterQueue"])
        )
        if not queues:
            return ""
        self.serial += 1
        name = f"job-{self.serial}"
        self.cluster.sim.store.create(job(namespace, name, queues[pick % len(queues)], cards))
        self.converge()
        return f"{namespace}/{name}"

    @rule(job=consumes(jobs), delete=st.booleans())
    @traced
    def finish_job(self, job: str, delete: bool) -> None:
        """The Job completes (its Complete condition, as the Job controller writes it), or a
        person deletes it; Kueue's stand-in frees its quota either way."""
        if not job:
            return
        namespace, name = job.split("/")
        store = self.cluster.sim.store
        found = store.get("batch/v1", "Job", name, namespace)
        if found is None:
            return
        if delete:
            store.delete("batch/v1", "Job", name, namespace)
        else:
            now = format_time(self.clock.now)
            found.setdefault("status", {})["conditions"] = [
                {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": now},
                {"type": "Complete", "status": "True", "lastTransitionTime": now},
            ]
            found["status"]["succeeded"] = 1
            found["status"].setdefault("startTime", now)
            found["status"]["completionTime"] = now
            store.update_status(found)
        self.converge()

    def _gpu_queue(self, name: str) -> bool:
        queue = self.cluster.sim.store.get(KUEUE, "ClusterQueue", name)
        return queue is not None and any(
            resource.get("name") == GPU
            for group in queue["spec"].get("resourceGroups") or []
            for flavor in group.get("flavors") or []
            for resource in flavor.get("resources") or []
        )

    def _refusals(self, reason: str = "TeamsDeclarationRefused") -> list[str]:
        return [
            str(e.get("message") or e.get("note") or "")
            for e in self.cluster.sim.store.list("v1", "Event", SYSTEM)
            if e.get("reason") == reason and e.get("type") == "Warning"
        ]

    def _refused_count(self, reason: str = "TeamsDeclarationRefused") -> int:
        """Refusals recorded so far: a refusal with the message of an earlier one bumps that
        Event's ``count`` instead of making a new Event."""
        return sum(
            int(e.get("count") or 1)
            for e in self.cluster.sim.store.list("v1", "Event", SYSTEM)
            if e.get("reason") == reason and e.get("type") == "Warning"
        )

    async def _wait_for(self, seen: Callable[[], bool]) -> None:
        from tests.integration.worker.support import eventually

        await eventually(seen, "a Warning Event for the refused declaration")

    # --- invariants (a is every converge above) ------------------------------------------

    @invariant()
    def quota_never_above_the_devices(self) -> None:
        """(b) the quota queues that admit can reach is at most the devices that exist."""
        devices = sum(amount(n["status"]["capacity"].get(GPU)) for n in self.objects("Node", "v1"))
        reachable = 0.0
        held = {
            q["metadata"]["name"]
            for q in self.objects("ClusterQueue")
            if q["spec"].get("stopPolicy") in ("Hold", "HoldAndDrain")
        }
        cohorts = set()
        for queue in self.objects("ClusterQueue"):
            if queue["metadata"]["name"] in held or _declared(queue):
                continue
            cohorts.add(queue["spec"].get("cohortName") or queue["spec"].get("cohort"))
            reachable += _gpu_quota(queue)
        for cohort in self.objects("Cohort"):
            if cohort["metadata"]["name"] in cohorts and not _declared(cohort):
                reachable += _gpu_quota(cohort)
        assert reachable <= devices, f"(b) {reachable} GPUs of quota for {devices} GPUs"

    @invariant()
    def admitted_never_above_the_devices(self) -> None:
        """(b) no admission takes the devices admitted above those that exist (work admitted
        before its node went stays admitted: Kueue evicts nothing for it)."""
        devices = sum(amount(n["status"]["capacity"].get(GPU)) for n in self.objects("Node", "v1"))
        now = {
            str(wl["metadata"]["uid"]): _admitted_gpus(admission)
            for wl in self.objects(WORKLOAD)
            if (admission := _admission(wl))
        }
        new = set(now) - set(self.admitted)
        self.admitted = now
        total = sum(now.values())
        assert not new or total <= devices, f"(b) {total} GPUs admitted for {devices} GPUs"

    @invariant()
    def every_queue_is_reached(self) -> None:
        """(c) every ClusterQueue that admits has a LocalQueue, and every LocalQueue its
        ClusterQueue (a retiring queue, held while its work finishes, has lost its
        LocalQueues to its replacements: docs/teams.md)."""
        queues = {q["metadata"]["name"] for q in self.objects("ClusterQueue")}
        admitting = {
            q["metadata"]["name"]
            for q in self.objects("ClusterQueue")
            if q["spec"].get("stopPolicy") not in ("Hold", "HoldAndDrain")
        }
        targets = {lq["spec"]["clusterQueue"] for lq in self.objects("LocalQueue")}
        assert targets <= queues, f"(c) LocalQueues of missing queues: {targets - queues}"
        assert admitting <= targets, f"(c) queues no LocalQueue reaches: {admitting - targets}"

    @invariant()
    def every_flavor_is_in_a_queue(self) -> None:
        """(e) a flavor never leaves its queue while its nodes exist."""
        flavors = {f["metadata"]["name"] for f in self.objects("ResourceFlavor")}
        listed = {
            flavor["name"]
            for q in self.objects("ClusterQueue")
            for group in q["spec"].get("resourceGroups") or []
            for flavor in group.get("flavors") or []
        }
        assert flavors <= listed, f"(e) flavors in no queue: {flavors - listed}"


def _admission(workload: dict[str, Any]) -> dict[str, Any] | None:
    """A Workload's admission while it holds quota (a finished one keeps it, holding none)."""
    status = workload.get("status") or {}
    finished = any(
        c.get("type") == "Finished" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    admission: dict[str, Any] | None = status.get("admission")
    return None if finished else admission


def _admitted_gpus(admission: dict[str, Any]) -> float:
    return sum(
        amount((assignment.get("resourceUsage") or {}).get(GPU))
        for assignment in admission.get("podSetAssignments") or []
    )


def job(namespace: str, name: str, queue: str, cards: int) -> dict[str, Any]:
    """A suspended Job for *queue* (Kueue unsuspends it once admitted)."""
    return queued_job(name, namespace, queue, {"cpu": "100m", "memory": "64Mi", GPU: str(cards)})


def _declared(obj: dict[str, Any]) -> bool:
    """A declared pool's queue or Cohort: its quota is the declared maximum, for nodes still
    to come, and its admissions wait for them (docs/architecture.md, invariant (b))."""
    return is_pool_chain_object(obj)


def _gpu_quota(obj: dict[str, Any]) -> float:
    return sum(
        amount(resource.get("nominalQuota"))
        for group in obj["spec"].get("resourceGroups") or []
        for flavor in group.get("flavors") or []
        for resource in flavor.get("resources") or []
        if resource.get("name") == GPU
    )


ChainMachine.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    derandomize=True,
    deadline=None,
    # Shrinking replays every step, each a convergence of seconds; a failure is timing-free
    # enough to read from its own sequence (GPUSTACK_PROPERTY_SHRINK=1 shrinks it).
    phases=[Phase.explicit, Phase.reuse, Phase.generate]
    + ([Phase.shrink] if os.environ.get("GPUSTACK_PROPERTY_SHRINK") else []),
    suppress_health_check=list(HealthCheck),
)


@pytest.mark.timeout(1200)
def test_the_chain_keeps_its_invariants_through_random_changes() -> None:
    ChainMachine.TestCase().runTest()


def _run(*steps: Callable[[ChainMachine], Any], timeout: float = TIMEOUT) -> int:
    """Run *steps* on a fresh machine, checking the invariants after each; returns after how
    many steps retiring queues still held work."""
    machine = ChainMachine()
    machine.timeout = timeout
    try:
        for step in steps:
            step(machine)
            machine.quota_never_above_the_devices()
            machine.admitted_never_above_the_devices()
            machine.every_queue_is_reached()
            machine.every_flavor_is_in_a_queue()
        return machine.held_steps
    finally:
        machine.teardown()


@pytest.mark.parametrize("label_first", [True, False], ids=["label-first", "uncordon-first"])
def test_maintenance_over_a_node_already_not_ready_lets_the_pool_go(label_first: bool) -> None:
    """Found by the machine (the fixed CI sequence): a node NotReady and cordoned before a
    driver upgrade, still NotReady when it ends. Its NotReady is older than the upgrade, so
    it is not the upgrade's end: the node is withheld for it as before the upgrade, the
    pool's Hold goes, and the chain is ``plan``'s (it was held for good, so the step never
    converged)."""
    _run(
        lambda m: m.readiness("gpu-0", "Unknown"),
        lambda m: m.device_plugin("gpu-0", True),
        lambda m: m.cordon("gpu-0", True),
        lambda m: m.maintenance("gpu-0", UPGRADE, label_first),
    )


def test_jobs_held_through_teams_switched_on_and_off_and_pools_declared() -> None:
    """Every step once, in an order the random search reaches only rarely: Jobs running
    while teams are switched on and off (the retiring queue keeps its work, so (a) waits
    until it ends) and a declared pool declared, refused twice and removed meanwhile."""
    jobs: list[str] = []
    held = _run(
        lambda m: jobs.append(m.submit_job("research", 0, 2)),
        lambda m: m.declare_teams(50),
        lambda m: jobs.append(m.submit_job("research", 0, 1)),
        lambda m: m.finish_job(jobs[0], False),
        lambda m: m.declare_pools(2),
        lambda m: m.refuse_pools("not-utf8"),
        lambda m: m.refuse_pools("broken"),
        lambda m: m.remove_teams(),
        lambda m: m.finish_job(jobs[1], True),
        lambda m: m.remove_pools(),
    )
    assert all(jobs), "each Job found a device queue"
    assert held == 3, "teams on, a Job meanwhile, teams off: a retiring queue held work"


def test_teams_leave_a_declared_pool_whole_as_plan_shows() -> None:
    """Found by the machine: ``plan`` divided a declared NVIDIA pool among the teams sharing
    NVIDIA pools while the worker kept the pool's own queue. Teams divide the pools of nodes;
    a declared pool's queue stays whole (docs/teams.md, "Which pools teams divide")."""
    _run(
        lambda m: m.declare_teams(50),
        lambda m: m.declare_pools(2, NVIDIA_POOLS),
    )


def test_a_refusal_repeated_after_a_good_declaration_is_recorded_again() -> None:
    """Found by the machine: the same bad text refused again after a good one in between
    makes no new Event (the recorder bumps the first one's ``count``); the refusal is still
    recorded, and the last good declaration stays in force."""
    _run(
        lambda m: m.declare_teams(50),
        lambda m: m.refuse_teams("over-100"),
        lambda m: m.declare_teams(50),
        lambda m: m.refuse_teams("over-100"),
    )
