"""The chain policy's flags, the same for ``worker``, ``plan``, ``sim`` and ``queues``.

One place adds them and one function turns them into the domain's :class:`ChainPolicy`
(docs/configuration.md, "Chain policy"): a new option of the chain is a field there and a
flag here, and every command that computes or reads the chain gets it. Each flag also comes
from ``GPUSTACK_<FLAG>``, shared by the four commands; ``GPUSTACK_<COMMAND>_<FLAG>`` wins.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable, Mapping
from dataclasses import replace
from enum import StrEnum
from pathlib import Path
from typing import Final, TypeVar

from gpustack_operator.commands.argtypes import comma_list, parse_duration
from gpustack_operator.commands.envflags import SHARED_ENV
from gpustack_operator.domain.chain.declaredpools import (
    PoolResult,
    validate_declared_pools,
)
from gpustack_operator.domain.chain.kueue import KueueVersion
from gpustack_operator.domain.chain.poolchain import ProvisioningSettings
from gpustack_operator.domain.chain.queues import (
    DEFAULT_EXCLUDED_NAMESPACES,
    DEFAULT_HOST_COUNTING,
    DEFAULT_QUOTA_RESOURCES,
    HostCounting,
    QuotaResources,
)
from gpustack_operator.domain.chain.teams import Teams, TeamsError, validate_teams
from gpustack_operator.domain.chain.tenancy import Tenancy
from gpustack_operator.domain.declarationtext import DeclarationError
from gpustack_operator.domain.manufacturers import KNOWN_MANUFACTURERS
from gpustack_operator.domain.node.availability import LifecycleTimers
from gpustack_operator.domain.node.nodefeature import DEFAULT_SYSTEM_NAMESPACE
from gpustack_operator.domain.node.nodetopology import TopologyPolicy
from gpustack_operator.domain.node.taints import TolerationPolicy
from gpustack_operator.domain.plan.policy import DEFAULT_UNPOOLED_SETTLING, ChainPolicy
from gpustack_operator.environment import load_manufacturers

AUTO = "auto"
TENANCY_CHOICES = (AUTO, *(t.value for t in Tenancy))
READING_FLAGS: Final = frozenset(
    {
        "--manufacturer",
        "--system-namespace",
        "--excluded-namespaces",
        "--kueue-version",
        "--topology",
        "--soft-grace",
        "--maintenance-grace",
        "--join-window",
        "--device-grace",
    }
)
"""The flags a command that only reads the chain (``queues``) takes: the others change what
the worker builds, not what a reader finds."""

_Choice = TypeVar("_Choice", bound=StrEnum)


def _auto_or(raw: str, kind: type[_Choice]) -> _Choice | None:
    """``auto`` (None: the program decides) or a value of *kind*, naming the choices."""
    value = raw.strip()
    if value == AUTO:
        return None
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join([AUTO, *(v.value for v in kind)])
        raise argparse.ArgumentTypeError(f"{raw!r}: choose from {choices}") from None


def kueue_version(raw: str) -> KueueVersion | None:
    """``auto`` (None: the newest served), ``v1beta2`` or ``v1beta1``."""
    return _auto_or(raw, KueueVersion)


def tolerations_policy(raw: str) -> TolerationPolicy:
    """``common`` (None), ``none`` (()) or a comma-separated list of taint keys."""
    value = raw.strip()
    if value == "common":
        return None
    if value == "none":
        return ()
    keys = tuple(k for k in comma_list(value) if k)
    if not keys:
        raise argparse.ArgumentTypeError(
            f"{raw!r}: expected common, none or a comma-separated list of taint keys"
        )
    return keys


def topology_policy(raw: str) -> TopologyPolicy:
    """``auto`` (the published level sets), ``off``, or a comma-separated level list, coarse
    to fine (docs/topology.md, "The switch")."""
    value = raw.strip()
    if value == AUTO:
        return TopologyPolicy()
    if value == "off":
        return TopologyPolicy(enabled=False, reason="turned off by --topology=off")
    levels = tuple(k for k in comma_list(value) if k)
    try:
        if not levels:
            raise ValueError("no level given")
        return TopologyPolicy(levels=levels)
    except ValueError as err:
        raise argparse.ArgumentTypeError(
            f"{raw!r}: {err}; expected auto, off or a comma-separated list of node-label keys"
        ) from None


def tenancy(raw: str) -> Tenancy | None:
    """``auto`` (None: told from the Nodes) or a kind of cluster (docs/tenants.md)."""
    return _auto_or(raw, Tenancy)


def non_negative_duration(raw: str) -> float:
    """``0``, ``30s``, ``5m``: seconds, at least 0."""
    value = parse_duration(raw)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a duration of at least 0, got {raw!r}")
    return value


def quota_caps(raw: str) -> dict[str, int]:
    """``RESOURCE=N,...`` (``nvidia.com/gpu=4``): the declared cap per device resource."""
    caps: dict[str, int] = {}
    for item in comma_list(raw):
        resource, sep, amount = item.partition("=")
        if not sep or not resource.strip() or not amount.strip().isdigit():
            raise argparse.ArgumentTypeError(
                f"{item!r}: expected RESOURCE=N with a whole number, e.g. nvidia.com/gpu=4"
            )
        caps[resource.strip()] = int(amount)
    return caps


def quota_resources(raw: str) -> QuotaResources:
    """``device`` or ``credits`` (docs/devices.md, "Quota resources")."""
    try:
        return QuotaResources(raw.strip())
    except ValueError:
        choices = ", ".join(q.value for q in QuotaResources)
        raise argparse.ArgumentTypeError(f"{raw!r}: choose from {choices}") from None


def host_counting(raw: str) -> HostCounting:
    """``every-pool`` or ``once`` (docs/worker.md, "CPU and memory: counted in every pool,
    or once")."""
    try:
        return HostCounting(raw.strip())
    except ValueError:
        choices = ", ".join(h.value for h in HostCounting)
        raise argparse.ArgumentTypeError(f"{raw!r}: choose from {choices}") from None


def add_quota_resources_flag(parser: argparse._ActionsContainer) -> None:
    """Add ``--quota-resources {device,credits}`` (docs/devices.md, "Quota resources")."""
    _shared(
        parser.add_argument(
            "--quota-resources",
            type=quota_resources,
            default=DEFAULT_QUOTA_RESOURCES,
            metavar="|".join(q.value for q in QuotaResources),
            help="what device ClusterQueues are measured in: device = the pool's own resource "
            "(nvidia.com/gpu, nvidia.com/mig-1g.10gb), so plain Jobs asking for it are "
            "admitted; credits = credits.gpustack.ai/<manufacturer> "
            f"(default: {DEFAULT_QUOTA_RESOURCES.value})",
        )
    )


def _shared(action: argparse.Action) -> argparse.Action:
    setattr(action, SHARED_ENV, True)
    return action


class _Only:
    """A parser proxy that adds only the flags named in *only* (every one with None); any
    other becomes a detached Action that no parser knows, so callers may still mark it."""

    def __init__(self, parser: argparse._ActionsContainer, only: frozenset[str] | None) -> None:
        self.parser = parser
        self.only = only

    def add_argument(self, *names: str, **kwargs: object) -> argparse.Action:
        if self.only is not None and not set(names) & self.only:
            return argparse.Action(names, dest="_skipped")
        return self.parser.add_argument(*names, **kwargs)  # type: ignore[arg-type]


def add_policy_flags(
    parser: argparse._ActionsContainer, *, only: frozenset[str] | None = None
) -> None:
    """Every flag of the chain policy (docs/configuration.md, "Chain policy"); with *only*,
    just those (a flag left out takes its default in :func:`policy_from_args`)."""
    if only is not None:
        parser = _Only(parser, only)  # type: ignore[assignment]
    default_ns = os.environ.get("KUBERNETES_POD_NAMESPACE") or DEFAULT_SYSTEM_NAMESPACE
    _shared(
        parser.add_argument(
            "--manufacturer",
            action="append",
            metavar="NAME",
            help=f"accelerator manufacturer to profile (repeatable; default: all of "
            f"{', '.join(KNOWN_MANUFACTURERS)})",
        )
    )
    _shared(
        parser.add_argument(
            "--system-namespace",
            default=default_ns,
            metavar="NAMESPACE",
            help="the operator's namespace: NodeFeatures go there and it gets no LocalQueues "
            f"(default: $KUBERNETES_POD_NAMESPACE, else {DEFAULT_SYSTEM_NAMESPACE})",
        )
    )
    _shared(
        parser.add_argument(
            "--excluded-namespaces",
            type=comma_list,
            default=list(DEFAULT_EXCLUDED_NAMESPACES),
            metavar="A,B",
            help="namespaces that get no LocalQueues; the system namespace never does "
            f"(default: {','.join(DEFAULT_EXCLUDED_NAMESPACES)})",
        )
    )
    _shared(
        parser.add_argument(
            "--kueue-version",
            type=kueue_version,
            default=None,
            metavar="auto|v1beta2|v1beta1",
            help="Kueue API version to write; auto: the newest the cluster serves "
            "(v1beta2, else v1beta1; without a cluster v1beta2) (default: auto)",
        )
    )
    add_quota_resources_flag(parser)
    _shared(
        parser.add_argument(
            "--host-counting",
            type=host_counting,
            default=DEFAULT_HOST_COUNTING,
            metavar="|".join(h.value for h in HostCounting),
            help="how a node's CPU and memory count in the pools it feeds: every-pool = in "
            "its general pool and in each device pool (the reference's arithmetic); once = "
            "divided evenly among them, so they are never admitted twice "
            f"(default: {DEFAULT_HOST_COUNTING.value})",
        )
    )
    _shared(
        parser.add_argument(
            "--flavor-tolerations",
            type=tolerations_policy,
            default=None,
            metavar="common|none|KEY,...",
            help="which NoSchedule/NoExecute taints common to a flavor's nodes its "
            "tolerations cover: all of them, none, or only these keys; node-lifecycle taints "
            "never (default: common)",
        )
    )
    _shared(
        parser.add_argument(
            "--topology",
            type=topology_policy,
            default=TopologyPolicy(),
            metavar="auto|off|LEVEL,...",
            help="Kueue Topology-Aware Scheduling: auto builds TAS flavors for nodes that "
            "publish topology labels (GKE, EKS, GFD clique, Topograph); off keeps every flavor "
            "non-TAS; a list of node-label keys, coarse to fine, is used instead of the "
            "published sets (kubernetes.io/hostname is always the last level) (default: auto)",
        )
    )
    _add_tenant_flags(parser)
    _shared(
        parser.add_argument(
            "--unpooled-settling",
            type=non_negative_duration,
            default=DEFAULT_UNPOOLED_SETTLING,
            metavar="DURATION",
            help="how long a new node's device sources (our agent, GFD, a device plugin) get "
            "before its devices are reported as feeding no pool, unless our agent has "
            "published for it (default: 5m)",
        )
    )
    _shared(
        parser.add_argument(
            "--teams",
            default=None,
            metavar="FILE",
            help="the teams declaration (docs/teams.md): each team's namespaces and share of "
            "the pools; the worker prefers the ConfigMap gpustack-teams in the system "
            "namespace when it exists (default: no teams)",
        )
    )
    _add_pool_flags(parser)
    _add_lifecycle_flags(parser)


def provisioning_choice(raw: str) -> bool | None:
    """``auto`` (None: asked of the cluster), ``on`` or ``off``."""
    value = raw.strip()
    choices = {AUTO: None, "on": True, "off": False}
    if value not in choices:
        raise argparse.ArgumentTypeError(f"{raw!r}: choose from auto, on, off")
    return choices[value]


def _add_pool_flags(parser: argparse._ActionsContainer) -> None:
    """``--declared-pools`` and ``--provisioning-requests`` (docs/autoscaling.md)."""
    _shared(
        parser.add_argument(
            "--declared-pools",
            type=Path,
            default=None,
            metavar="FILE",
            help="pools a person declares where no NodePool or Cluster API node group "
            "describes them (GKE node pools): a YAML file, docs/autoscaling.md (default: none)",
        )
    )
    _shared(
        parser.add_argument(
            "--provisioning-requests",
            type=provisioning_choice,
            default=None,
            metavar="auto|on|off",
            help="give autoscaled pools with a provisioning class a ProvisioningRequest "
            "admission check; auto: when Kueue serves ProvisioningRequestConfig and the "
            "cluster autoscaling.x-k8s.io/v1 ProvisioningRequests (plan: off) (default: auto)",
        )
    )


def read_declared_pools(
    path: Path, manufacturers_by_resource: Mapping[str, str]
) -> tuple[PoolResult, ...]:
    """The pools of a declaration file, by the validation the worker applies to its
    ConfigMap (docs/autoscaling.md); ``ValueError`` naming the file and the fix."""
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"--declared-pools {path}: cannot read: {exc.strerror}") from None
    try:
        return validate_declared_pools(text, manufacturers_by_resource)
    except DeclarationError as exc:
        raise ValueError(f"--declared-pools {path}: {exc}") from None


_LIFECYCLE_FLAGS: Final = (
    (
        "soft_grace",
        "how long a cordoned or NotReady node keeps counting in its queues' quotas",
    ),
    (
        "maintenance_grace",
        "how long a node in a GPU driver upgrade or MIG change keeps counting, with its "
        "installed devices",
    ),
    ("join_window", "how long a withheld node must look usable before it counts again"),
    (
        "device_grace",
        "how long devices missing from allocatable while capacity still reports them keep "
        "counting (a device plugin restarting)",
    ),
)


def _add_lifecycle_flags(parser: argparse._ActionsContainer) -> None:
    """The availability rule's timers (docs/node-lifecycle.md, "Timers")."""
    defaults = LifecycleTimers()
    for name, help_ in _LIFECYCLE_FLAGS:
        _shared(
            parser.add_argument(
                "--" + name.replace("_", "-"),
                type=non_negative_duration,
                default=getattr(defaults, name),
                metavar="DURATION",
                help=f"{help_} (default: {getattr(defaults, name):g}s; docs/node-lifecycle.md)",
            )
        )


def _add_tenant_flags(parser: argparse._ActionsContainer) -> None:
    """``--tenancy``, ``--virtual-scheduler`` and ``--tenant-quota-cap`` (docs/tenants.md)."""
    _shared(
        parser.add_argument(
            "--tenancy",
            type=tenancy,
            default=None,
            metavar="|".join(TENANCY_CHOICES),
            help="the kind of cluster: ordinary (also a vCluster tenant on private nodes), "
            "shared-nodes (a vCluster tenant on synced host nodes), pseudo-nodes (a vCluster "
            "tenant of pseudo nodes); auto: told from the Nodes (default: auto)",
        )
    )
    _shared(
        parser.add_argument(
            "--virtual-scheduler",
            action="store_true",
            default=False,
            help="a shared-node tenant runs vCluster's virtual scheduler, which places pods by "
            "the tenant's own Node copies: flavors may then select any label they carry",
        )
    )
    _shared(
        parser.add_argument(
            "--tenant-quota-cap",
            type=quota_caps,
            default={},
            metavar="RESOURCE=N,...",
            help="in a shared-node tenant, this tenant's share of each device resource, e.g. "
            "nvidia.com/gpu=4: it bounds every device ClusterQueue's quota (default: none; "
            "the quota is then the host's whole, shared capacity)",
        )
    )


def policy_from_args(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> ChainPolicy:
    """The chain policy the flags describe; ``ValueError`` naming a bad value.

    The manufacturers' facts come from ``GPUSTACK_<MFR>_*`` in *env* (``None``: the process
    environment), docs/devices.md."""
    policy = ChainPolicy(
        manufacturers=load_manufacturers(env),
        system_namespace=args.system_namespace,
        excluded_namespaces=tuple(args.excluded_namespaces),
        kueue_version=args.kueue_version,
        quota_resources=getattr(args, "quota_resources", DEFAULT_QUOTA_RESOURCES),
        host_counting=getattr(args, "host_counting", DEFAULT_HOST_COUNTING),
        flavor_tolerations=getattr(args, "flavor_tolerations", None),
        tenancy=getattr(args, "tenancy", None),
        virtual_scheduler=getattr(args, "virtual_scheduler", False),
        tenant_quota_caps=getattr(args, "tenant_quota_cap", {}),
        unpooled_settling=getattr(args, "unpooled_settling", DEFAULT_UNPOOLED_SETTLING),
        topology=getattr(args, "topology", TopologyPolicy()),
        lifecycle=LifecycleTimers(
            **{
                name: getattr(args, name, getattr(LifecycleTimers(), name))
                for name, _ in _LIFECYCLE_FLAGS
            }
        ),
    )
    if args.manufacturer:
        policy = policy.with_manufacturers(args.manufacturer)
    teams_file = getattr(args, "teams", None)
    if teams_file:
        policy = replace(policy, teams=read_teams_file(teams_file, policy.manufacturers))
    declared = getattr(args, "declared_pools", None)
    if declared is not None:
        pools = read_declared_pools(declared, policy.manufacturers_by_resource)
        policy = replace(policy, declared_pools=pools)
    served = getattr(args, "provisioning_requests", None)
    if served is not None:
        policy = replace(policy, provisioning=ProvisioningSettings(served=served))
    return policy


def read_teams_file(path: str, manufacturers: Iterable[str]) -> Teams:
    """The declaration in *path* (docs/teams.md); ``ValueError`` naming the file and the fix."""
    try:
        text = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(
            f"--teams {path}: cannot read it ({exc.strerror}): check the path"
        ) from None
    try:
        return validate_teams(text, manufacturers)
    except TeamsError as exc:
        raise ValueError(f"--teams {path}: {exc}") from None
