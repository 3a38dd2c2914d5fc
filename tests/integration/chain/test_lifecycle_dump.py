"""``plan``, ``sim --cluster`` and the worker agree on a dump as ``kubectl get -o yaml`` writes it.

The dump (tests/data/lifecycle-and-pools-dump.yaml) holds one node in every lifecycle state
of docs/node-lifecycle.md, among them one Karpenter is disrupting (tainted
``karpenter.sh/disrupted``, being deleted behind its finalizer) and two in planned
maintenance, and every kind of pool at zero nodes of docs/autoscaling.md, with the
server-set metadata (uid, resourceVersion, managedFields) and status a real dump carries.
``sim --cluster`` runs the real worker and agents against it and exits 0 only when the chain
read back equals ``plan``'s; the two outputs are compared here too.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

from gpustack_operator.cli import main

DUMP = Path(__file__).resolve().parents[2] / "data" / "lifecycle-and-pools-dump.yaml"
SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields")


def _run_json(*argv: str) -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["--log-level", "warning", *argv])
    assert code == 0, out.getvalue()
    data: dict[str, Any] = json.loads(out.getvalue())
    return data


def _normalised(item: dict[str, Any]) -> dict[str, Any]:
    meta = {
        k: v for k, v in item["metadata"].items() if k not in SERVER_SET and k != "ownerReferences"
    }
    return {**{k: v for k, v in item.items() if k != "status"}, "metadata": meta}


def test_plan_sim_and_the_worker_agree_on_every_lifecycle_state_and_pool_kind() -> None:
    planned = _run_json("plan", "--nodes", str(DUMP), "-o", "json")
    simulated = _run_json("sim", "--cluster", str(DUMP), "--timeout", "120", "-o", "json")
    assert [_normalised(i) for i in simulated["items"]] == [
        _normalised(i) for i in planned["items"]
    ]
    queues = {i["metadata"]["name"]: i for i in planned["items"] if i["kind"] == "ClusterQueue"}
    assert {n for n in queues if n.startswith("pool-")} == {
        "pool-capi-md-a100",
        "pool-capi-md-h200",
        "pool-capi-md-t4",
        "pool-capi-mp-l4",
        "pool-declared-l4-flex",
        "pool-karpenter-a10g-static",
        "pool-karpenter-azure-a100",
        "pool-karpenter-h100",
        "pool-karpenter-l40s",
    }

    def quota(queue: str, resource: str) -> str:
        (flavor,) = queues[queue]["spec"]["resourceGroups"][0]["flavors"]
        return str(next(r["nominalQuota"] for r in flavor["resources"] if r["name"] == resource))

    assert quota("pool-karpenter-h100", "nvidia.com/gpu") == "8"  # 12 GPUs of 8-GPU nodes
    assert quota("pool-karpenter-a10g-static", "nvidia.com/gpu") == "8"  # 2 replicas x 4
    assert quota("pool-capi-md-h200", "nvidia.com/gpu") == "16"  # template's capacity: 4 x 4
    features = {i["metadata"]["name"] for i in planned["items"] if i["kind"] == "NodeFeature"}
    assert "deleting-gpustack-worker" not in features
    assert "karpenter-disrupted-gpustack-worker" in features
    assert "poolRejections" not in planned
