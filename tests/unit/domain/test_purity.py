"""The domain is pure (docs/architecture.md, "Who does what"): no environment reads, no I/O,
no clock. Configuration is read by gpustack_operator.environment and passed in."""

from __future__ import annotations

import re
from pathlib import Path

DOMAIN = Path(__file__).resolve().parents[3] / "gpustack_operator" / "domain"
FORBIDDEN = re.compile(
    r"^\s*(import os\b|from os\b|import contextvars|from pydantic_settings|import pydantic_settings"
    r"|import anyio|import httpx|import socket|import subprocess)"
    r"|os\.environ|getenv\(|ContextVar|time\.time\(|datetime\.now\(",
    re.M,
)


def test_no_module_of_the_domain_reads_the_environment_or_does_io() -> None:
    offenders = {
        str(path.relative_to(DOMAIN)): FORBIDDEN.findall(path.read_text(encoding="utf-8"))
        for path in sorted(DOMAIN.rglob("*.py"))
        if FORBIDDEN.search(path.read_text(encoding="utf-8"))
    }
    assert offenders == {}
