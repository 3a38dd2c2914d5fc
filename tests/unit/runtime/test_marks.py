"""``Marks``: a predicate that passes every event and keeps keys for a later reconcile."""

from __future__ import annotations

from typing import Any

from gpustack_operator.runtime.predicates import Marks


class DeletedNames(Marks):
    """Marks the name of every deleted object, as the capacity controller's ``Collected``."""

    def delete(self, obj: dict[str, Any]) -> bool:
        self._marked.add(obj["metadata"]["name"])
        return True


def test_a_mark_is_taken_once() -> None:
    marks = DeletedNames()
    assert marks.delete({"metadata": {"name": "a"}})
    assert marks.take("a")
    assert not marks.take("a")
    assert not marks.take("b")


def test_a_mark_given_back_is_taken_again() -> None:
    marks = DeletedNames()
    marks.delete({"metadata": {"name": "a"}})
    assert marks.take("a")
    marks.mark("a")  # what the reconcile did with it failed: the retry must see it
    assert marks.take("a")


def test_every_event_passes() -> None:
    marks = Marks()
    node = {"metadata": {"name": "a"}}
    assert marks.create(node) and marks.update(node, node) and marks.delete(node)
    assert not marks.take("a")
