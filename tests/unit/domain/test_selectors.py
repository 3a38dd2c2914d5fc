"""Label selectors (domain/selectors.py): one implementation of Kubernetes' matching, which
the teams, the pools, the tenant flavors and the simulator's stand-ins and API-server double
all use."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_operator.domain.selectors import labels_match, selector_matches

LABELS = {"team": "ml", "tier": "gold"}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ({}, True),
        ({"matchLabels": {"team": "ml"}}, True),
        ({"matchLabels": {"team": "web"}}, False),
        ({"matchExpressions": [{"key": "team", "operator": "In", "values": ["ml", "x"]}]}, True),
        ({"matchExpressions": [{"key": "absent", "operator": "In", "values": ["ml"]}]}, False),
        ({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["ml"]}]}, False),
        ({"matchExpressions": [{"key": "absent", "operator": "NotIn", "values": ["ml"]}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, True),
        ({"matchExpressions": [{"key": "absent", "operator": "Exists"}]}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, False),
        ({"matchExpressions": [{"key": "absent", "operator": "DoesNotExist"}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "Gt", "values": ["1"]}]}, False),
        (
            {
                "matchLabels": {"team": "ml"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["silver"]}],
            },
            False,
        ),
    ],
)
def test_a_label_selector_as_kubernetes_reads_it(selector: dict[str, Any], matches: bool) -> None:
    assert selector_matches(selector, LABELS) is matches


def test_a_map_of_labels_selects_nodes_carrying_every_pair() -> None:
    assert labels_match({}, LABELS)
    assert labels_match({"team": "ml"}, LABELS)
    assert labels_match((("team", "ml"), ("tier", "gold")), LABELS)
    assert not labels_match({"team": "ml", "zone": "a"}, LABELS)


def test_the_simulator_matches_with_the_same_function() -> None:
    """The simulator's API-server double (RBAC aggregation, admission policies, evictions)
    and its Kueue stand-in (a ClusterQueue's namespaceSelector) use the product's function."""
    from gpustack_sim.apiserver import rbac
    from gpustack_sim.standins import kueue

    assert rbac.label_selector_matches is selector_matches
    assert kueue.selector_matches is selector_matches
    assert not kueue._selector_matches(None, LABELS)  # Kueue: no selector, no namespace
