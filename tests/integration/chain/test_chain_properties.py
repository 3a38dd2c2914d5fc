"""The chain's invariants as a stateful property (docs/architecture.md, "Invariants").

A Hypothesis rule-based state machine drives one simulated cluster, its worker on a clock the
test holds, through random bounded sequences of what people and the cluster do: teams
declared, edited (valid; refused: a text that is not UTF-8, kept under ``binaryData``, a
missing key, a broken document), removed; nodes added, deleted, cordoned and uncordoned,
NotReady and Ready, in a driver upgrade or a MIG change ended in either order, their device
plugin down and back. After each step the cluster must converge, and then:

(a) the worker's objects equal ``plan``'s for the same input;
(b) for every device resource, the quota the queues that admit (not held) can reach, their
    own plus their Cohorts', is at most the devices the Nodes have;
(c) every ClusterQueue is reached by a LocalQueue, and every LocalQueue's queue exists;
(d) a refused declaration is never in force: the status ConfigMap keeps the last good one,
    and a Warning Event names the fix;
(e) every ResourceFlavor is in a queue while its nodes exist.

The timers are 0 so that the worker's memory and ``plan``'s assumptions agree at once
(docs/node-lifecycle.md, "What the worker remembers, and what `plan` assumes"). The run is
derandomized (one fixed sequence of examples, the same in CI every time) and bounded; set
``GPUSTACK_PROPERTY_EXAMPLES`` (examples, default 2) and ``GPUSTACK_PROPERTY_STEPS`` (steps
per example, default 6) for a longer search, e.g. ``GPUSTACK_PROPERTY_EXAMPLES=50``.
A failure Hypothesis finds is shrunk to a short sequence: keep it as a regular test.
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

from gpustack_operator.domain.availability import LifecycleTimers, format_time
from gpustack_operator.domain.declarationstatus import STATUS_CONFIGMAP, statuses_of
from gpustack_operator.domain.quantities import parse_quantity
from gpustack_operator.domain.teams import TEAMS_CONFIGMAP, TEAMS_KEY, parse_teams
from gpustack_sim.cluster.cluster import NotConverged, SimCluster
from tests.conftest import shared_crds_dir
from tests.integration.worker.lifecycle import Clock
from tests.integration.worker.support import fast_config, node

pytestmark = pytest.mark.skipif(
    shared_crds_dir() is None,
    reason="needs the Kueue and NFD CRDs from ../shared/crds (or $GPUSTACK_SHARED_CRDS)",
)

EXAMPLES = int(os.environ.get("GPUSTACK_PROPERTY_EXAMPLES", "2"))
STEPS = int(os.environ.get("GPUSTACK_PROPERTY_STEPS", "6"))
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

    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        config = fast_config(lifecycle=ZERO, clock=self.clock)
        self.base = config.policy
        self.good_teams: str | None = None
        self.refused = 0
        self.serial = 0
        self.trace: list[str] = ["start(gpu-0: 2 x Tesla T4)"]
        self._portal_cm = start_blocking_portal()
        self.portal: BlockingPortal = self._portal_cm.__enter__()
        first = gpu_node("gpu-0", CARDS[0], 2, self.clock.now)
        self._cluster_cm = self.portal.wrap_async_context_manager(
            SimCluster([first], ["default", "research"], run_agents=False, worker_config=config)
        )
        self.cluster: SimCluster = self._cluster_cm.__enter__()
        self.converge()

    def teardown(self) -> None:
        try:
            self._cluster_cm.__exit__(None, None, None)
        finally:
            self._portal_cm.__exit__(None, None, None)

    # --- helpers ------------------------------------------------------------------------

    def converge(self) -> None:
        try:
            self.portal.call(self.cluster.converge, TIMEOUT)
        except NotConverged as exc:
            steps = "\n    ".join(self.trace)
            raise AssertionError(f"{exc}\n  after the steps:\n    {steps}") from exc

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

    def _put_teams(self, body: dict[str, Any]) -> None:
        store = self.cluster.sim.store
        found = store.get("v1", "ConfigMap", TEAMS_CONFIGMAP, SYSTEM)
        meta = {"name": TEAMS_CONFIGMAP, "namespace": SYSTEM}
        if found is None:
            store.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, **body})
        else:
            found.pop("data", None)
            found.pop("binaryData", None)
            store.update({**found, **body})

    @rule(share=st.sampled_from((25, 50, 100)))
    @traced
    def declare_teams(self, share: int) -> None:
        text = TEAMS % share
        self._put_teams({"data": {TEAMS_KEY: text}})
        self.good_teams = text
        self.cluster.policy = replace(
            self.base, teams=parse_teams(text, self.cluster.policy.manufacturers)
        )
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
        self.cluster.policy = self.base
        self.converge()

    def _refusals(self) -> list[str]:
        return [
            str(e.get("message") or e.get("note") or "")
            for e in self.cluster.sim.store.list("v1", "Event", SYSTEM)
            if e.get("reason") == "TeamsDeclarationRefused" and e.get("type") == "Warning"
        ]

    def _refused_count(self) -> int:
        """Refusals recorded so far: a refusal with the message of an earlier one bumps that
        Event's ``count`` instead of making a new Event."""
        return sum(
            int(e.get("count") or 1)
            for e in self.cluster.sim.store.list("v1", "Event", SYSTEM)
            if e.get("reason") == "TeamsDeclarationRefused" and e.get("type") == "Warning"
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
            if queue["metadata"]["name"] in held:
                continue
            cohorts.add(queue["spec"].get("cohortName") or queue["spec"].get("cohort"))
            reachable += _gpu_quota(queue)
        for cohort in self.objects("Cohort"):
            if cohort["metadata"]["name"] in cohorts:
                reachable += _gpu_quota(cohort)
        assert reachable <= devices, f"(b) {reachable} GPUs of quota for {devices} GPUs"

    @invariant()
    def every_queue_is_reached(self) -> None:
        """(c) every ClusterQueue has a LocalQueue and every LocalQueue its ClusterQueue."""
        queues = {q["metadata"]["name"] for q in self.objects("ClusterQueue")}
        targets = {lq["spec"]["clusterQueue"] for lq in self.objects("LocalQueue")}
        assert targets <= queues, f"(c) LocalQueues of missing queues: {targets - queues}"
        assert queues <= targets, f"(c) queues no LocalQueue reaches: {queues - targets}"

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


def _run(*steps: Callable[[ChainMachine], Any]) -> None:
    """Run *steps* on a fresh machine, checking the invariants after each."""
    machine = ChainMachine()
    try:
        for step in steps:
            step(machine)
            machine.quota_never_above_the_devices()
            machine.every_queue_is_reached()
            machine.every_flavor_is_in_a_queue()
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
