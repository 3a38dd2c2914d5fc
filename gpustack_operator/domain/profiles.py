"""Profile names: how a node's specs become Kueue object names (docs/naming.md).

``format_node_profile`` turns a key pair and a spec (``48c-188g-196g-4d-8s``) into a flavor,
queue or cohort name; ``parse_node_profile`` inverts it; ``local_queue_name`` hashes a
ClusterQueue name into the fixed-length LocalQueue name workloads refer to.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

from pydantic import BaseModel, ConfigDict

PROFILE_PREFIX: Final = "gpustack--"
LOCAL_QUEUE_PREFIX: Final = "gpustack-fnv64-"
GENERIC_GKEY: Final = "generic"

_FNV64_OFFSET: Final = 0xCBF29CE484222325
_FNV64_PRIME: Final = 0x100000001B3
_MASK64: Final = 2**64 - 1

_DEVICE_COUNT = re.compile(r"[0-9]+d")
_CPU = re.compile(r"([0-9]+)c")
_GI = re.compile(r"([0-9]+)g")
_ACC = re.compile(r"([0-9]+)d")
_SLICED = re.compile(r"([0-9]+)s")


class NodeProfile(BaseModel):
    """A parsed profile name. ``storage`` is ``None`` for queue/cohort names."""

    model_config = ConfigDict(frozen=True)

    gkey: str
    akey: str = ""
    cpu: int
    ram: int
    storage: int | None = None
    accelerators: int | None = None
    sliced: int | None = None

    @property
    def acceleratable(self) -> bool:
        return bool(self.akey) and self.accelerators is not None

    @property
    def manufacturer(self) -> str:
        """First dash-segment of aKey (accelerated) or gKey (general)."""
        return (self.akey if self.acceleratable else self.gkey).split("-", 1)[0]


def format_node_profile(gkey: str, akey: str, spec: str) -> str:
    """``FormatNodeProfile`` (docs/naming.md).

    ``("amd-25-1", "", "16c-32g-96g")`` -> ``gpustack--amd-25-1-16c-32g-96g``;
    ``("amd-25-1", "nvidia-tesla-t4", "4c-16g-96g-1d")`` ->
    ``gpustack--amd-25-1-4c-16g-96g--nvidia-tesla-t4-1d``.
    """
    if not akey:
        return f"{PROFILE_PREFIX}{gkey}-{spec}"
    parts = spec.split("-")
    for i, part in enumerate(parts):
        if _DEVICE_COUNT.fullmatch(part):
            host, device = "-".join(parts[:i]), "-".join(parts[i:])
            return f"{PROFILE_PREFIX}{gkey}-{host}--{akey}-{device}"
    return f"{PROFILE_PREFIX}{gkey}-{spec}"


def _number(pattern: re.Pattern[str], token: str) -> int | None:
    match = pattern.fullmatch(token)
    return int(match.group(1)) if match else None


def _parse_general(segment: str) -> tuple[str, int, int, int | None] | None:
    tokens = segment.split("-")
    if len(tokens) >= 4 and _GI.fullmatch(tokens[-1]) and _GI.fullmatch(tokens[-2]):
        storage: int | None = _number(_GI, tokens[-1])
        tokens = tokens[:-1]
    else:
        storage = None
    if len(tokens) < 3:
        return None
    cpu, ram = _number(_CPU, tokens[-2]), _number(_GI, tokens[-1])
    gkey = "-".join(tokens[:-2])
    if cpu is None or ram is None or not gkey:
        return None
    return gkey, cpu, ram, storage


def _parse_device(segment: str) -> tuple[str, int, int | None] | None:
    tokens = segment.split("-")
    sliced = _number(_SLICED, tokens[-1])
    if sliced is not None:
        tokens = tokens[:-1]
    if len(tokens) < 2:
        return None
    acc = _number(_ACC, tokens[-1])
    akey = "-".join(tokens[:-1])
    if acc is None or not akey:
        return None
    return akey, acc, sliced


TAS_QUEUE_SUFFIX: Final = "tas"
"""A ClusterQueue fed by TAS flavors is ``<queue>-tas`` (:func:`derived_name`)."""


def strip_tas_suffix(name: str) -> str:
    """A TAS flavor or queue name (``<profile>.tas-<group>``, ``<profile>-tas``, and a queue's
    older ``<profile>.tas``) without its TAS part (docs/topology.md, "Names"); any other
    name as it is. A profile name never ends in ``-tas``: its last part is a spec."""
    head, dot, tail = name.partition(".")
    if dot and (tail == TAS_QUEUE_SUFFIX or tail.startswith(f"{TAS_QUEUE_SUFFIX}-")):
        return head
    suffix = f"-{TAS_QUEUE_SUFFIX}"
    return name[: -len(suffix)] if name.endswith(suffix) and not dot else name


def parse_node_profile(name: str) -> NodeProfile | None:
    """``ParseNodeProfile``: the parts of a profile name, or ``None`` if it is not one.
    A TAS flavor's or queue's name parses as the profile it extends."""
    name = strip_tas_suffix(name)
    if not name.startswith(PROFILE_PREFIX):
        return None
    segments = name[len(PROFILE_PREFIX) :].split("--")
    if len(segments) > 2:
        return None
    general = _parse_general(segments[0])
    if general is None:
        return None
    gkey, cpu, ram, storage = general
    if len(segments) == 1:
        return NodeProfile(gkey=gkey, cpu=cpu, ram=ram, storage=storage)
    device = _parse_device(segments[1])
    if device is None:
        return None
    akey, acc, sliced = device
    return NodeProfile(
        gkey=gkey, akey=akey, cpu=cpu, ram=ram, storage=storage, accelerators=acc, sliced=sliced
    )


def fnv1a_64(data: bytes) -> int:
    """FNV-1a, 64-bit."""
    value = _FNV64_OFFSET
    for byte in data:
        value = ((value ^ byte) * _FNV64_PRIME) & _MASK64
    return value


MAX_DNS_LABEL: Final = 63
MAX_OBJECT_NAME: Final = 253
_DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def derived_name(base: str, suffix: str) -> str:
    """``<base>-<suffix>``, a name derived from a pool's (a TAS queue, a team's queue;
    docs/naming.md, "Derived names"). Where *base* is a DNS label the result is one too, so
    that Kueue labels the Pods of its queue with ``kueue.x-k8s.io/cluster-queue-name``;
    otherwise it stays within 253 characters. Too long, *base* is cut and a hash of the whole
    name keeps it unique: ``<base cut>-<10 hex>-<suffix>``."""
    name = f"{base}-{suffix}"
    limit = (
        MAX_DNS_LABEL
        if _DNS_LABEL.fullmatch(base) and len(base) <= MAX_DNS_LABEL
        else (MAX_OBJECT_NAME)
    )
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    budget = limit - len(digest) - 1
    tail = suffix if len(suffix) <= budget - 8 else suffix[: budget - 8].rstrip("-")
    keep = budget - len(tail) - 1
    return f"{base[:keep].rstrip('-.')}-{digest}-{tail}"


def local_queue_name(cluster_queue: str) -> str:
    """``gpustack-fnv64-<16 hex>``: always 31 characters, a valid label value (docs/naming.md)."""
    return f"{LOCAL_QUEUE_PREFIX}{fnv1a_64(cluster_queue.encode()):016x}"
