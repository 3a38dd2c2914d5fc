"""A real Kubernetes control plane and real Kueue on loopback, for the real-cluster tier.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and Kueue's manager run as
processes built by ``hack/realcluster/build.sh`` from the Go modules its go.mod pins
(docs/realcluster.md). Every listener binds 127.0.0.1 on a free port; certificates come from
a CA made for the run (``pki.py``). Kueue runs with its real CRDs (all of
``../shared/crds/kueue-v0.19.2``), its real webhooks and CRD conversion
(``../shared/kueue-v0.19.2-extras``), registered by URL with that CA, since no Service can
route to a process outside the cluster. There are no kubelets: ``nodes.py`` keeps the Nodes a
test calls alive. Each process logs to ``<workdir>/logs/<name>.log``, which every failure names.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import functools
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.realcluster.pki import CertificateAuthority, Pair, service_account_keys
from tests.realcluster.reaper import LOG_ENV, REAPER, left_behind

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "hack" / "realcluster" / "build.sh"
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kueue")
KUEUE_NAMESPACE = "kueue-system"
SERVICE_CIDR = "10.0.0.0/24"


class RealClusterError(RuntimeError):
    """The real control plane could not be built, started or stopped; the message says which
    component, why, and the log to read."""


def shared_dir() -> Path | None:
    """``../shared`` beside the repository (or the parent of $GPUSTACK_SHARED_CRDS)."""
    override = os.environ.get("GPUSTACK_SHARED_CRDS")
    path = Path(override).parent if override else REPO.parent / "shared"
    return path.resolve() if (path / "crds").is_dir() else None


@dataclass(frozen=True)
class Binaries:
    """The built components and the versions they were built from."""

    directory: Path
    versions: Mapping[str, str]

    def path(self, component: str) -> Path:
        return self.directory / component


def _read_versions(directory: Path) -> dict[str, str]:
    versions: dict[str, str] = {}
    for line in (directory / "versions").read_text().splitlines():
        name, _, value = line.partition("=")
        versions[name] = value
    return versions


def cached_binaries() -> Binaries | None:
    """The binaries the pins select, if a build left them in the cache (no building)."""
    try:
        found = subprocess.run(
            [str(BUILD_SCRIPT), "--dir"], capture_output=True, text=True, check=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError):
        return None
    directory = Path(found.stdout.strip())
    if not all((directory / c).is_file() for c in COMPONENTS):
        return None
    if not (directory / "versions").is_file():
        return None
    return Binaries(directory, _read_versions(directory))


def build_binaries(timeout: float = 3600) -> Binaries:
    """Build (or reuse) the binaries; a failure is the build script's one-line reason."""
    result = subprocess.run(
        [str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=timeout, check=False
    )
    if result.returncode != 0:
        lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
        raise RealClusterError(lines[-1] if lines else f"{BUILD_SCRIPT} failed")
    directory = Path(result.stdout.strip().splitlines()[-1])
    return Binaries(directory, _read_versions(directory))


def free_port() -> int:
    """A port nothing listens on at this moment (the kernel's choice on 127.0.0.1)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_in_use(port: int) -> bool:
    """Whether something still listens on 127.0.0.1:*port*."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _as_list(documents: Sequence[Mapping[str, Any]]) -> str:
    """Objects as one v1 List in JSON (PyYAML's pure-Python dump of Kueue's CRDs is slow)."""
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(documents)})


def _load_all(path: Path) -> list[Any]:
    """Every YAML document of *path*, with libyaml's loader where PyYAML has it: a copy of
    its own for each caller, which may change them (parsed once per test process: Kueue's
    CRDs are 1.7 MB, seconds of a busy CPU for each plane)."""
    return list(json.loads(_parsed(path, path.stat().st_mtime_ns)))


@functools.cache
def _parsed(path: Path, mtime_ns: int) -> str:
    """*path*'s YAML documents as one JSON text (a fresh copy loads faster than it deep-copies);
    *mtime_ns* keys a file changed since."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return json.dumps(list(yaml.load_all(path.read_text(), Loader=loader)))


def _tail(path: Path, lines: int = 3) -> str:
    """The last lines of a log, after its last error line when it has one (a manager that
    exits logs its shutdown after the reason)."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    errors = [line for line in text if '"level":"error"' in line or line.startswith("E")]
    picked = ([errors[-1]] if errors else []) + text[-lines:]
    return " | ".join(line[:600] for line in picked)


@dataclass
class Process:
    """One component: its command line, log file and ports."""

    name: str
    argv: list[str]
    log: Path
    ports: tuple[int, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            # A session of its own: stop() ends the process and anything it started.
            self.popen = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, **self.env, LOG_ENV: str(self.log)},
            )
        REAPER.guard(self.popen.pid)

    def exited(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def failure(self, what: str) -> RealClusterError:
        code = self.exited()
        state = f"exited with {code}" if code is not None else "is running"
        return RealClusterError(
            f"{self.name} {what} ({state}); log: {self.log}; last lines: {_tail(self.log)}"
        )

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM to the process's group, SIGKILL after *grace*; done once the process and
        everything it started (its session) are gone, even where it exited before."""
        if self.popen is None:
            return
        group = self.popen.pid
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if self.popen.poll() is not None and not _group_alive(group):
                break
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(grace)
            with contextlib.suppress(RealClusterError):
                wait_until(lambda: not _group_alive(group), timeout=grace, what="its group ended")
        REAPER.release(group)


def _group_alive(group: int) -> bool:
    """Whether any process of process group *group* still runs (or awaits its parent)."""
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def wait_until(
    check: Any, *, timeout: float, what: str, process: Process | None = None, every: float = 0.2
) -> None:
    """Poll *check* until it is true; a process that exits meanwhile fails at once."""
    deadline = time.monotonic() + timeout
    while True:
        if process is not None and process.exited() is not None:
            raise process.failure(f"stopped while waiting for {what}")
        with contextlib.suppress(Exception):
            if check():
                return
        if time.monotonic() > deadline:
            if process is not None:
                raise process.failure(f"not {what} after {timeout:.0f} s")
            raise RealClusterError(f"not {what} after {timeout:.0f} s")
        time.sleep(every)


def kubeconfig_text(server: str, ca: Path, client: Pair, user: str) -> str:
    """A kubeconfig for *user* authenticating with a client certificate."""
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "realcluster",
                    "cluster": {"server": server, "certificate-authority": str(ca)},
                }
            ],
            "users": [
                {
                    "name": user,
                    "user": {
                        "client-certificate": str(client.cert),
                        "client-key": str(client.key),
                    },
                }
            ],
            "contexts": [{"name": user, "context": {"cluster": "realcluster", "user": user}}],
            "current-context": user,
        }
    )


def token_kubeconfig_text(server: str, ca: Path, token: str, user: str) -> str:
    """A kubeconfig for a ServiceAccount token (how the worker runs in the tier)."""
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "realcluster",
                    "cluster": {"server": server, "certificate-authority": str(ca)},
                }
            ],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": user, "context": {"cluster": "realcluster", "user": user}}],
            "current-context": user,
        }
    )


def kueue_webhooks(manifests: Path, url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """Kueue's webhook configurations as v0.19.2 ships them, routed to *url* (its webhook
    server on loopback) instead of the in-cluster Service, trusting *ca_pem*."""
    bundle = base64.b64encode(ca_pem).decode()
    documents = [d for d in _load_all(manifests) if d]
    for document in documents:
        document["metadata"]["name"] = f"kueue-{document['metadata']['name']}"
        for hook in document.get("webhooks") or []:
            path = hook["clientConfig"]["service"].get("path", "")
            hook["clientConfig"] = {"url": f"{url}{path}", "caBundle": bundle}
    return documents


def kueue_crds(crds: Path, patches: Path, url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """Kueue's CRDs with the conversion webhooks v0.19.2 ships (``conversion-patches``)
    pointed at *url*."""
    bundle = base64.b64encode(ca_pem).decode()
    converted: set[str] = set()
    for patch_file in sorted(patches.glob("*.yaml")):
        (patch,) = _load_all(patch_file)
        converted.add(patch["metadata"]["name"])
    documents = []
    for crd_file in sorted(crds.glob("*.yaml")):
        for document in _load_all(crd_file):
            if not document or document.get("kind") != "CustomResourceDefinition":
                continue
            if document["metadata"]["name"] in converted:
                document["spec"]["conversion"] = {
                    "strategy": "Webhook",
                    "webhook": {
                        "clientConfig": {"url": f"{url}/convert", "caBundle": bundle},
                        "conversionReviewVersions": ["v1"],
                    },
                }
            documents.append(document)
    return documents


def crd_documents(folder: Path) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition in the YAML files of *folder*."""
    found = []
    for path in sorted(folder.glob("*.yaml")):
        for document in _load_all(path):
            if document and document.get("kind") == "CustomResourceDefinition":
                found.append(document)
    return found


def loopback_kueue_configuration(
    base: Mapping[str, Any], *, webhook_port: int, health_port: int, cert_dir: Path
) -> dict[str, Any]:
    """*base* (a Kueue v1beta2 Configuration) with what a manager outside the cluster needs:
    loopback listeners, no leader election, its own webhook certificate instead of the
    in-cluster rotator, and no metrics listener. Every other field is kept as written."""
    config = copy.deepcopy(dict(base))
    config["namespace"] = KUEUE_NAMESPACE
    config["health"] = {"healthProbeBindAddress": f"127.0.0.1:{health_port}"}
    config["metrics"] = {"bindAddress": "0"}
    config["webhook"] = {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)}
    config["leaderElection"] = {"leaderElect": False}
    config["internalCertManagement"] = {"enable": False}
    # The on-demand visibility API is an aggregated API server that reads its certificate from
    # a fixed /visibility (cmd/kueue/main.go, pkg/visibility); the operator does not use it.
    config["featureGates"] = {**(config.get("featureGates") or {}), "VisibilityOnDemand": False}
    return config


KUEUE_METRICS_CERTS = Path("/etc/kueue/metrics/certs")
"""Where Kueue v0.19.2 reads its metrics certificate whenever its internal certificate
management is off, whatever its metrics settings (``cmd/kueue/main.go``, a fixed path)."""


def _provide_kueue_metrics_certificate(pair: Pair) -> None:
    """Kueue exits at start without a certificate at :data:`KUEUE_METRICS_CERTS`; its metrics
    listener stays off in the tier, so any valid pair will do. One already there is kept."""
    if (KUEUE_METRICS_CERTS / "tls.crt").is_file() and (KUEUE_METRICS_CERTS / "tls.key").is_file():
        return
    try:
        KUEUE_METRICS_CERTS.mkdir(parents=True, exist_ok=True)
        (KUEUE_METRICS_CERTS / "tls.crt").write_bytes(pair.cert.read_bytes())
        (KUEUE_METRICS_CERTS / "tls.key").write_bytes(pair.key.read_bytes())
    except OSError as exc:
        raise RealClusterError(
            f"Kueue v0.19.2 needs a certificate in {KUEUE_METRICS_CERTS} (its fixed metrics "
            f"certificate path) and it cannot be written: {exc}; create that folder writable "
            "by this user, or run the tier as root"
        ) from exc


DEFAULT_KUEUE_CONFIGURATION: dict[str, Any] = {
    "apiVersion": "config.kueue.x-k8s.io/v1beta2",
    "kind": "Configuration",
    "integrations": {"frameworks": ["batch/job"]},
}
"""What the tier's Kueue runs with unless a test gives its own: the batch/job integration,
as deploy/components/kueue-config enables it; everything else is Kueue's default."""


class LoopbackPlane:
    """What a plane the tier's scenarios run on offers them, whichever backend serves it: the
    real control plane (:class:`ControlPlane`) or the simulated one
    (``tests/realcluster/simplane.py``). Subclasses set the fields in their ``__init__``."""

    kind = "real"
    """``real`` or ``sim``: the parameter the scenarios run under."""
    workdir: Path
    logs: Path
    processes: dict[str, Process]
    all_ports: set[int]
    kubectl: Path
    server: str
    admin_kubeconfig: Path
    ca_file: Path
    admin: Pair

    def admin_tls(self) -> ssl.SSLContext:
        """TLS for the admin's own requests: this plane's CA, the admin's client certificate."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        context.load_cert_chain(str(self.admin.cert), str(self.admin.key))
        return context

    def _port(self) -> int:
        while True:
            port = free_port()
            if port not in self.all_ports:
                self.all_ports.add(port)
                return port

    def stop(self) -> None:
        """Stop every process, newest first, and check that none and no port is left."""
        for name in reversed(list(self.processes)):
            self.processes[name].stop()
        left = [n for n, p in self.processes.items() if p.exited() is None]
        if left:
            raise RealClusterError(f"still running after stop: {', '.join(left)}")
        wait_until(
            lambda: not [p for p in self.all_ports if port_in_use(p)],
            timeout=30,
            what="every port released",
        )
        # A process its parent left (a child of a component, a stop that missed it) carries
        # its log's path in its environment (reaper.LOG_ENV): none of this plane's may remain.
        try:
            wait_until(lambda: not left_behind(self.logs), timeout=10, what="no process left")
        except RealClusterError:
            raise RealClusterError(
                f"processes of the plane in {self.workdir} still run after stop: "
                f"{'; '.join(left_behind(self.logs))}"
            ) from None
        self.close_client()

    def differs(self, row: str) -> bool:
        """True where the simulator answers otherwise than the real cluster in the way the row
        *row* of docs/simulator.md's table "Where the simulator differs from a real cluster"
        says; on the real plane always False."""
        return False

    # --- talking to it ----------------------------------------------------------------------

    def kubectl_run(
        self, *args: str, stdin: str | None = None, kubeconfig: Path | None = None
    ) -> str:
        """kubectl's output for *args* as the admin (or *kubeconfig*'s user). A plain ``get
        … -o json`` as the admin, which the scenarios poll, is answered from this process
        (:meth:`get_json`, the same JSON) instead of a kubectl process per look."""
        plain = _plain_get(args) if kubeconfig is None and stdin is None else None
        if plain is not None:
            resource, name = str(plain["resource"]), plain["name"]
            got = self.get_json(  # kubectl's namespace without -n: the kubeconfig's, default
                resource,
                name,
                namespace=plain["namespace"] or "default",
                selector=plain["selector"],
            )
            return json.dumps(got)
        result = subprocess.run(
            [str(self.kubectl), f"--kubeconfig={kubeconfig or self.admin_kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if result.returncode != 0:
            raise RealClusterError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout

    def apply(self, documents: Sequence[Mapping[str, Any]]) -> None:
        self.kubectl_run(
            "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=_as_list(documents)
        )

    def token(
        self,
        namespace: str,
        service_account: str,
        seconds: int = 86400,
        *,
        bound_node: str | None = None,
    ) -> str:
        """A token of *service_account* (the TokenRequest ``kubectl create token`` sends; with
        *bound_node*, bound to that Node as ``--bound-object-kind=Node`` binds it)."""
        spec: dict[str, Any] = {"expirationSeconds": seconds}
        if bound_node is not None:
            spec["boundObjectRef"] = {"kind": "Node", "apiVersion": "v1", "name": bound_node}
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token"
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        response = self.client().post(path, json=body)
        if response.status_code != 201:
            raise RealClusterError(
                f"a token of {namespace}/{service_account}: {response.status_code} "
                f"{response.text[:300]}"
            )
        return str(response.json()["status"]["token"])

    # --- reading, in this process -----------------------------------------------------------
    # The scenarios poll (convergence, Workloads) every second or so; a kubectl process per
    # look costs more CPU on a 2-core machine than the processes under test, so reads go
    # through one HTTP client with the admin's certificate, resolved as kubectl resolves
    # resource names (discovery, the group's preferred version).

    _client: httpx.Client | None = None
    _resources: dict[str, _Resource] | None = None

    def client(self) -> httpx.Client:
        """An HTTP client for the admin's requests to this plane's API server."""
        if self._client is None:
            self._client = httpx.Client(base_url=self.server, verify=self.admin_tls(), timeout=30)
        return self._client

    def close_client(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        self._resources = None

    def _get(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        response = self.client().get(path, params=params)
        if response.status_code != 200:
            raise RealClusterError(f"GET {path}: {response.status_code} {response.text[:300]}")
        return response.json()

    def _discover(self) -> dict[str, _Resource]:
        """Each name kubectl takes for a resource (plural, singular, short names, the kind in
        lower case; beyond the core group also with ``.group``) -> the resource, for the core
        group and each group's preferred version; the first group to claim a name keeps it."""
        found: dict[str, _Resource] = {}
        versions = [("v1", "")] + [
            (g["preferredVersion"]["groupVersion"], g["name"])
            for g in self._get("/apis").get("groups") or []
        ]
        for group_version, group in versions:
            prefix = "/api/" if group == "" else "/apis/"
            for entry in self._get(prefix + group_version).get("resources") or []:
                if "/" in entry["name"]:
                    continue  # a subresource
                resource = _Resource(
                    f"{prefix}{group_version}",
                    entry["name"],
                    entry["kind"],
                    bool(entry["namespaced"]),
                )
                names = {entry["name"], entry.get("singularName") or "", entry["kind"].lower()}
                names |= set(entry.get("shortNames") or [])
                for name in names - {""}:
                    found.setdefault(name, resource)
                    if group:
                        found.setdefault(f"{name}.{group}", resource)
        return found

    def _resource(self, name: str) -> _Resource:
        if self._resources is None or name not in self._resources:
            self._resources = self._discover()  # a CRD installed since the last look
        if name not in self._resources:
            raise RealClusterError(f"the server serves no resource {name!r}")
        return self._resources[name]

    def get_json(
        self,
        resource: str,
        name: str | None = None,
        *,
        namespace: str | None = None,
        selector: str | None = None,
    ) -> dict[str, Any]:
        """What ``kubectl get RESOURCE [NAME] [-n NAMESPACE] [-l SELECTOR] -o json`` prints:
        the object, or a v1 List of the objects (of every namespace without *namespace*),
        each with its ``apiVersion`` and ``kind``."""
        found = self._resource(resource)
        path = found.path
        if namespace is not None and found.namespaced:
            path += f"/namespaces/{namespace}"
        path += f"/{found.plural}"
        if name is not None:
            return dict(self._get(f"{path}/{name}"))
        items = self._get(path, {"labelSelector": selector} if selector else None)
        items = items.get("items") or []
        group_version = found.path.split("/", 2)[2]
        return {
            "apiVersion": "v1",
            "kind": "List",
            "items": [{"apiVersion": group_version, "kind": found.kind, **i} for i in items],
        }

    def list_objects(self, resource: str, *, namespaced: bool = False) -> list[dict[str, Any]]:
        """Every object of *resource* (``nodes``, ``workloads.kueue.x-k8s.io``), in every
        namespace, as ``kubectl get -o json`` lists them. *namespaced* is kept for the
        callers' sake; discovery says whether it is."""
        return list(self.get_json(resource)["items"])


@dataclass(frozen=True)
class _Resource:
    """A resource as discovery serves it: its collection's path prefix (``/apis/<g>/<v>``)."""

    path: str
    plural: str
    kind: str
    namespaced: bool


def _plain_get(args: Sequence[str]) -> dict[str, str | None] | None:
    """The parts of ``get RESOURCE [NAME] [-n NS] [-l SELECTOR] -o json`` (flags in any
    order), or None for any other kubectl command line."""
    if not args or args[0] != "get":
        return None
    parts: dict[str, str | None] = {"namespace": None, "selector": None}
    words, output = [], None
    rest = list(args[1:])
    while rest:
        word = rest.pop(0)
        if word in ("-n", "--namespace", "-l", "--selector", "-o", "--output") and rest:
            value = rest.pop(0)
            if word in ("-o", "--output"):
                output = value
            else:
                parts["namespace" if word in ("-n", "--namespace") else "selector"] = value
        elif word.startswith("-"):
            return None
        else:
            words.append(word)
    if output != "json" or not 1 <= len(words) <= 2 or "," in words[0] or "/" in words[0]:
        return None
    parts["resource"] = words[0]
    parts["name"] = words[1] if len(words) == 2 else None
    return parts


class ControlPlane(LoopbackPlane):
    """The five processes, started and stopped together (Kueue can be restarted alone)."""

    def __init__(self, binaries: Binaries, workdir: Path, shared: Path) -> None:
        self.binaries = binaries
        self.workdir = workdir
        self.shared = shared
        self.logs = workdir / "logs"
        self.processes: dict[str, Process] = {}
        self.all_ports: set[int] = set()
        self.kubectl = Path(sys.executable).parent / "kubectl"
        pki = workdir / "pki"
        self.ca = CertificateAuthority(pki)
        self.ca_file = self.ca.cert_file
        self.sa = service_account_keys(pki)
        self.apiserver_port = self._port()
        self.server = f"https://127.0.0.1:{self.apiserver_port}"
        self.serving = self.ca.issue(
            "apiserver",
            "kube-apiserver",
            server=True,
            ips=("10.0.0.1",),
            dns_names=("kubernetes", "kubernetes.default", "kubernetes.default.svc"),
        )
        self.admin = self.ca.issue("admin", "realcluster-admin", groups=("system:masters",))
        self.admin_kubeconfig = workdir / "admin.kubeconfig"
        self.admin_kubeconfig.write_text(
            kubeconfig_text(self.server, self.ca.cert_file, self.admin, "admin")
        )
        self.kueue_webhook_port = self._port()
        self.kueue_health_port = self._port()
        self.kueue_cert_dir = workdir / "kueue-webhook-certs"
        self.kueue_cert_dir.mkdir(parents=True, exist_ok=True)
        webhook = self.ca.issue("kueue-webhook", "kueue-webhook", server=True)
        (self.kueue_cert_dir / "tls.crt").write_bytes(webhook.cert.read_bytes())
        (self.kueue_cert_dir / "tls.key").write_bytes(webhook.key.read_bytes())
        _provide_kueue_metrics_certificate(webhook)
        self.kueue_configuration: dict[str, Any] = dict(DEFAULT_KUEUE_CONFIGURATION)

    # --- the processes ----------------------------------------------------------------------

    def _kubeconfig_for(self, stem: str, user: str, groups: tuple[str, ...] = ()) -> Path:
        pair = self.ca.issue(stem, user, groups=groups)
        path = self.workdir / f"{stem}.kubeconfig"
        path.write_text(kubeconfig_text(self.server, self.ca.cert_file, pair, stem))
        return path

    def _add(
        self, name: str, argv: Sequence[str | Path], ports: tuple[int, ...], **env: str
    ) -> Process:
        process = Process(name, [str(a) for a in argv], self.logs / f"{name}.log", ports, env)
        self.processes[name] = process
        process.start()
        return process

    def _start_etcd(self) -> None:
        client, peer = self._port(), self._port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        etcd = self._add(
            "etcd",
            [
                self.binaries.path("etcd"),
                "--name=realcluster",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=realcluster=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
            (client, peer),
        )
        wait_until(
            lambda: httpx.get(f"{self.etcd_url}/health", timeout=2).status_code == 200,
            timeout=60,
            what="healthy",
            process=etcd,
        )

    def _start_apiserver(self) -> None:
        apiserver = self._add(
            "kube-apiserver",
            [
                self.binaries.path("kube-apiserver"),
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.apiserver_port}",
                f"--cert-dir={self.workdir / 'apiserver'}",
                f"--tls-cert-file={self.serving.cert}",
                f"--tls-private-key-file={self.serving.key}",
                f"--client-ca-file={self.ca.cert_file}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={self.sa.cert}",
                f"--service-account-signing-key-file={self.sa.key}",
                "--authorization-mode=Node,RBAC",
                "--allow-privileged=true",
                "--profiling=false",
            ],
            (self.apiserver_port,),
        )
        wait_until(self._ready, timeout=120, what="ready (/readyz)", process=apiserver)

    def _ready(self) -> bool:
        response = httpx.get(f"{self.server}/readyz", verify=self.admin_tls(), timeout=5)
        return response.status_code == 200

    def _start_controller_manager(self) -> None:
        kubeconfig = self._kubeconfig_for("controller-manager", "system:kube-controller-manager")
        port = self._port()
        self._add(
            "kube-controller-manager",
            [
                self.binaries.path("kube-controller-manager"),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.workdir / 'controller-manager'}",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={self.sa.key}",
                f"--root-ca-file={self.ca.cert_file}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
            ],
            (port,),
        )

    def _start_scheduler(self) -> None:
        kubeconfig = self._kubeconfig_for("scheduler", "system:kube-scheduler")
        port = self._port()
        self._add(
            "kube-scheduler",
            [
                self.binaries.path("kube-scheduler"),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                "--leader-elect=false",
            ],
            (port,),
        )

    def start(self, *, extra_crds: Sequence[Path] = ()) -> None:
        """etcd, kube-apiserver, kube-controller-manager, kube-scheduler, the CRDs (Kueue's,
        NFD's and *extra_crds*), Kueue's webhooks and Kueue's manager."""
        try:
            self._start_etcd()
            self._start_apiserver()
            self._start_controller_manager()
            self._start_scheduler()
            self.install_crds(extra_crds)
            self.start_kueue()
        except BaseException as failure:
            # The start's failure is the one to read: a stop that fails after it (a port
            # still taken, a process left) is added to it rather than put in its place.
            try:
                self.stop()
            except Exception as stop_failure:
                failure.add_note(f"stopping the plane after this failed too: {stop_failure}")
            raise

    def install_crds(self, extra: Sequence[Path] = ()) -> None:
        url = f"https://127.0.0.1:{self.kueue_webhook_port}"
        crds = self.shared / "crds"
        documents = kueue_crds(
            crds / "kueue-v0.19.2",
            self.shared / "kueue-v0.19.2-extras" / "conversion-patches",
            url,
            self.ca.pem,
        )
        documents += crd_documents(crds / "nfd-v0.19.0")
        for folder in extra:
            documents += crd_documents(folder)
        # create, not apply: a fresh server, and server-side apply of Kueue's large CRDs costs
        # tens of seconds of managed-fields bookkeeping on a loaded machine.
        self.kubectl_run("create", "-f", "-", stdin=_as_list(documents))
        names = {d["metadata"]["name"] for d in documents}
        wait_until(
            lambda: names <= self._established(), timeout=120, what="CRDs established", every=0.5
        )
        self.apply(
            kueue_webhooks(
                self.shared / "kueue-v0.19.2-extras" / "webhook" / "manifests.yaml",
                url,
                self.ca.pem,
            )
        )
        self.apply(
            [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NAMESPACE}}]
        )

    def _established(self) -> set[str]:
        return {
            crd["metadata"]["name"]
            for crd in self.list_objects("customresourcedefinitions.apiextensions.k8s.io")
            if any(
                c["type"] == "Established" and c["status"] == "True"
                for c in (crd.get("status") or {}).get("conditions") or []
            )
        }

    def start_kueue(
        self, configuration: Mapping[str, Any] | None = None, *, wait: bool = True
    ) -> Process:
        """(Re)start Kueue's manager with *configuration* (a v1beta2 Configuration; default:
        the last one given, at first :data:`DEFAULT_KUEUE_CONFIGURATION`)."""
        self.stop_kueue()
        if configuration is not None:
            self.kueue_configuration = dict(configuration)
        config = loopback_kueue_configuration(
            self.kueue_configuration,
            webhook_port=self.kueue_webhook_port,
            health_port=self.kueue_health_port,
            cert_dir=self.kueue_cert_dir,
        )
        config_file = self.workdir / "kueue-config.yaml"
        config_file.write_text(yaml.safe_dump(config))
        kueue = self._add(
            "kueue",
            [self.binaries.path("kueue"), f"--config={config_file}", "--zap-log-level=info"],
            (self.kueue_webhook_port, self.kueue_health_port),
            KUBECONFIG=str(self.admin_kubeconfig),
        )
        if wait:
            wait_until(
                lambda: (
                    httpx.get(
                        f"http://127.0.0.1:{self.kueue_health_port}/readyz", timeout=2
                    ).status_code
                    == 200
                ),
                timeout=120,
                what="ready (/readyz)",
                process=kueue,
            )
            wait_until(
                lambda: port_in_use(self.kueue_webhook_port),
                timeout=60,
                what="serving webhooks",
                process=kueue,
            )
        return kueue

    def stop_kueue(self) -> None:
        kueue = self.processes.pop("kueue", None)
        if kueue is not None:
            kueue.stop()
            wait_until(
                lambda: not any(port_in_use(p) for p in kueue.ports),
                timeout=30,
                what="Kueue's ports released",
            )

    @contextlib.contextmanager
    def running(self, **kwargs: Any) -> Iterator[ControlPlane]:
        self.start(**kwargs)
        try:
            yield self
        finally:
            self.stop()
