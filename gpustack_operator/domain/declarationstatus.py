"""What the worker publishes about the declarations in force (docs/worker.md, "Declarations
in force").

The worker keeps one ConfigMap, :data:`STATUS_CONFIGMAP` in its system namespace, with one
block of keys per declaration kind (``teams``, ``pools``): where the declaration in force
came from, the names it declares, its text, and the last refusal with the revision it was
about. ``kubectl get configmap -o yaml`` shows it, ``gpustack-operator queues`` prints it,
and a worker that starts again reads it back, so the declaration in force survives a
restart while the person's ConfigMap is bad. Pure: :func:`status_data` renders a
:class:`DeclarationStatus` as ConfigMap data, :func:`statuses_of` reads them back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

STATUS_CONFIGMAP: Final = "gpustack-declarations"
"""The ConfigMap (system namespace) the worker publishes the declarations in force in."""
KINDS: Final = ("teams", "pools")
"""The declaration kinds, the prefixes of the ConfigMap's keys."""
SOURCE_NONE: Final = "none"
SOURCE_FLAG: Final = "flag"
SOURCE_CONFIGMAP: Final = "configmap"


@dataclass(frozen=True)
class DeclarationStatus:
    """One kind's declaration in force and its last refusal."""

    kind: str
    source: str = SOURCE_NONE
    """``configmap`` (the person's ConfigMap), ``flag`` (``--teams``/``--declared-pools``)
    or ``none``."""
    revision: str = ""
    """The resourceVersion of the ConfigMap whose text is in force."""
    in_force: tuple[str, ...] = ()
    """The teams or pools declared, by name."""
    text: str | None = None
    """The text in force (a ConfigMap's), read back by a worker that starts again."""
    refused: str = ""
    """Why the ConfigMap's latest revision was refused (empty: it was not)."""
    refused_revision: str = ""

    def summary(self) -> str:
        """One line: what is in force, from where, and the refusal if any."""
        names = ", ".join(self.in_force) if self.in_force else "none declared"
        where = {
            SOURCE_CONFIGMAP: f"ConfigMap revision {self.revision}",
            SOURCE_FLAG: "the worker's flag",
        }.get(self.source, "nothing")
        line = f"{self.kind}: {names} (from {where})"
        if self.refused:
            line += f"; revision {self.refused_revision} refused: {self.refused}"
        return line


def status_data(status: DeclarationStatus) -> dict[str, str]:
    """*status* as ConfigMap data keys ``<kind>.<field>`` (the text, when any, as
    ``<kind>.yaml``)."""
    prefix = status.kind
    data = {
        f"{prefix}.source": status.source,
        f"{prefix}.revision": status.revision,
        f"{prefix}.inForce": ",".join(status.in_force),
        f"{prefix}.refused": status.refused,
        f"{prefix}.refusedRevision": status.refused_revision,
    }
    if status.text is not None:
        data[f"{prefix}.yaml"] = status.text
    return data


def statuses_of(configmap: Mapping[str, Any] | None) -> dict[str, DeclarationStatus]:
    """The statuses a :data:`STATUS_CONFIGMAP` holds, by kind (none for a kind it lacks)."""
    data = (configmap or {}).get("data")
    if not isinstance(data, Mapping):
        return {}
    out: dict[str, DeclarationStatus] = {}
    for kind in KINDS:
        if f"{kind}.source" not in data:
            continue

        def field(name: str, kind: str = kind) -> str:
            value = data.get(f"{kind}.{name}")
            return value if isinstance(value, str) else ""

        text = data.get(f"{kind}.yaml")
        out[kind] = DeclarationStatus(
            kind=kind,
            source=field("source") or SOURCE_NONE,
            revision=field("revision"),
            in_force=tuple(n for n in field("inForce").split(",") if n),
            text=text if isinstance(text, str) else None,
            refused=field("refused"),
            refused_revision=field("refusedRevision"),
        )
    return out
