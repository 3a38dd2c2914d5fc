"""Simulated devices from the Node annotation ``sim.gpustack.ai/devices`` (docs/simulator.md).

The simulator runs one agent per simulated node with this detector in place of the hardware
ones, so the whole reporting path runs without a GPU. The annotation is read through a callable
because it lives on the Node and changes while the agent runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gpustack_operator.domain.manufacturers import Manufacturer
from gpustack_operator.domain.node.devices import DeviceGroup
from gpustack_operator.domain.node.simdevices import parse_sim_devices


class SimDetector:
    """Device groups described by the annotation, optionally limited to some manufacturers.

    An absent or empty annotation means no devices; an invalid one raises ``ValueError`` (the
    caller reports it: a typo in a test fixture must not look like "no GPU").
    """

    source = "sim"
    manufacturer = "sim"

    def __init__(
        self,
        annotation: Callable[[], str | None],
        manufacturers: Mapping[str, Manufacturer],
        *,
        only: frozenset[str] | None = None,
        with_memory: bool = False,
    ) -> None:
        self._annotation = annotation
        self._manufacturers = manufacturers
        self._only = only
        self._with_memory = with_memory

    def detect(self) -> list[DeviceGroup]:
        value = self._annotation()
        if value is None or not value.strip():
            return []
        groups = parse_sim_devices(value, self._manufacturers, with_memory=self._with_memory)
        if self._only is None:
            return groups
        return [g for g in groups if g.manufacturer in self._only]
