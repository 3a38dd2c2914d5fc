"""Pure parts of the client: error mapping and resource paths (no server needed)."""

from __future__ import annotations

import pytest

from gpustack_operator.runtime.client import (
    AlreadyExists,
    ApiError,
    Conflict,
    Gone,
    Invalid,
    NotFound,
    ServerError,
    TooManyRequests,
    error_from_status,
)
from gpustack_operator.runtime.resources import CONFIGMAPS, DEPLOYMENTS, NODES, Resource


@pytest.mark.parametrize(
    ("code", "reason", "expected"),
    [
        (404, "NotFound", NotFound),
        (409, "Conflict", Conflict),
        (409, "AlreadyExists", AlreadyExists),
        (410, "Expired", Gone),
        (422, "Invalid", Invalid),
        (429, "TooManyRequests", TooManyRequests),
        (500, "InternalError", ServerError),
        (503, "ServiceUnavailable", ServerError),
        (418, "Teapot", ApiError),
    ],
)
def test_status_codes_map_to_error_types(code: int, reason: str, expected: type) -> None:
    error = error_from_status(code, {"code": code, "reason": reason, "message": "why"})
    assert type(error) is expected
    assert (error.status, error.reason, str(error)) == (code, reason, "why")


@pytest.mark.parametrize(
    "seconds",
    [float("inf"), float("nan"), -1, 10**400, True, "5", [5]],
    ids=["inf", "nan", "negative", "beyond-a-float", "bool", "string", "list"],
)
def test_a_retry_after_that_is_not_a_finite_number_of_seconds_is_ignored(seconds: object) -> None:
    """Before: an infinite ``retryAfterSeconds`` made an informer wait forever, and one
    beyond a float raised ``OverflowError``."""
    error = error_from_status(429, {"details": {"retryAfterSeconds": seconds}})
    assert type(error) is TooManyRequests
    assert error.retry_after is None


def test_status_fields_that_are_not_strings_are_left_out() -> None:
    error = error_from_status(500, {"reason": 7, "message": {"nested": []}})
    assert (error.reason, str(error)) == ("", "HTTP 500")


def test_retry_after_comes_from_header_or_details() -> None:
    status = {"reason": "TooManyRequests", "details": {"retryAfterSeconds": 4}}
    assert error_from_status(429, status).retry_after == 4.0
    assert error_from_status(429, status, retry_after_header="9").retry_after == 9.0
    # HTTP-date Retry-After values are not used by the API server: fall back to details.
    dated = error_from_status(429, status, retry_after_header="Wed, 21 Oct 2015 07:28:00 GMT")
    assert dated.retry_after == 4.0
    assert error_from_status(429, None).retry_after is None


def test_missing_status_body_still_gives_a_message() -> None:
    assert str(error_from_status(502, None, fallback_message="bad gateway")) == "bad gateway"
    assert str(error_from_status(500, None)) == "HTTP 500"


def test_resource_paths() -> None:
    assert NODES.path() == "/api/v1/nodes"
    assert NODES.path(name="n1", subresource="status") == "/api/v1/nodes/n1/status"
    assert CONFIGMAPS.path("ns") == "/api/v1/namespaces/ns/configmaps"
    assert CONFIGMAPS.path() == "/api/v1/configmaps"  # every namespace (list/watch)
    assert DEPLOYMENTS.path("ns", "d") == "/apis/apps/v1/namespaces/ns/deployments/d"
    assert DEPLOYMENTS.api_version == "apps/v1" and NODES.api_version == "v1"
    flavors = Resource("kueue.x-k8s.io", "v1beta2", "ResourceFlavor", "resourceflavors", False)
    assert flavors.path(name="f") == "/apis/kueue.x-k8s.io/v1beta2/resourceflavors/f"
    assert str(flavors) == "resourceflavors.kueue.x-k8s.io/v1beta2"
    assert hash(flavors) == hash(
        Resource("kueue.x-k8s.io", "v1beta2", "ResourceFlavor", "resourceflavors", False)
    )


def test_resource_path_misuse_is_reported() -> None:
    with pytest.raises(ValueError, match="cluster-scoped"):
        NODES.path("ns", "n1")
    with pytest.raises(ValueError, match="needs an object name"):
        NODES.path(subresource="status")
    with pytest.raises(ValueError, match="is namespaced: pass its namespace"):
        CONFIGMAPS.path(name="a")
