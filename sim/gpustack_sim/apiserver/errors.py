"""API errors of the simulated server, rendered as the ``Status`` objects kube-apiserver sends.

Every failure inside the simulator raises :class:`ApiError`; the HTTP layer turns it into a
response whose body is the ``Status``, so clients see the same reasons, codes and messages
(``NotFound``, ``AlreadyExists``, ``Conflict``, ``Invalid``, ``Expired`` ...) as from a real
cluster.
"""

from __future__ import annotations

from typing import Any

from gpustack_sim.apiserver.kinds import KindInfo

_REASONS = {
    400: "BadRequest",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


_DETAILS_ORDER = ("name", "group", "kind", "uid", "causes", "retryAfterSeconds")
"""The fields of ``StatusDetails`` in the order of the Go type (apimachinery meta/v1)."""


def reason_for(code: int) -> str:
    """The ``Status.reason`` kube-apiserver uses for an HTTP code."""
    return _REASONS.get(code, "Unknown" if code >= 400 else "")


def status_body(
    code: int,
    message: str,
    reason: str | None = None,
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A ``meta/v1 Status`` failure body, its fields in the order kube-apiserver writes them
    (clients that compare error text byte for byte see the same)."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason if reason is not None else reason_for(code),
    }
    if details:
        order = {key: index for index, key in enumerate(_DETAILS_ORDER)}
        body["details"] = dict(sorted(details.items(), key=lambda kv: order.get(kv[0], 99)))
    body["code"] = code
    return body


class ApiError(Exception):
    """A request the simulated API server refuses; carries the ``Status`` to answer with."""

    def __init__(
        self,
        code: int,
        message: str,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.status = status_body(code, message, reason, details)
        self.headers = headers or {}


def _details(info: KindInfo, name: str | None) -> dict[str, Any]:
    details: dict[str, Any] = {"kind": info.plural}
    if name:
        details["name"] = name
    if info.group:
        details["group"] = info.group
    return details


def not_found(info: KindInfo, name: str) -> ApiError:
    return ApiError(
        404, f'{info.group_resource} "{name}" not found', "NotFound", _details(info, name)
    )


def already_exists(info: KindInfo, name: str) -> ApiError:
    return ApiError(
        409, f'{info.group_resource} "{name}" already exists', "AlreadyExists", _details(info, name)
    )


def conflict(info: KindInfo, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {info.group_resource} "{name}": {why}',
        "Conflict",
        _details(info, name),
    )


def stale_conflict(info: KindInfo, name: str) -> ApiError:
    return conflict(
        info,
        name,
        "the object has been modified; please apply your changes to the latest version "
        "and try again",
    )


# The cause reasons of apimachinery's field errors, by the message's start
# (k8s.io/apimachinery pkg/util/validation/field/errors.go).
_CAUSE_REASONS = (
    ("Required value", "FieldValueRequired"),
    ("Forbidden", "FieldValueForbidden"),
    ("Unsupported value", "FieldValueNotSupported"),
    ("Duplicate value", "FieldValueDuplicate"),
    ("Too long", "FieldValueTooLong"),
    ("Too many", "FieldValueTooMany"),
    ("Not found", "FieldValueNotFound"),
)


def _cause_reason(message: str) -> str:
    found = (reason for start, reason in _CAUSE_REASONS if message.startswith(start))
    return next(found, "FieldValueInvalid")


def invalid(info: KindInfo, name: str, causes: list[tuple[str, str]]) -> ApiError:
    """422 Invalid; ``causes`` are ``(field, message)`` pairs. Several are listed in brackets,
    as an aggregate of field errors prints."""
    text = ", ".join(f"{f}: {m}" if f else m for f, m in causes)
    if len(causes) > 1:
        text = f"[{text}]"
    details: dict[str, Any] = {
        "name": name,
        "kind": info.kind,
        "causes": [{"reason": _cause_reason(m), "message": m, "field": f} for f, m in causes],
    }
    if info.group:
        details["group"] = info.group
    return ApiError(422, f'{info.kind} "{name}" is invalid: {text}', "Invalid", details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, message, "BadRequest")


def expired(message: str) -> ApiError:
    return ApiError(410, message, "Expired")
