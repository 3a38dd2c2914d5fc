"""Which failed LocalQueue applies mean "the namespace went away" (docs/worker.md, "Writes and
ownership"): those are logged at info instead of retried."""

from __future__ import annotations

from gpustack_operator.controllers.localqueue import namespace_went_away
from gpustack_operator.runtime.client import Forbidden, NotFound


def test_a_missing_or_terminating_namespace_went_away() -> None:
    gone = NotFound(
        'namespaces "team-b" not found', details={"name": "team-b", "kind": "namespaces"}
    )
    assert namespace_went_away(gone, "team-b")
    terminating = Forbidden(
        "unable to create new content in namespace team-b because it is being terminated",
        details={"causes": [{"reason": "NamespaceTerminating", "field": "metadata.namespace"}]},
    )
    assert namespace_went_away(terminating, "team-b")


def test_other_refusals_are_not_a_vanished_namespace() -> None:
    other_namespace = NotFound("", details={"name": "team-c", "kind": "namespaces"})
    assert not namespace_went_away(other_namespace, "team-b")
    missing_crd = NotFound("the server could not find the requested resource")
    assert not namespace_went_away(missing_crd, "team-b")
    rbac = Forbidden('localqueues.kueue.x-k8s.io is forbidden: User "x" cannot patch')
    assert not namespace_went_away(rbac, "team-b")
