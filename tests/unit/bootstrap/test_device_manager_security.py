"""docs/security.md ("The device manager's DaemonSets") states exactly what each device
manager is granted: its table must match the rendered DaemonSets, row by row."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from gpustack_operator.domain.bootstrap import BootstrapSettings, render_device_manager

REPO = Path(__file__).resolve().parents[3]
PREFIX = "gpustack-operator-device-manager-"


def documented() -> dict[str, tuple[str, ...]]:
    text = (REPO / "docs" / "security.md").read_text(encoding="utf-8")
    section = text.split("### The device manager's DaemonSets", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and re.fullmatch(r"`[a-z]+`", cells[0]):
            rows[cells[0].strip("`")] = tuple(cells[1:])
    return rows


def granted(ds: dict[str, Any]) -> tuple[str, ...]:
    pod = ds["spec"]["template"]["spec"]
    container = pod["containers"][0]
    security = container["securityContext"]
    # What every agent gets alike is stated once in the prose; check it here too.
    assert security["readOnlyRootFilesystem"] is True
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    mounts = [m for m in container["volumeMounts"] if m["name"] in host]
    assert all(m.get("readOnly") is True for m in mounts), "every host path is read-only"
    privileged = security.get("privileged") is True
    if privileged:
        capabilities = "all (privileged)"
    else:
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"] == {"drop": ["ALL"]}
        capabilities = "none"
    runtime = pod.get("runtimeClassName")
    return (
        f"`{runtime}`" if runtime else "",
        "yes" if privileged else "no",
        str(security["runAsUser"]),
        capabilities,
        ", ".join(f"`{m['mountPath']}`" for m in mounts),
    )


def test_the_documented_grants_are_the_rendered_ones() -> None:
    settings = BootstrapSettings()
    daemonsets = render_device_manager(settings, sorted(settings.manufacturers), "img:1")
    rendered = {ds["metadata"]["name"].removeprefix(PREFIX): granted(ds) for ds in daemonsets}
    assert documented() == rendered
