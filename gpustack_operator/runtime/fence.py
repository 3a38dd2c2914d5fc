"""The write fence: leader-only writes are sent only while the Lease is known to be held.

The leader elector records the start of every successful renewal; :meth:`LeaseFence.check`
refuses a write once ``renew_deadline`` seconds have passed since then on the monotonic clock.
A process that was stopped (a long pause, a frozen VM) fails the check at once on resume,
before it handles the watch events that piled up meanwhile, whatever its elector's loop does
next. The guarantee and its bound are in docs/runtime.md, "Write fence".
"""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog

__all__ = ["LeaseFence", "LeaseNotHeld", "WriteFence"]

log = structlog.get_logger(__name__)


class LeaseNotHeld(RuntimeError):
    """A leader-only write was refused before it was sent: the Lease is not known held."""


class WriteFence:
    """A fence that is always open: a manager without leader election writes freely."""

    refused = 0
    """Writes refused so far (diagnostics and tests)."""

    def held(self) -> bool:
        """Whether a leader-only write may be sent now."""
        return True

    def check(self, what: str) -> None:
        """Raise :class:`LeaseNotHeld` unless a leader-only write may be sent now."""
        if not self.held():
            self.refused += 1
            raise LeaseNotHeld(
                f"refused to send {what}: this replica's Lease was last renewed more than "
                "renew_deadline ago, so another replica may lead; the manager stops and a "
                "restart campaigns again"
            )


class LeaseFence(WriteFence):
    """Open for ``renew_deadline`` seconds after each renewal the elector records.

    *clock* is the monotonic clock the elector uses too (tests inject a fake one). Closed
    until the first renewal and after :meth:`close`.
    """

    def __init__(self, renew_deadline: float, *, clock: Callable[[], float] = time.monotonic):
        if not renew_deadline > 0:
            raise ValueError(f"renew_deadline must be positive, got {renew_deadline}")
        self.renew_deadline = renew_deadline
        self._clock = clock
        self._renewed_at: float | None = None

    def renewed(self, started_at: float) -> None:
        """A renewal whose request was sent at *started_at* (monotonic) succeeded."""
        if self._renewed_at is None or started_at > self._renewed_at:
            self._renewed_at = started_at

    def close(self) -> None:
        """Leadership ended (lost or released): refuse every write from now on."""
        self._renewed_at = None

    def held(self) -> bool:
        if self._renewed_at is None:
            return False
        return self._clock() - self._renewed_at < self.renew_deadline
