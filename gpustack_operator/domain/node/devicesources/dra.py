"""Kubernetes DRA ``ResourceSlice`` objects -> device pools (docs/devices.md, "DRA").

A DRA driver publishes a node's devices as ``resource.k8s.io/v1`` ``ResourceSlice`` objects
(``spec.driver``, ``spec.nodeName``, ``spec.devices[].attributes`` / ``.capacity``) instead
of an allocatable count. Devices with the same product name and memory become one pool; its
count is the number of devices, and its resource is the logical name a Kueue
``deviceClassMappings`` entry must map the driver's DeviceClass to.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from gpustack_operator.domain.node.devicesources.model import (
    PRODUCT_MISSING,
    UNKNOWN_VENDOR,
    DevicePool,
    Diagnostic,
)
from gpustack_operator.domain.quantities import parse_quantity

SOURCE: Final = "dra"
API_VERSION: Final = "resource.k8s.io/v1"
KIND: Final = "ResourceSlice"
# Drivers whose devices this project knows how to name, and their manufacturer.
DRIVERS: Final[Mapping[str, str]] = {"gpu.nvidia.com": "nvidia", "gpu.amd.com": "amd"}
_PRODUCT_ATTRIBUTES: Final = ("productName", "product-name", "model")
_MIB: Final = 2**20


def dra_resource(driver: str, device_type: str) -> str:
    """The logical resource of a DRA pool: ``<driver>/<type>`` (``gpu.nvidia.com/gpu``)."""
    return f"{driver}/{device_type or 'device'}"


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _attribute(attributes: Mapping[str, Any], driver: str, name: str) -> str:
    """An attribute's value as text; names may be qualified with the driver's domain."""
    raw = attributes.get(name, attributes.get(f"{driver}/{name}"))
    for kind in ("string", "version", "int", "bool"):
        value = _mapping(raw).get(kind)
        if value is not None:
            return str(value)
    return ""


def _memory_mib(capacity: Mapping[str, Any]) -> int:
    raw = capacity.get("memory")
    value = _mapping(raw).get("value", raw)
    quantity = parse_quantity(value)
    return int(quantity // _MIB) if quantity is not None and quantity > 0 else 0


def node_slices(node_name: str, slices: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The ResourceSlices published for *node_name* (``spec.nodeName``)."""
    return [s for s in slices if _mapping(s.get("spec")).get("nodeName") == node_name]


def dra_pools(
    node_name: str, slices: Iterable[Mapping[str, Any]]
) -> tuple[list[DevicePool], list[Diagnostic]]:
    """The device pools of *node_name*'s ResourceSlices, and why devices got none."""
    groups: dict[tuple[str, str, str, int], list[Mapping[str, Any]]] = {}
    first: dict[tuple[str, str, str, int], Mapping[str, Any]] = {}
    problems: list[Diagnostic] = []
    unknown: set[str] = set()
    for item in node_slices(node_name, slices):
        spec = _mapping(item.get("spec"))
        driver = str(spec.get("driver", ""))
        if driver not in DRIVERS:
            unknown.add(driver or "<no driver>")
            continue
        for device in spec.get("devices") or ():
            body = _mapping(device)
            body = _mapping(body.get("basic")) or body  # v1beta1 nests under basic
            attributes = _mapping(body.get("attributes"))
            product = next(
                (p for a in _PRODUCT_ATTRIBUTES if (p := _attribute(attributes, driver, a))), ""
            )
            if not product:
                name = _mapping(device).get("name", "?")
                detail = f"device {name} of {driver} has no productName attribute"
                problems.append(Diagnostic(SOURCE, PRODUCT_MISSING, detail))
                continue
            device_type = _attribute(attributes, driver, "type")
            profile = _attribute(attributes, driver, "profile")
            if device_type == "mig" and profile:
                product = f"{product}-MIG-{profile}"
            key = (driver, device_type, product, _memory_mib(_mapping(body.get("capacity"))))
            groups.setdefault(key, []).append(attributes)
            first.setdefault(key, attributes)
    for driver in sorted(unknown):
        detail = f"ResourceSlices of driver {driver} are not mapped to a manufacturer"
        problems.append(Diagnostic(SOURCE, UNKNOWN_VENDOR, detail))
    pools = []
    for key in sorted(groups):
        driver, device_type, product, memory = key
        attributes = first[key]
        comcap = _attribute(attributes, driver, "cudaComputeCapability")
        pools.append(
            DevicePool(
                source=SOURCE,
                manufacturer=DRIVERS[driver],
                product=product,
                count=len(groups[key]),
                resource=dra_resource(driver, device_type),
                memory_mib=memory,
                family=_attribute(attributes, driver, "architecture"),
                compute_capability=".".join(comcap.split(".")[:2]),
                driver_version=_attribute(attributes, driver, "driverVersion"),
                runtime_version=".".join(
                    _attribute(attributes, driver, "cudaDriverVersion").split(".")[:2]
                ),
                dra=True,
            )
        )
    return pools, problems
