"""A typed event source that is no informer: values one part of a program sends, which the
controllers that watch it map to keys (controller-runtime's ``source.Channel``).

The program's wiring creates a :class:`Channel`, hands it to the one that sends and to the
controllers that watch it (``ControllerBuilder.watches_channel``), so no controller knows
who else listens and none enqueues into another's work queue (docs/runtime.md,
"Controllers"). Delivery is synchronous and in order, like an informer's event handlers:
``send`` calls each attached handler, which only maps the value to keys and adds them to
its queue. A handler attached later (a controller that starts, or starts again on a new
leadership term) first receives what :attr:`Channel.replay` says the state is now, as an
informer replays its cache to a new handler.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

import structlog

log = structlog.get_logger(__name__)

T = TypeVar("T")


class Channel(Generic[T]):
    """Values of type *T*, sent to every handler attached now; see the module docstring."""

    def __init__(self, name: str, replay: Callable[[], Iterable[T]] | None = None) -> None:
        self.name = name
        self.replay = replay
        """What a handler attached later receives first (the state now, as values)."""
        self._handlers: list[Callable[[T], None]] = []

    def send(self, value: T) -> None:
        """Deliver *value* to every attached handler, in the order they were attached."""
        for handler in list(self._handlers):
            _deliver(self.name, handler, value)

    def attach(self, handler: Callable[[T], None]) -> None:
        """Attach *handler*; it receives the :attr:`replay` values at once."""
        if handler in self._handlers:
            return
        self._handlers.append(handler)
        for value in self.replay() if self.replay is not None else ():
            _deliver(self.name, handler, value)

    def detach(self, handler: Callable[[T], None]) -> None:
        if handler in self._handlers:
            self._handlers.remove(handler)

    @property
    def handlers(self) -> int:
        """How many handlers are attached now."""
        return len(self._handlers)


def _deliver(name: str, handler: Callable[[T], None], value: T) -> None:
    try:
        handler(value)
    except Exception:
        # A mapping bug must not stop the sender, nor the other handlers.
        log.exception("channel handler failed; value dropped", channel=name)
