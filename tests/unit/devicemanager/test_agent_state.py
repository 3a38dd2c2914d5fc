"""When the agent considers its NodeFeature current (no write) — pure comparisons."""

from __future__ import annotations

import copy
from typing import Any

from gpustack_operator.devicemanager.agent import is_up_to_date
from gpustack_operator.domain.node.nodefeature import device_manager_node_feature


def desired(labels: dict[str, str], uid: str = "uid-1") -> dict[str, Any]:
    obj = device_manager_node_feature("node-a", uid, labels, "gpustack-system")
    assert obj is not None
    return obj


def live(obj: dict[str, Any]) -> dict[str, Any]:
    """What the API returns: the applied object plus server-set fields."""
    out = copy.deepcopy(obj)
    out["metadata"].update({"uid": "nf-1", "resourceVersion": "7", "generation": 1})
    out["metadata"]["labels"]["extra"] = "set-by-someone-else"
    return out


def test_the_same_labels_and_owner_need_no_write() -> None:
    want = desired({"a": "1"})
    assert is_up_to_date(live(want), want)


def test_changed_removed_or_added_labels_need_a_write() -> None:
    want = desired({"a": "1", "b": "2"})
    assert not is_up_to_date(live(desired({"a": "1"})), want)
    assert not is_up_to_date(live(desired({"a": "1", "b": "2", "c": "3"})), want)
    assert not is_up_to_date(live(desired({"a": "1", "b": "3"})), want)


def test_a_new_node_uid_or_lost_metadata_labels_need_a_write() -> None:
    want = desired({"a": "1"})
    assert not is_up_to_date(live(desired({"a": "1"}, uid="old-uid")), want)
    stripped = live(want)
    del stripped["metadata"]["labels"]["nfd.node.kubernetes.io/node-name"]
    assert not is_up_to_date(stripped, want)
