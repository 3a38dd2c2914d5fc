"""Logging setup: JSON lines carry the reconcile context; bad levels are refused clearly."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
import structlog

from gpustack_operator.runtime.logs import LogFormat, configure_logging


@pytest.fixture
def restore_logging() -> Iterator[None]:
    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        structlog.configure(**saved)
        root.handlers[:] = handlers
        root.setLevel(level)


def test_json_lines_carry_bound_context(
    restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging("info", "json")
    log = structlog.get_logger("gpustack_operator.test")
    with structlog.contextvars.bound_contextvars(controller="c", key="ns/x", reconcile_id="r1"):
        log.info("reconciled", changed=2)
    log.debug("hidden at info")
    logging.getLogger("kr8s").info("chatty client line")  # quietened below debug
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line]
    assert len(lines) == 1
    line = lines[0]
    assert line["event"] == "reconciled" and line["changed"] == 2
    assert (line["controller"], line["key"], line["reconcile_id"]) == ("c", "ns/x", "r1")
    assert line["level"] == "info" and "timestamp" in line


def test_console_format_and_debug_level(
    restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging("debug", "console")
    structlog.get_logger("t").debug("visible", answer=42)
    err = capsys.readouterr().err
    assert "visible" in err and "answer=42" in err
    with pytest.raises(json.JSONDecodeError):
        json.loads(err.splitlines()[0])


def _fail_holding_a_secret() -> None:
    credential = "Bearer s3cr3t-t0ken"  # a local of the failing frame
    raise RuntimeError(f"refused ({len(credential)} characters sent)")


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_a_logged_traceback_leaves_out_the_frames_locals(
    restore_logging: None, capsys: pytest.CaptureFixture[str], fmt: LogFormat
) -> None:
    """The traceback names the frames and the error, never their locals (docs/runtime.md,
    "Logging"): they may hold credentials, and rendering a reconcile's cached objects costs
    seconds of CPU per failure."""
    configure_logging("info", fmt)
    try:
        _fail_holding_a_secret()
    except RuntimeError:
        structlog.get_logger("t").exception("reconcile failed")
    err = capsys.readouterr().err
    assert "_fail_holding_a_secret" in err and "refused (19 characters sent)" in err
    assert "s3cr3t" not in err


def test_unknown_level_is_refused(restore_logging: None) -> None:
    with pytest.raises(ValueError, match="debug, info, warning, error"):
        configure_logging("verbose")
