"""A node-derived pool's objects are built in one place (docs/architecture.md, "One function
per pool"): no product module but ``domain/chain/nodepool.py`` calls the builders of a
pool's queue, its teams' split, its Cohort's share or its flavor, so ``plan`` and the
worker cannot build them apart. Read from the source: a name used, imported or reached as
an attribute counts, a mention in a docstring does not."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PRODUCT = (REPO / "gpustack_operator", REPO / "controllers", REPO / "sim" / "gpustack_sim")
NODEPOOL = REPO / "gpustack_operator" / "domain" / "chain" / "nodepool.py"
BUILDERS = {
    "desired_cluster_queue": "queues.py",
    "split_pool": "teams.py",
    "cohort_resource_groups": "teams.py",
    "with_cohort_quota": "teams.py",
    "less_held": "transition.py",
    "tenant_cluster_queue": "tenancy.py",
    "tenant_flavor": "tenancy.py",
    "desired_resource_flavor": "flavors.py",
}
"""Each builder and the module that defines it (and may call it)."""


def _names_used(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.alias):
            found.add(node.name.rpartition(".")[2])
    return found


def test_only_the_per_pool_functions_build_a_pools_objects() -> None:
    users: dict[str, list[str]] = {name: [] for name in BUILDERS}
    for root in PRODUCT:
        for path in sorted(root.rglob("*.py")):
            for name in _names_used(path) & set(BUILDERS):
                if path.name != BUILDERS[name]:
                    users[name].append(str(path.relative_to(REPO)))
    nodepool = str(NODEPOOL.relative_to(REPO))
    assert users == {name: [nodepool] for name in BUILDERS}
