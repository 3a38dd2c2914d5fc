"""The clocks the runtime hands to reconcilers that keep timers of their own.

A reconciler that judges how long something has lasted (a node's grace period, a new node's
settling time, an admission check's age) reads the time from a clock it is given, never from
:mod:`time` itself: the worker wires the runtime's clocks in, and tests pass one they drive,
so nothing waits on real time. When such a timer ends with no event to say so, the
reconciler asks to be called again then with :meth:`Result.at
<gpustack_operator.runtime.controller.Result.at>`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

Clock = Callable[[], float]
"""Seconds from some origin."""

WALL_CLOCK: Final[Clock] = time.time
"""Seconds since the epoch: for timers compared with times the API records
(``lastTransitionTime``, ``creationTimestamp``)."""

MONOTONIC_CLOCK: Final[Clock] = time.monotonic
"""Seconds that never go back: for timers this process starts itself."""
