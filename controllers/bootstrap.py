"""Stage 1 (docs/worker.md): keep NFD and the device-manager DaemonSets installed.

One reconciler, one work-queue key. It renders every object with the pure functions of
``gpustack_operator.domain.bootstrap``, compares each with the informer caches, and
server-side-applies (field manager ``gpustack-operator-bootstrap``, forced: the fields are
ours by design) only what is missing or drifted — a steady state makes no writes. The
informers select ``app.kubernetes.io/managed-by=gpustack-operator``, so deleting or editing an
installed object is an event that re-runs the reconcile and restores it.

Rules:

- Objects of the desired names that exist without the managed-by label belong to someone
  else: they are left alone and reported with a Warning Event (delete them, or add the label,
  to let the operator manage them).
- NFD installed by someone else (its ``nodefeatures.nfd.k8s-sigs.io`` CRD exists and was not
  installed by us: no managed-by label, or a Helm release's annotation,
  ``installed_by_us``): nothing of NFD is installed, that NFD is used; the NodeFeatureRule
  ``gpustack-cpu-info`` still is, because the worker's CPU naming needs its annotations
  (docs/deploy.md, "Beside an NFD of your own").
- ``--disable-applications``: a disabled application is not installed. Device-manager
  DaemonSets of manufacturers no longer configured (or of a disabled device manager) are
  deleted; NFD is never uninstalled by the worker, because that would strip every Node label
  the queues are built from.
- RuntimeClasses are created only when missing, and never updated afterwards.
- NFD's CRDs and every ServiceAccount, role and binding are prerequisites shipped with deploy/
  (``gpustack_operator.domain.bootstrap.prerequisites``): the bootstrap checks they exist and
  never writes them, so the worker needs no right to write RBAC or CRDs (docs/security.md,
  "No escalation path"). While some are missing, what needs them is not installed and the
  reconcile is retried.

The controller runs only while its manager leads (controllers are leader-only in this
runtime). ``check_nfd_crds`` runs before the manager starts and reports missing NFD CRDs:
the worker's own informers on NodeFeatures cannot sync before the CRD exists.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import structlog

from gpustack_operator.apis import NODE_FEATURE_RULES
from gpustack_operator.domain.bootstrap import (
    DEFAULT_NFD_IMAGE,
    DEVICE_MANAGER,
    NFD_CRDS_DIR,
    NODE_FEATURE_DISCOVERY,
    BootstrapSettings,
    device_manager_prerequisites,
    installed_by_us,
    nfd_prerequisites,
    parse_disabled_applications,
    render_nfd_crds,
)
from gpustack_operator.domain.bootstrap.common import (
    COMPONENT_LABEL,
    MANAGED_SELECTOR,
    MANIFEST_COMPARISON,
)
from gpustack_operator.domain.bootstrap.crds import NODE_FEATURE_RULES_CRD, NODE_FEATURES_CRD
from gpustack_operator.domain.bootstrap.desired import desired_bootstrap
from gpustack_operator.domain.manufacturers import KNOWN_MANUFACTURERS
from gpustack_operator.domain.node.nodefeature import DEFAULT_SYSTEM_NAMESPACE
from gpustack_operator.environment import load_manufacturers, load_pci_class_prefixes
from gpustack_operator.runtime.cache import object_key
from gpustack_operator.runtime.client import ApiError, Client, NotFound
from gpustack_operator.runtime.controller import Request, Result
from gpustack_operator.runtime.informer import Informer
from gpustack_operator.runtime.manager import Manager
from gpustack_operator.runtime.resources import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    CONFIGMAPS,
    CRDS,
    DAEMONSETS,
    DEPLOYMENTS,
    PODS,
    ROLE_BINDINGS,
    ROLES,
    RUNTIME_CLASSES,
    SERVICE_ACCOUNTS,
    Resource,
)
from gpustack_operator.worker.common import (
    METADATA_OR_SPEC_CHANGED,
    Writer,
    is_managed_object,
    is_up_to_date,
)

log = structlog.get_logger(__name__)

JSON = dict[str, Any]
CONTROLLER_NAME: Final = "bootstrap"
FIELD_MANAGER: Final = "gpustack-operator-bootstrap"
KEY: Final = "bootstrap"
ENV_PREFIX: Final = "GPUSTACK_"
# Without an image the device manager cannot be rendered; look again after this long.
RETRY_SECONDS: Final = 60.0
# Every kind the bootstrap writes (besides RuntimeClasses and the NodeFeatureRule).
NAMESPACED_KINDS: Final = (CONFIGMAPS, DEPLOYMENTS, DAEMONSETS)
CLUSTER_KINDS: Final[tuple[Resource, ...]] = ()
# Kinds of the prerequisites it only reads.
PREREQUISITE_KINDS: Final = (
    SERVICE_ACCOUNTS,
    ROLES,
    ROLE_BINDINGS,
    CRDS,
    CLUSTER_ROLES,
    CLUSTER_ROLE_BINDINGS,
)
_KINDS: Final = {
    (r.api_version, r.kind): r
    for r in (*NAMESPACED_KINDS, *PREREQUISITE_KINDS, RUNTIME_CLASSES, NODE_FEATURE_RULES)
}
_NFD_COMPONENT: Final = "deploy/components/node-feature-discovery"
_NFD_CRDS_FIX: Final = (
    f"make deploy, or kubectl create -f {NFD_CRDS_DIR}/<name>.yaml for each one missing "
    "(docs/deploy.md)"
)
_DEVICE_MANAGER_RBAC: Final = "deploy/base/device-manager.yaml"


@dataclass(frozen=True)
class BootstrapConfig:
    """What the worker's flags and environment say about Stage 1."""

    namespace: str = DEFAULT_SYSTEM_NAMESPACE
    disabled: frozenset[str] = frozenset()
    """Applications not to install (``--disable-applications``)."""
    nfd_image: str = DEFAULT_NFD_IMAGE
    device_manager_image: str | None = None
    """``--device-manager-image``; None reads the worker's own Pod."""
    manufacturers: tuple[str, ...] = KNOWN_MANUFACTURERS
    """Manufacturers that get a device-manager DaemonSet (``--manufacturer``)."""
    pod_name: str | None = None
    """The worker's Pod (``KUBERNETES_POD_NAME``), read for its image and pull policy."""
    pod_namespace: str = DEFAULT_SYSTEM_NAMESPACE
    """Its namespace (``KUBERNETES_POD_NAMESPACE``, else the system namespace)."""
    settings: BootstrapSettings = field(default_factory=BootstrapSettings)

    @classmethod
    def from_environment(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        namespace: str | None = None,
        disabled: Iterable[str] = (),
        nfd_image: str = DEFAULT_NFD_IMAGE,
        device_manager_image: str | None = None,
        manufacturers: Iterable[str] | None = None,
        coexistence: bool = True,
    ) -> BootstrapConfig:
        """Read ``GPUSTACK_*`` overrides, the PCI classes and the Downward-API variables.

        Every ``GPUSTACK_*`` variable of *env* (default ``os.environ``) is propagated to the
        agents (docs/device-manager.md). *disabled* takes ``--disable-applications`` values
        (comma lists, ``*``). Raises ``ValueError`` for an unknown application or manufacturer,
        or a bad ``GPUSTACK_*`` value.
        """
        source = dict(os.environ if env is None else env)
        ns = namespace or source.get("KUBERNETES_POD_NAMESPACE") or DEFAULT_SYSTEM_NAMESPACE
        chosen = tuple(sorted(set(manufacturers or KNOWN_MANUFACTURERS)))
        unknown = [m for m in chosen if m not in KNOWN_MANUFACTURERS]
        if unknown:
            raise ValueError(
                f"unknown manufacturer(s) {', '.join(unknown)}: use "
                f"{', '.join(KNOWN_MANUFACTURERS)}"
            )
        settings = BootstrapSettings(
            namespace=ns,
            nfd_image=nfd_image,
            pci_class_prefixes=load_pci_class_prefixes(source),
            manufacturers=load_manufacturers(source),
            propagated_env={k: v for k, v in source.items() if k.startswith(ENV_PREFIX)},
            coexistence=coexistence,
        )
        return cls(
            namespace=ns,
            disabled=parse_disabled_applications(disabled),
            nfd_image=nfd_image,
            device_manager_image=device_manager_image or None,
            manufacturers=chosen,
            pod_name=source.get("KUBERNETES_POD_NAME") or None,
            pod_namespace=source.get("KUBERNETES_POD_NAMESPACE") or ns,
            settings=settings,
        )


def _established(crd: Mapping[str, Any] | None) -> bool:
    if crd is None or (crd.get("metadata") or {}).get("deletionTimestamp"):
        return False
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


class Bootstrap:
    """The reconciler and its caches (build with :func:`setup_bootstrap`)."""

    def __init__(self, manager: Manager, config: BootstrapConfig) -> None:
        self.manager = manager
        self.client: Client = manager.client
        self.config = config
        self.writer = Writer(manager.client, FIELD_MANAGER, manager.recorder, manager.fence)
        ns = config.namespace
        self.caches: dict[Resource, Informer] = {}
        for res in NAMESPACED_KINDS:
            self.caches[res] = manager.informer(res, namespace=ns, label_selector=MANAGED_SELECTOR)
        for res in CLUSTER_KINDS:
            self.caches[res] = manager.informer(res, label_selector=MANAGED_SELECTOR)
        # RuntimeClasses of anyone count (created only when missing); NFD's CRDs of anyone
        # tell whether another NFD is installed. Both informers are small by construction.
        self.runtime_classes = manager.informer(RUNTIME_CLASSES)
        self.nfd_crds = {
            name: manager.informer(CRDS, field_selector=f"metadata.name={name}")
            for name in (NODE_FEATURES_CRD, NODE_FEATURE_RULES_CRD)
        }
        self.rules: Informer | None = None
        self._image: tuple[str, str] | None = None
        builder = manager.controller(CONTROLLER_NAME).with_options(drain_timeout=10.0)
        predicate = METADATA_OR_SPEC_CHANGED
        for res in NAMESPACED_KINDS:
            builder.watches(
                res, self._enqueue, predicate, namespace=ns, label_selector=MANAGED_SELECTOR
            )
        for res in CLUSTER_KINDS:
            builder.watches(res, self._enqueue, predicate, label_selector=MANAGED_SELECTOR)
        builder.watches(RUNTIME_CLASSES, self._enqueue, predicate)
        for name in self.nfd_crds:
            builder.watches(CRDS, self._enqueue, predicate, field_selector=f"metadata.name={name}")
        # Our NodeFeatureRules, once their kind is served (:meth:`watch_rules`).
        builder.watches(
            NODE_FEATURE_RULES,
            self._enqueue,
            predicate,
            label_selector=MANAGED_SELECTOR,
            deferred=True,
        )
        self.controller = builder.complete(self.reconcile)

    @staticmethod
    def _enqueue(_obj: JSON) -> Iterable[str]:
        return (KEY,)

    def start(self) -> None:
        """Queue the first reconcile (every event afterwards queues the same key)."""
        self.controller.queue.add(KEY)

    # --- what the cluster says -------------------------------------------------------------

    def foreign_nfd(self) -> bool:
        """NFD's NodeFeature CRD exists and someone else installed it."""
        crd = self.nfd_crds[NODE_FEATURES_CRD].indexer.get(NODE_FEATURES_CRD)
        return crd is not None and not installed_by_us(crd)

    def rules_served(self) -> bool:
        """Whether NodeFeatureRules can be written now (their CRD is established)."""
        crd = self.nfd_crds[NODE_FEATURE_RULES_CRD].indexer.get(NODE_FEATURE_RULES_CRD)
        return _established(crd)

    def watch_rules(self) -> None:
        """Watch our NodeFeatureRules, once their kind is served (an informer on an unserved
        kind could never sync, so it cannot be a source from the start)."""
        if self.rules is not None:
            return
        self.controller.start_deferred_watch(NODE_FEATURE_RULES)
        self.rules = self.manager.informer(NODE_FEATURE_RULES, label_selector=MANAGED_SELECTOR)
        self.caches[NODE_FEATURE_RULES] = self.rules

    async def device_manager_image(self) -> tuple[str, str] | None:
        """(image, pull policy) of the agents: the flag, else the worker's own container."""
        if self.config.device_manager_image:
            return self.config.device_manager_image, self.config.settings.image_pull_policy
        if self._image is not None:
            return self._image
        if not self.config.pod_name:
            return None
        try:
            pod = await self.client.get(PODS, self.config.pod_name, self.config.pod_namespace)
        except ApiError as exc:
            log.warning("cannot read the worker's own Pod for its image", error=str(exc))
            return None
        containers = (pod.get("spec") or {}).get("containers") or []
        if not containers:
            return None
        # The worker container is the one running gpustack-operator; the first otherwise.
        chosen = next((c for c in containers if c.get("name") == "worker"), containers[0])
        image = str(chosen.get("image") or "")
        if not image:
            return None
        self._image = (image, str(chosen.get("imagePullPolicy") or "IfNotPresent"))
        return self._image

    # --- the reconcile -------------------------------------------------------------------------

    async def reconcile(self, req: Request) -> Result | None:
        config = self.config
        rules_served = self.rules_served()
        if rules_served:
            self.watch_rules()
        image: tuple[str, str] | None = None
        retry: Result | None = None
        nfd_wanted = NODE_FEATURE_DISCOVERY not in config.disabled and not self.foreign_nfd()
        nfd_ready = nfd_wanted and await self.prerequisites_present(
            NODE_FEATURE_DISCOVERY,
            nfd_prerequisites(config.settings),
            f"{_NFD_COMPONENT}, after make deploy created NFD's CRDs ({NFD_CRDS_DIR})",
        )
        if nfd_wanted and not nfd_ready:
            retry = Result(requeue_after=RETRY_SECONDS)
        if DEVICE_MANAGER not in config.disabled:
            if not await self.prerequisites_present(
                DEVICE_MANAGER, device_manager_prerequisites(config.settings), _DEVICE_MANAGER_RBAC
            ):
                retry = Result(requeue_after=RETRY_SECONDS)
            else:
                image = await self.device_manager_image()
                if image is None:
                    log.error(
                        "device-manager image unknown: pass --device-manager-image, or run the "
                        "worker in a Pod with KUBERNETES_POD_NAME set (Downward API); retrying",
                        retry_seconds=RETRY_SECONDS,
                    )
                    retry = Result(requeue_after=RETRY_SECONDS)
        desired = desired_bootstrap(
            config.settings,
            config.disabled,
            config.manufacturers,
            nfd=nfd_ready,
            rules_served=rules_served,
            agent_image=image,
        )
        applied = 0
        for want in desired.applied:
            applied += await self._ensure(want)
        for want in desired.created_if_missing:
            applied += await self._ensure(want, create_only=True)
        pruned = await self._prune(desired.applied, keep_device_managers=retry is not None)
        if applied or pruned:
            log.info("bootstrap applied", applied=applied, deleted=pruned)
        return retry

    async def prerequisites_present(
        self, application: str, prerequisites: list[JSON], shipped_in: str
    ) -> bool:
        """Whether every prerequisite of *application* exists (read by name); logs the
        missing ones and how to install them."""
        missing = []
        for obj in prerequisites:
            meta = obj["metadata"]
            try:
                await self.client.get(self._resource(obj), meta["name"], meta.get("namespace"))
            except NotFound:
                missing.append(f"{obj['kind']} {object_key(obj)}")
        if missing:
            log.error(
                "prerequisites missing: not installing the application until they exist",
                application=application,
                missing=missing,
                fix=f"kubectl apply -k on an overlay that includes {shipped_in} (docs/deploy.md)",
                retry_seconds=RETRY_SECONDS,
            )
        return not missing

    def _resource(self, obj: Mapping[str, Any]) -> Resource:
        return _KINDS[(str(obj["apiVersion"]), str(obj["kind"]))]

    async def _ensure(self, want: JSON, *, create_only: bool = False) -> int:
        """Apply *want* unless the cache already matches or the name belongs to someone else.

        With *create_only* an existing object of the name, whoever made it, is left as is.
        """
        res = self._resource(want)
        cache = self.caches.get(res) or (self.runtime_classes if res == RUNTIME_CLASSES else None)
        have = cache.indexer.get(object_key(want)) if cache is not None else None
        if have is not None and (
            create_only
            or (is_managed_object(have) and is_up_to_date(have, want, MANIFEST_COMPARISON))
        ):
            return 0
        if have is None:
            # Not in our (label-selected) cache: absent, foreign, or the cache lags a write.
            meta = want["metadata"]
            try:
                existing = await self.client.get(res, meta["name"], meta.get("namespace"))
            except NotFound:
                existing = None
            if existing is not None and not is_managed_object(existing):
                if not create_only:
                    self.writer.not_ours(res, existing)
                return 0
            if existing is not None and (
                create_only or is_up_to_date(existing, want, MANIFEST_COMPARISON)
            ):
                return 0
        await self.writer.apply(res, want, existed=have is not None)
        return 1

    async def _prune(self, desired: list[JSON], *, keep_device_managers: bool) -> int:
        """Delete our device-manager DaemonSets that are no longer desired."""
        if keep_device_managers:
            return 0
        wanted = {object_key(o) for o in desired if o["kind"] == "DaemonSet"}
        deleted = 0
        for ds in self.caches[DAEMONSETS].indexer.list():
            labels = (ds.get("metadata") or {}).get("labels") or {}
            if labels.get(COMPONENT_LABEL) != DEVICE_MANAGER or object_key(ds) in wanted:
                continue
            if await self.writer.delete(DAEMONSETS, ds, "device manager no longer configured"):
                deleted += 1
        return deleted


def setup_bootstrap(manager: Manager, config: BootstrapConfig) -> Bootstrap:
    """Register the bootstrap controller on *manager* (it runs while the manager leads)."""
    bootstrap = Bootstrap(manager, config)
    bootstrap.start()
    return bootstrap


async def check_nfd_crds(client: Client, config: BootstrapConfig) -> bool:
    """Before the manager starts: whether NFD's CRDs are installed (the worker's informers on
    NodeFeatures need them). Missing ones are logged with the fix; the worker never creates
    them (they ship in deploy/nfd-crds, created by ``make deploy`` where none exist)."""
    if NODE_FEATURE_DISCOVERY in config.disabled:
        return False
    missing = []
    for crd in render_nfd_crds():
        name = crd["metadata"]["name"]
        try:
            existing = await client.get(CRDS, name)
        except NotFound:
            missing.append(name)
            continue
        if name == NODE_FEATURES_CRD and not installed_by_us(existing):
            log.info("NFD is installed by someone else; using it", crd=NODE_FEATURES_CRD)
            return False
    if missing:
        log.error(
            "NFD's CRDs are missing; the worker does not create them",
            missing=missing,
            fix=_NFD_CRDS_FIX,
        )
    return not missing
