"""What kube-apiserver fills in on every write of a Service or a Secret, before validation.

A Service gets its type, session affinity, traffic policies, port protocols and target
ports, and a cluster IP from the service range (kept across updates that leave it out); a
Secret gets the type ``Opaque`` and has its write-only ``stringData`` merged into ``data``.
Clients read these back at once (docs/simulator.md, "Service and Secret defaults").
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gpustack_sim.apiserver.errors import ApiError, invalid
from gpustack_sim.apiserver.kinds import KindInfo

__all__ = ["SERVICE_RANGE", "defaults_on_write"]

SERVICE_RANGE = ipaddress.IPv4Network("10.96.0.0/12")
"""kubeadm's default ``--service-cidr``; the API server's own Service holds its first IP."""
_NO_CLUSTER_IP = ("ExternalName",)
_HEADLESS = "None"


def defaults_on_write(
    info: KindInfo,
    obj: dict[str, Any],
    old: Mapping[str, Any] | None,
    used_ips: Callable[[], Iterable[str]],
) -> None:
    """Fill in *obj* (in place) as the API server does; *old* is the object it replaces,
    *used_ips* the cluster IPs other Services hold (read only when one is allocated).

    Raises ``ApiError`` 422 when a Service asks for a cluster IP another one holds.
    """
    if info.group or info.version != "v1":
        return
    if info.kind == "Service":
        _service(info, obj, old, used_ips)
    elif info.kind == "Secret":
        _secret(obj)


def _secret(obj: dict[str, Any]) -> None:
    obj.setdefault("type", "Opaque")
    string_data = obj.pop("stringData", None)
    if isinstance(string_data, Mapping) and string_data:
        data = obj.get("data")
        data = obj["data"] = dict(data) if isinstance(data, Mapping) else {}
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()


def _service(
    info: KindInfo,
    obj: dict[str, Any],
    old: Mapping[str, Any] | None,
    used_ips: Callable[[], Iterable[str]],
) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        spec = obj["spec"] = {}
    kind = spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    for port in spec.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            if not port.get("targetPort") and "port" in port:
                port["targetPort"] = port["port"]
    if kind in _NO_CLUSTER_IP:
        return
    spec.setdefault("internalTrafficPolicy", "Cluster")
    if kind in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
    old_spec = (old or {}).get("spec") or {}
    for field in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
        if not spec.get(field) and old_spec.get(field):  # an update that leaves them out
            spec[field] = old_spec[field]
    ip = spec.get("clusterIP") or (spec.get("clusterIPs") or [None])[0]
    if not ip:
        ip = _allocate(set(used_ips()))
    elif ip != _HEADLESS and ip != old_spec.get("clusterIP") and ip in set(used_ips()):
        why = (
            f'Invalid value: ["{ip}"]: failed to allocate IP {ip}: provided IP is already allocated'
        )
        raise invalid(
            info, str((obj.get("metadata") or {}).get("name", "")), [("spec.clusterIPs", why)]
        )
    spec["clusterIP"] = ip
    spec.setdefault("clusterIPs", [ip])
    spec.setdefault("ipFamilies", ["IPv4"])
    spec.setdefault("ipFamilyPolicy", "SingleStack")


def _allocate(used: set[str]) -> str:
    """The lowest free address of the range after the API server's own."""
    for address in SERVICE_RANGE.hosts():
        text = str(address)
        if text not in used and address != SERVICE_RANGE.network_address + 1:
            return text
    raise ApiError(
        500,
        f"Internal error occurred: failed to allocate a serviceIP: range {SERVICE_RANGE} is full",
        "InternalError",
    )
