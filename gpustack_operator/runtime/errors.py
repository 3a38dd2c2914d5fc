"""The client's typed errors: what the API server refused, and what never became an answer.

Every failure of a request or a watch is one of these (docs/runtime.md, "Failure types"), so
a long-running loop (an informer, leader election, the gateway's upstream watches) catches
:class:`ApiError` and decides on retry policy without ever seeing a bare ``ValueError`` or
an HTTP library's exception.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .jsondecode import loads

__all__ = [
    "AlreadyExists",
    "ApiError",
    "ApiUnavailable",
    "BadRequest",
    "Conflict",
    "Forbidden",
    "Gone",
    "Invalid",
    "NotFound",
    "ProtocolViolation",
    "ResponseTooLarge",
    "ServerError",
    "TooManyRequests",
    "Unauthorized",
    "UnsendableRequest",
    "WatchInterrupted",
    "WatchStalled",
    "error_from_response",
    "error_from_status",
]


class ApiError(Exception):
    """A request the API server refused or could not answer.

    ``str(error)`` is the server's ``Status.message`` (what kubectl would print).
    ``status`` is the HTTP code (0 when no response came back), ``reason`` the Status reason
    (``NotFound``, ``AlreadyExists``, ``Expired``...), ``retry_after`` the seconds the server
    asked us to wait (``Retry-After`` header or ``details.retryAfterSeconds``), if any.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        reason: str = "",
        retry_after: float | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason
        self.retry_after = retry_after
        self.details: Mapping[str, Any] = details or {}

    def __str__(self) -> str:
        return self.message


class BadRequest(ApiError):
    """HTTP 400: the request is malformed (e.g. a bad selector); retrying will not help."""


class Unauthorized(ApiError):
    """HTTP 401: credentials missing or expired (the client already re-read them once)."""


class Forbidden(ApiError):
    """HTTP 403: RBAC denies the verb; fix the ClusterRole rather than retrying."""


class NotFound(ApiError):
    """HTTP 404: the object (or the kind itself) does not exist."""


class Conflict(ApiError):
    """HTTP 409: a stale resourceVersion or a precondition failed; re-read and retry."""


class AlreadyExists(Conflict):
    """HTTP 409 with reason AlreadyExists: a create hit an existing name."""


class Gone(ApiError):
    """HTTP 410 (or an in-stream ERROR with code 410): the resourceVersion is too old."""


class Invalid(ApiError):
    """HTTP 422: the object fails validation; ``details.causes`` names the fields."""


class TooManyRequests(ApiError):
    """HTTP 429: the server sheds load; wait ``retry_after`` seconds (when given)."""


class ServerError(ApiError):
    """HTTP 5xx: the server failed; retry with backoff."""


class UnsendableRequest(ApiError):
    """The request was refused before anything was sent: a header value (a token from the
    kubeconfig, say) holds a line break or another control character."""


class ApiUnavailable(ApiError):
    """No usable answer: connection refused/reset, request timeout, broken stream."""


class ProtocolViolation(ApiUnavailable):
    """The answer broke HTTP/1.1 framing (conflicting lengths, a malformed chunk size, a
    transfer or content coding that was not asked for, bytes after the answer); the
    connection is closed, never reused."""


class ResponseTooLarge(ApiUnavailable):
    """The answer exceeded a bound (body, watch line, head line or header count); reading
    stopped there and the connection is closed. An informer re-LISTs after backoff."""


class WatchInterrupted(ApiUnavailable):
    """A watch stream broke mid-way (connection reset, truncated body)."""


class WatchStalled(ApiUnavailable):
    """A watch stream sent nothing for longer than its inactivity timeout."""


_ERRORS_BY_CODE: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}


def _parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (HTTP dates are not used by the API server)."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _text(value: Any) -> str:
    """A Status string field; anything else (a number, a nested object) is left out."""
    return value if isinstance(value, str) else ""


def _seconds(value: Any) -> float | None:
    """``details.retryAfterSeconds`` when it is a finite, non-negative number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        seconds = float(value)
    except OverflowError:  # an integer beyond a float
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def error_from_status(
    code: int,
    status: Mapping[str, Any] | None,
    *,
    fallback_message: str = "",
    retry_after_header: str | None = None,
) -> ApiError:
    """Build the typed error for an HTTP *code* and the server's ``Status`` body, if any.

    Used for HTTP error responses and for in-stream watch ERROR events alike, so both map to
    the same exception types.
    """
    body: Mapping[str, Any] = status if isinstance(status, Mapping) else {}
    details = body.get("details")
    details = details if isinstance(details, Mapping) else {}
    reason = _text(body.get("reason"))
    message = _text(body.get("message")) or fallback_message or f"HTTP {code} {reason}".strip()
    retry_after = _parse_retry_after(retry_after_header)
    if retry_after is None:
        retry_after = _seconds(details.get("retryAfterSeconds"))
    cls: type[ApiError]
    if code == 409 and reason == "AlreadyExists":
        cls = AlreadyExists
    elif code >= 500:
        cls = ServerError
    else:
        cls = _ERRORS_BY_CODE.get(code, ApiError)
    return cls(message, status=code, reason=reason, retry_after=retry_after, details=details)


def error_from_response(
    code: int, reason_phrase: str, content: bytes, retry_after_header: str | None
) -> ApiError:
    """Typed error for an HTTP error answer whose body (a ``Status``, usually) was read."""
    try:
        body = loads(content)
    except ValueError:  # not JSON, or nested too deeply to read
        body = None
    text = content.decode("utf-8", "replace").strip()[:500]
    return error_from_status(
        code,
        body if isinstance(body, dict) else None,
        fallback_message=text or f"HTTP {code} {reason_phrase}",
        retry_after_header=retry_after_header,
    )
