"""What kube-apiserver fills in on a CertificateSigningRequest: who asked for it.

On create the API server sets ``spec.username``, ``uid``, ``groups`` and ``extra`` from the
requesting user, whatever the body said, so signers and approvers can trust them
(docs/simulator.md, "Built-in kinds").
"""

from __future__ import annotations

from typing import Any

from gpustack_operator.sim.kinds import KindInfo
from gpustack_operator.sim.rbac import CURRENT_REQUEST

__all__ = ["set_requestor"]

_REQUESTOR_FIELDS = ("username", "uid", "groups", "extra")


def set_requestor(info: KindInfo, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    """An admission step: a new CSR's requestor fields become the requesting user's."""
    if old is not None or (info.group, info.kind) != (
        "certificates.k8s.io",
        "CertificateSigningRequest",
    ):
        return
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    for key in _REQUESTOR_FIELDS:
        spec.pop(key, None)
    request = CURRENT_REQUEST.get()
    if request is None:  # the simulator's own write: nobody to name
        return
    user = request.user
    spec["username"] = user.name
    if user.uid:
        spec["uid"] = user.uid
    if user.groups:
        spec["groups"] = list(user.groups)
    if user.extra:
        spec["extra"] = {key: list(values) for key, values in user.extra.items()}
