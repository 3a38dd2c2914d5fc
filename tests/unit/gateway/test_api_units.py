"""Pieces of the API that need no server."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_operator.domain.chain.kueue import KueueVersion
from gpustack_operator.gateway.kinds import pick_version, watched_resources
from gpustack_operator.gateway.kubeconfig import (
    ConfigError,
    check_context,
    check_inline_credentials,
)


def _config(user: dict[str, Any], cluster: dict[str, Any]) -> dict[str, Any]:
    return {
        "clusters": [{"name": "c", "cluster": {"server": "https://x", **cluster}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
    }


def test_inline_credentials_are_accepted() -> None:
    check_inline_credentials(
        _config(
            {"token": "t", "client-certificate-data": "AA==", "client-key-data": "AA=="},
            {"certificate-authority-data": "AA=="},
        )
    )


@pytest.mark.parametrize(
    ("user", "cluster", "field"),
    [
        ({"exec": {"command": "sh"}}, {}, "exec"),
        ({"auth-provider": {"name": "gcp"}}, {}, "auth-provider"),
        ({"tokenFile": "/etc/shadow"}, {}, "tokenFile"),
        ({"client-certificate": "/x.crt", "client-key": "/x.key"}, {}, "client-certificate"),
        ({}, {"certificate-authority": "/ca.crt"}, "certificate-authority"),
    ],
)
def test_file_paths_and_plugins_are_refused(
    user: dict[str, Any], cluster: dict[str, Any], field: str
) -> None:
    with pytest.raises(ConfigError, match=field):
        check_inline_credentials(_config(user, cluster))


def test_kueue_versions() -> None:
    assert pick_version(["v1beta1", "v1beta2"]) is KueueVersion.V1BETA2
    assert pick_version(["v1beta1"]) is KueueVersion.V1BETA1
    assert pick_version(["v1alpha1"]) is None
    resources = watched_resources(KueueVersion.V1BETA1)
    assert resources["clusterqueues"].path() == "/apis/kueue.x-k8s.io/v1beta1/clusterqueues"
    assert resources["localqueues"].namespaced and not resources["cohorts"].namespaced


def test_choosing_a_context() -> None:
    one = _config({}, {})
    assert check_context(one, None, "f") == "x"  # the only one
    assert check_context(one, "x", "f") == "x"
    with pytest.raises(ConfigError, match="no context 'y'"):
        check_context(one, "y", "f")
    two = {**one, "contexts": [{"name": "a"}, {"name": "b"}]}
    with pytest.raises(ConfigError, match="several contexts and no current-context"):
        check_context(two, None, "f")
    assert check_context({**two, "current-context": "b"}, None, "f") is None
