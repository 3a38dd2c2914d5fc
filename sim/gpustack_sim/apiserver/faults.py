"""Fault injection for the simulated API server (chaos tests and resilience checks).

A :class:`Fault` matches requests by verb and kind and either answers with an error
``Status`` (nothing is changed: faults are checked before any write), delays the answer, or,
for watches, accepts the stream and cuts it. ``count`` limits a fault to the first N matching
requests; ``share`` fires it for a random share of them (seeded, so runs repeat).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from gpustack_sim.apiserver.errors import ApiError, reason_for

VERBS = frozenset(
    {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "apply"}
)


@dataclass
class Fault:
    """One injected misbehaviour.

    verb: an audit verb, "apply" (server-side apply only; "patch" matches applies too) or "*".
    kind: a Kind name ("Node") or "*".
    status: HTTP code to answer with (409, 410, 429, 500, ...); None for a delay-only or a
        cut-only fault. A 410 on a watch is sent in-stream as an ERROR event, as the real
        server reports an expired resourceVersion; other codes are HTTP errors.
    count: fire for the first N matching requests only; share: fire with this probability.
    delay: seconds to wait before answering (applies even when status is None).
    cut_watch: accept the watch, send the initial events (or ``after_events`` events), then
        close the connection abruptly.
    retry_after: seconds for the Retry-After header (429 defaults to 1).
    write_delay: watches: seconds each write to the stream waits first (events and
        bookmarks alike), as on a congested connection or with a client slow to read.
    """

    verb: str = "*"
    kind: str = "*"
    status: int | None = 500
    count: int | None = None
    share: float | None = None
    delay: float = 0.0
    cut_watch: bool = False
    retry_after: int | None = None
    message: str | None = None
    after_events: int | None = None
    write_delay: float = 0.0
    fired: int = field(default=0)

    def matches(self, verb: str, kind: str) -> bool:
        verb_ok = self.verb in ("*", verb) or (self.verb == "patch" and verb == "apply")
        return verb_ok and self.kind in ("*", kind)

    @property
    def exhausted(self) -> bool:
        return self.count is not None and self.fired >= self.count

    def error(self) -> ApiError | None:
        """The error this fault answers with, or None when it only delays or cuts."""
        if self.status is None:
            return None
        code = self.status
        message = self.message or f"injected fault: {reason_for(code) or code}"
        headers: dict[str, str] = {}
        details = None
        if code == 429 or self.retry_after is not None:
            seconds = self.retry_after if self.retry_after is not None else 1
            headers["Retry-After"] = str(seconds)
            details = {"retryAfterSeconds": seconds}
        return ApiError(code, message, reason_for(code), details, headers)


class Faults:
    """The fault table of one simulated server."""

    def __init__(self, seed: int | None = None) -> None:
        self._faults: list[Fault] = []
        self._random = random.Random(seed)

    def seed(self, value: int) -> None:
        """Reseed the generator behind ``share`` faults."""
        self._random.seed(value)

    def add(
        self,
        verb: str = "*",
        kind: str = "*",
        status: int | None = 500,
        count: int | None = None,
        share: float | None = None,
        delay: float = 0.0,
        cut_watch: bool = False,
        retry_after: int | None = None,
        message: str | None = None,
        after_events: int | None = None,
        write_delay: float = 0.0,
    ) -> Fault:
        """Inject a fault; see :class:`Fault`. Returns it (``fault.fired`` counts hits)."""
        if verb != "*" and verb not in VERBS:
            raise ValueError(f"unknown verb {verb!r}; use one of {sorted(VERBS)} or '*'")
        if share is not None and not 0.0 <= share <= 1.0:
            raise ValueError(f"share must be within 0..1, got {share}")
        fault = Fault(
            verb,
            kind,
            status,
            count,
            share,
            delay,
            cut_watch,
            retry_after,
            message,
            after_events,
            write_delay,
        )
        self._faults.append(fault)
        return fault

    def remove(self, fault: Fault) -> None:
        if fault in self._faults:
            self._faults.remove(fault)

    def clear(self) -> None:
        self._faults.clear()

    def pick(self, verb: str, kind: str) -> Fault | None:
        """The first fault that fires for this request (and count it), or None."""
        for fault in self._faults:
            if fault.exhausted or not fault.matches(verb, kind):
                continue
            if fault.share is not None and self._random.random() >= fault.share:
                continue
            fault.fired += 1
            return fault
        return None
