"""What a pool offers, in words a workload author reads (docs/workloads.md, "Finding a pool").

From a ClusterQueue's ``note.gpustack.ai/*`` annotations (docs/labels.md): the readable
labels and the unit annotation its LocalQueues carry, and the unit text ``queues`` prints
("1x Tesla-T4, 4 CPU, 16Gi").
"""

from __future__ import annotations

from collections.abc import Mapping

from gpustack_operator.domain.labels import (
    DEVICE_MODEL_LABEL,
    MANUFACTURER_LABEL,
    POOL_ACCELERATABLE_LABEL,
    UNIT_ANNOTATION,
    note,
)
from gpustack_operator.domain.names import sanitize_label_value
from gpustack_operator.domain.nodeview import annotations_of
from gpustack_operator.domain.validation import is_valid_label_value


def unit_text(
    *,
    acceleratable: bool,
    product: str,
    cpu: str | None,
    memory: str | None,
    accelerators: int = 1,
    slices: int | None = None,
) -> str:
    """One unit of a pool: the device share, then the CPU and memory that come with it."""
    parts: list[str] = []
    if acceleratable:
        device = f"{accelerators}x {product or 'device'}"
        if slices:
            device += f" (1/{slices} card)"
        parts.append(device)
    if cpu:
        parts.append(f"{cpu} CPU")
    if memory:
        parts.append(memory)
    return ", ".join(parts)


def _label(value: str) -> str:
    text = sanitize_label_value(value).lower()
    return text if text and is_valid_label_value(text) else ""


def local_queue_metadata(cluster_queue: object) -> tuple[dict[str, str], dict[str, str]]:
    """Labels and annotations of the LocalQueues of *cluster_queue* (a name alone: none)."""
    if not isinstance(cluster_queue, Mapping):
        return {}, {}
    notes = annotations_of(cluster_queue)
    acceleratable = notes.get(note("acceleratable")) == "true"
    labels = {
        POOL_ACCELERATABLE_LABEL: "true" if acceleratable else "false",
        MANUFACTURER_LABEL: _label(notes.get(note("manufacturer"), "")),
    }
    if acceleratable:
        labels[DEVICE_MODEL_LABEL] = _label(notes.get(note("product"), ""))
    sliced = notes.get(note("slicedAccelerator"), "")
    unit = unit_text(
        acceleratable=acceleratable,
        product=notes.get(note("product"), ""),
        cpu=notes.get(note("unitCPU")),
        memory=notes.get(note("unitRAM")),
        slices=int(sliced) if sliced.isdigit() else None,
    )
    annotations = {UNIT_ANNOTATION: unit} if unit else {}
    return {k: v for k, v in labels.items() if v}, annotations
