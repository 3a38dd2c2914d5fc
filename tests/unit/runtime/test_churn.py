"""KeyChurn: a key reconciled ``limit`` times within one window churns until a whole window
passes below the limit; quiet keys are forgotten."""

from __future__ import annotations

import pytest

from gpustack_operator.runtime.churn import KeyChurn


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_key_churns_at_the_limit_and_settles_a_window_later() -> None:
    clock = Clock()
    churn = KeyChurn(limit=5, window=10.0, clock=clock)
    became = [churn.record("a") for _ in range(5)]
    assert became == [False, False, False, False, True]
    churn.record("b")
    assert churn.churning() == {"a": 5}
    clock.now = 12.0  # a new window: the last one was at the limit, so still churning
    assert churn.record("a") is False
    assert churn.churning() == {"a": 5}
    clock.now = 22.5  # a whole window below the limit
    assert churn.churning() == {}
    clock.now = 50.0
    assert churn.churning() == {} and churn._keys == {}, "quiet keys are forgotten"


def test_a_key_reconciled_often_but_below_the_limit_never_churns() -> None:
    clock = Clock()
    churn = KeyChurn(limit=5, window=10.0, clock=clock)
    for step in range(100):
        clock.now = step * 2.6  # four per window, forever
        assert churn.record("steady") is False
    assert churn.churning() == {}


def test_a_churning_key_announced_once_per_bout() -> None:
    clock = Clock()
    churn = KeyChurn(limit=3, window=1.0, clock=clock)
    announced = []
    for step in range(60):
        clock.now = step * 0.1  # ten a window, for six windows
        announced.append(churn.record("hot"))
    assert announced.count(True) == 1


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="churn limit"):
        KeyChurn(limit=0)
