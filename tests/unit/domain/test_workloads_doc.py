"""docs/workloads.md's Job example fits the chain the worker builds for the two T4 nodes of
examples/cluster.yaml: its
queue-name label names the T4 pool's LocalQueue and every resource it requests is covered
by that pool (directly, or through the documented credits transformation)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from gpustack_operator.commands.plan import read_cluster_file
from gpustack_operator.domain.chain.kueueconfig import recommended_configuration
from gpustack_operator.domain.manufacturers import default_manufacturers
from gpustack_operator.domain.plan.plan import plan_state
from gpustack_operator.domain.plan.policy import ChainPolicy

DOC = Path(__file__).parents[3] / "docs" / "workloads.md"
MFRS = default_manufacturers()


def _documents() -> list[dict[str, Any]]:
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S)
    return [d for b in blocks if (d := yaml.safe_load(b)) and isinstance(d, dict)]


def _claims(job: dict[str, Any]) -> list[Any]:
    return list(job["spec"]["template"]["spec"].get("resourceClaims") or [])


def _topology(job: dict[str, Any]) -> bool:
    """A Job asking for a domain (docs/workloads.md, "Asking for a domain")."""
    meta = job["spec"]["template"].get("metadata") or {}
    return any(k.startswith("kueue.x-k8s.io/podset-") for k in meta.get("annotations") or {})


def tas_job_example() -> dict[str, object]:
    jobs = [d for d in _documents() if d.get("kind") == "Job" and _topology(d)]
    assert len(jobs) == 1, "docs/workloads.md should hold exactly one Job asking for a domain"
    return jobs[0]


def job_example() -> dict[str, object]:
    jobs = [
        d for d in _documents() if d.get("kind") == "Job" and not _claims(d) and not _topology(d)
    ]
    assert len(jobs) == 1, "docs/workloads.md should hold exactly one device-plugin Job"
    return jobs[0]


def example_t4_nodes() -> list[dict[str, Any]]:
    """The two T4 nodes of examples/cluster.yaml, whose pool the page's Job names."""
    nodes, _, _ = read_cluster_file(DOC.parents[1] / "examples" / "cluster.yaml")
    return [dict(n) for n in nodes if n["metadata"]["name"] in ("gpu-t4-1", "gpu-t4-2")]


def test_job_example_targets_the_t4_pool_and_its_covered_resources() -> None:
    job = job_example()
    namespace = job["metadata"]["namespace"]  # type: ignore[index]
    state = plan_state(
        example_t4_nodes(),
        [namespace],
        ChainPolicy(manufacturers=MFRS, system_namespace="gpustack-system"),
    )
    queue_name = job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]  # type: ignore[index]
    (local,) = [lq for lq in state.local_queues if lq["metadata"]["name"] == queue_name]
    assert local["metadata"]["labels"]["gpustack.ai/device-model"] == "tesla-t4"
    (queue,) = [
        q for q in state.cluster_queues if q["metadata"]["name"] == local["spec"]["clusterQueue"]
    ]
    covered = set(queue["spec"]["resourceGroups"][0]["coveredResources"])
    transformations = recommended_configuration("credits", MFRS)["resources"]["transformations"]
    charged_as = {t["input"]: next(iter(t["outputs"])) for t in transformations}
    assert job["spec"]["suspend"] is True  # type: ignore[index]
    (container,) = job["spec"]["template"]["spec"]["containers"]  # type: ignore[index]
    requests = container["resources"]["requests"]
    assert "nvidia.com/gpu" in requests
    for resource in requests:
        assert resource in covered or charged_as.get(resource) in covered, resource


def test_dra_job_example_claims_the_dra_pools_device_class() -> None:
    """The DRA Job names the LocalQueue of examples/dra-migration.yaml's DRA pool, claims a
    template of the DeviceClass the pool's resource is mapped from, and asks for no
    extended device resource."""
    docs = _documents()
    (job,) = [d for d in docs if d.get("kind") == "Job" and _claims(d)]
    (template,) = [d for d in docs if d.get("kind") == "ResourceClaimTemplate"]
    nodes, _, slices = read_cluster_file(DOC.parents[1] / "examples" / "dra-migration.yaml")
    namespace = job["metadata"]["namespace"]
    state = plan_state(nodes, [namespace], ChainPolicy(MFRS), resource_slices=slices)
    queue_name = job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    (local,) = [lq for lq in state.local_queues if lq["metadata"]["name"] == queue_name]
    (queue,) = [
        q for q in state.cluster_queues if q["metadata"]["name"] == local["spec"]["clusterQueue"]
    ]
    assert queue["metadata"]["name"].endswith("-dra-1d")
    covered = set(queue["spec"]["resourceGroups"][0]["coveredResources"])
    assert "gpu.nvidia.com/gpu" in covered
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == "gpu.nvidia.com"
    assert template["metadata"]["namespace"] == namespace
    (claim,) = _claims(job)
    assert claim["resourceClaimTemplateName"] == template["metadata"]["name"]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in container["resources"]["claims"]] == [claim["name"]]
    assert set(container["resources"]["requests"]) <= covered
