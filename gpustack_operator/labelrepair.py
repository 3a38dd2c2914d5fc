"""Label repair (docs/worker.md, "Label repair"): when a Node loses, or gets another value for,
a label its NodeFeature publishes, the publisher rewrites the NodeFeature so NFD applies it
again.

nfd-master re-merges a Node's labels when one of its NodeFeatures changes, not when the Node
does, so a label a person removed stays removed while the NodeFeature already says what it
should be. A publisher that sees such a Node marks its (otherwise unchanged) NodeFeature with
the Node's ``resourceVersion`` in the annotation :data:`LABEL_REPAIR_ANNOTATION`: the update makes
NFD merge the labels again, and the mark ensures one repair per Node version, so a label NFD
refuses to write cannot start a loop.

Only labels *taken* from a Node count: :class:`LabelsTaken` notes the Nodes an update removed
or changed a published label on, and every Node the publisher sees for the first time (at
its start-up, a label may have been taken while it was not running). The reconciler
repairs only where its NodeFeature already exists and holds what it should, so a new Node,
whose NodeFeature is written first, still waits for NFD's first merge.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import structlog
from prometheus_client import Counter

from gpustack_operator.domain.labels import LABEL_REPAIR_ANNOTATION
from gpustack_operator.domain.nodeview import annotations_of, labels_of, metadata, name_of
from gpustack_operator.runtime.metrics import REGISTRY
from gpustack_operator.runtime.predicates import Marks

log = structlog.get_logger(__name__)

LABEL_REPAIRS = Counter(
    "gpustack_label_repairs_total",
    "NodeFeatures rewritten so NFD applies again labels a Node lost or had changed "
    "(docs/worker.md, 'Label repair'), by publisher (worker, device-manager).",
    ["publisher"],
    registry=REGISTRY,
)


class LabelsTaken(Marks):
    """Passes every Node event; marks the Nodes whose labels must be compared with the
    NodeFeature's (a repair that failed marks its Node again).

    *published* says whether a label key is one the publisher's NodeFeature owns. A Node
    update that removes such a label or changes its value marks the Node, and so does a
    create: the first sight of a Node, for every Node at start-up, when nothing says what
    happened to its labels meanwhile. :meth:`take` reads and clears the mark. A new Node is
    not repaired all the same: its NodeFeature does not exist yet when it is first
    reconciled, so it is written, not repaired, and NFD merges it for the first time.
    """

    def __init__(self, published: Callable[[str], bool]) -> None:
        super().__init__()
        self._published = published

    def create(self, obj: Mapping[str, Any]) -> bool:
        self._marked.add(name_of(obj))
        return True

    def update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        before, after = labels_of(old), labels_of(new)
        if before == after:  # most Node updates (heartbeats, status): one C-level compare
            return True
        try:  # the pairs removed or changed (label values are strings: hashable)
            gone: Iterable[tuple[Any, Any]] = before.items() - after.items()
        except TypeError:
            gone = [(k, v) for k, v in before.items() if after.get(k) != v]
        if any(self._published(k) and after.get(k) != v for k, v in gone):
            self._marked.add(name_of(new))
        return True

    def delete(self, obj: Mapping[str, Any]) -> bool:
        self._marked.discard(name_of(obj))
        return True

    def __repr__(self) -> str:
        return "LabelsTaken()"


def missing_labels(node: Mapping[str, Any], want: Mapping[str, Any]) -> list[str]:
    """Keys of the NodeFeature *want*'s ``spec.labels`` the Node lacks or holds otherwise."""
    spec = want.get("spec")
    published = spec.get("labels") if isinstance(spec, Mapping) else None
    if not isinstance(published, Mapping):
        return []
    have = labels_of(node)
    return sorted(str(k) for k, v in published.items() if have.get(str(k)) != v)


def repair_request(
    node: Mapping[str, Any],
    want: Mapping[str, Any],
    have: Mapping[str, Any] | None,
    *,
    publisher: str,
) -> dict[str, Any] | None:
    """The NodeFeature to apply so NFD merges again the labels *node* lost: *want* (already
    what the cluster holds) marked with the Node's version; counted and logged. None when the
    Node lacks nothing, or when *have* carries the mark of this Node version already (it was
    repaired once and NFD did not apply it: writing again would not help)."""
    missing = missing_labels(node, want)
    if not missing:
        return None
    version = str(metadata(node).get("resourceVersion") or "")
    if have is not None and annotations_of(have).get(LABEL_REPAIR_ANNOTATION) == version:
        return None
    marked = copy.deepcopy(dict(want))
    marked.setdefault("metadata", {}).setdefault("annotations", {})[LABEL_REPAIR_ANNOTATION] = (
        version
    )
    log.info(
        "node lost labels its NodeFeature publishes; asking NFD to apply them again",
        node=name_of(node),
        publisher=publisher,
        labels=missing,
    )
    LABEL_REPAIRS.labels(publisher).inc()
    return marked
