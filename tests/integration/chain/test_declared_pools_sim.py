"""``sim --cluster`` with pools at zero converges to what ``plan`` prints (docs/autoscaling.md).

The dump holds Karpenter NodePools and a Cluster API node group (examples/autoscaling), the
declaration a GKE pool; the live worker reads the pool objects from the simulated API server,
``plan`` from the file. With ``--provisioning-requests on`` the simulator serves the
ProvisioningRequest kinds and both print the AdmissionChecks; with ``off`` neither does.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from gpustack_operator.cli import main

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "autoscaling"
SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields")
"""Metadata only a server sets; ``status`` too is the server's (the stand-in of Kueue's
provisioning controller marks the checks Active)."""


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


@pytest.mark.parametrize("provisioning", ["on", "off"])
def test_sim_converges_to_plans_pools(provisioning: str) -> None:
    argv = (
        str(EXAMPLES / "pools-at-zero.yaml"),
        "--declared-pools",
        str(EXAMPLES / "declared-pools.yaml"),
        "--provisioning-requests",
        provisioning,
        "-o",
        "json",
    )
    planned = _run_json("plan", "--nodes", *argv)
    simulated = _run_json("sim", "--cluster", *argv)
    assert [_normalised(i) for i in simulated["items"]] == [
        _normalised(i) for i in planned["items"]
    ]
    queues = {i["metadata"]["name"]: i for i in planned["items"] if i["kind"] == "ClusterQueue"}
    assert set(queues) == {
        "pool-capi-md-a100",
        "pool-declared-l4-flex",
        "pool-karpenter-h100",
        "pool-karpenter-l40s",
    }
    checks = {i["metadata"]["name"] for i in planned["items"] if i["kind"] == "AdmissionCheck"}
    assert checks == (
        {"pool-capi-md-a100", "pool-declared-l4-flex"} if provisioning == "on" else set()
    )
    (rejected,) = planned["poolRejections"]
    assert rejected["pool"] == "karpenter.inference-mixed"
