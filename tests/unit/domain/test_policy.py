"""The chain policy and its flags (docs/configuration.md, "Chain policy")."""

from __future__ import annotations

import pytest

from gpustack_operator.cli import build_parser
from gpustack_operator.commands.policy_flags import READING_FLAGS, policy_from_args
from gpustack_operator.domain.chain.kueue import KueueVersion
from gpustack_operator.domain.chain.queues import QuotaResources
from gpustack_operator.domain.chain.tenancy import Tenancy
from gpustack_operator.domain.node.availability import LifecycleTimers
from gpustack_operator.domain.plan.policy import ChainPolicy

COMMANDS = {
    "worker": ["worker"],
    "plan": ["plan"],
    "sim": ["sim"],
}
FLAGS = [
    "--manufacturer",
    "nvidia",
    "--manufacturer",
    "amd",
    "--system-namespace",
    "ops",
    "--excluded-namespaces",
    "kube-system,ops,batch",
    "--kueue-version",
    "v1beta1",
    "--topology",
    "off",
    "--soft-grace",
    "30",
    "--maintenance-grace",
    "10m",
    "--join-window",
    "5",
    "--device-grace",
    "1m",
    "--quota-resources",
    "credits",
    "--flavor-tolerations",
    "dedicated",
    "--tenancy",
    "shared-nodes",
    "--virtual-scheduler",
    "--tenant-quota-cap",
    "nvidia.com/gpu=4,amd.com/gpu=0",
    "--soft-grace",
    "30",
    "--maintenance-grace",
    "600.5",
    "--join-window",
    "0",
    "--device-grace",
    "90",
]


def policy_of(argv: list[str], env: dict[str, str] | None = None) -> ChainPolicy:
    return policy_from_args(build_parser(env or {}).parse_args(argv), env={})


def test_every_command_builds_the_same_policy_from_the_same_flags() -> None:
    policies = {name: policy_of([*argv, *FLAGS]) for name, argv in COMMANDS.items()}
    assert len(set(map(repr, policies.values()))) == 1, policies
    policy = policies["worker"]
    assert list(policy.manufacturers) == ["amd", "nvidia"]
    assert policy.namespaces_without_queues == ("ops", "kube-system", "batch")
    assert policy.kueue_version is KueueVersion.V1BETA1
    assert policy.quota_resources is QuotaResources.CREDITS
    assert policy.flavor_tolerations == ("dedicated",)
    assert policy.tenancy is Tenancy.SHARED_NODES and policy.virtual_scheduler
    assert policy.tenant_quota_caps == {"amd.com/gpu": 0, "nvidia.com/gpu": 4}
    assert policy.lifecycle == LifecycleTimers(
        soft_grace=30, maintenance_grace=600.5, join_window=0, device_grace=90
    )


def test_the_lifecycle_timers_default_and_refuse_what_is_no_duration() -> None:
    assert policy_of(["worker"]).lifecycle == LifecycleTimers()
    assert policy_of(["plan"], {"GPUSTACK_SOFT_GRACE": "5"}).lifecycle.soft_grace == 5
    for bad in ("-1", "soon", "inf", "nan"):
        with pytest.raises(SystemExit):
            build_parser({}).parse_args(["plan", "--join-window", bad])
    with pytest.raises(ValueError, match="soft_grace"):
        LifecycleTimers(soft_grace=-1)


def test_the_shared_variable_sets_every_command_and_the_command_own_wins() -> None:
    env = {"GPUSTACK_QUOTA_RESOURCES": "credits", "GPUSTACK_PLAN_QUOTA_RESOURCES": "device"}
    assert policy_of(["worker"], env).quota_resources is QuotaResources.CREDITS
    assert policy_of(["sim"], env).quota_resources is QuotaResources.CREDITS
    assert policy_of(["plan"], env).quota_resources is QuotaResources.DEVICE
    flag = ["plan", "--quota-resources", "credits"]
    assert policy_of(flag, env).quota_resources is QuotaResources.CREDITS


def test_the_tenant_flags_read_the_shared_and_the_command_variables() -> None:
    """The tenant settings are policy flags: ``GPUSTACK_<FLAG>`` for every command, the
    command's own variable (the names the tenant docs give) over it."""
    env = {
        "GPUSTACK_TENANCY": "pseudo-nodes",
        "GPUSTACK_WORKER_TENANCY": "auto",
        "GPUSTACK_VIRTUAL_SCHEDULER": "true",
        "GPUSTACK_WORKER_TENANT_QUOTA_CAP": "nvidia.com/gpu=1",
    }
    worker = policy_of(["worker"], env)
    assert worker.tenancy is None and worker.virtual_scheduler
    assert worker.tenant_quota_caps == {"nvidia.com/gpu": 1}
    plan = policy_of(["plan"], env)
    assert plan.tenancy is Tenancy.PSEUDO_NODES and plan.tenant_quota_caps == {}
    assert policy_of(["sim"], env).tenancy is Tenancy.PSEUDO_NODES


def test_queues_takes_the_flags_that_change_what_it_reads_and_no_others(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``queues`` reads the chain: the flags that shape it but not a reader's view are not
    accepted (docs/configuration.md, ``gpustack-operator queues``)."""
    reading = FLAGS[: FLAGS.index("--quota-resources")]
    assert {f for f in reading if f.startswith("--")} == READING_FLAGS
    queues, worker = policy_of(["queues", *reading]), policy_of(["worker", *reading])
    assert repr(queues) == repr(worker)
    for flag in ("--quota-resources", "--flavor-tolerations", "--tenancy", "--tenant-quota-cap"):
        with pytest.raises(SystemExit) as exit_info:
            build_parser({}).parse_args(["queues", flag, "x"])
        assert exit_info.value.code == 2
        assert f"unrecognized arguments: {flag}" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        build_parser({}).parse_args(["queues", "--virtual-scheduler"])


def test_the_tenancy_is_set_or_told_from_the_nodes() -> None:
    synced = {"metadata": {"name": "h", "labels": {"vcluster.loft.sh/managed-by": "t"}}}
    auto = ChainPolicy(tenant_quota_caps={"nvidia.com/gpu": 2})
    assert auto.tenant_settings([synced]).tenancy is Tenancy.SHARED_NODES
    assert auto.tenant_settings([synced]).quota_caps == {"nvidia.com/gpu": 2}
    assert auto.tenant_settings().tenancy is Tenancy.ORDINARY  # no Node: ordinary
    resolved = auto.with_tenancy_of([synced])
    assert resolved.tenancy is Tenancy.SHARED_NODES
    assert resolved.tenant_settings().tenancy is Tenancy.SHARED_NODES  # nodes no longer read
    pinned = ChainPolicy(tenancy=Tenancy.ORDINARY)
    assert pinned.with_tenancy_of([synced]) is pinned


def test_older_spellings_still_set_the_policy() -> None:
    assert policy_of(["worker", "--namespace", "ops"]).system_namespace == "ops"
    assert policy_of(["plan", "--kueue-api-version", "v1beta1"]).kueue_version == "v1beta1"


def test_bad_values_name_the_choices() -> None:
    with pytest.raises(SystemExit):
        build_parser({}).parse_args(["plan", "--kueue-version", "v2"])
    with pytest.raises(ValueError, match="acme"):
        policy_of(["plan", "--manufacturer", "acme"])
    with pytest.raises(ValueError, match="at least one manufacturer"):
        ChainPolicy(manufacturers={})
    with pytest.raises(SystemExit):
        build_parser({}).parse_args(["worker", "--tenancy", "private"])
    with pytest.raises(ValueError, match=r"nvidia\.com/gpu=-1"):
        ChainPolicy(tenant_quota_caps={"nvidia.com/gpu": -1})


def test_the_kueue_version_is_the_pinned_one_or_the_newest_served() -> None:
    auto = ChainPolicy()
    assert auto.kueue_version_among(["v1beta1", "v1beta2"]) is KueueVersion.V1BETA2
    assert auto.kueue_version_among(["v1beta1"]) is KueueVersion.V1BETA1
    assert auto.kueue_version_among([]) is None
    assert auto.offline_kueue_version is KueueVersion.V1BETA2
    pinned = ChainPolicy(kueue_version=KueueVersion.V1BETA1)
    assert pinned.kueue_version_among(["v1beta2"]) is None
    assert pinned.offline_kueue_version is KueueVersion.V1BETA1
