"""The worker-gateway subcommand's flags and its refusals (no server started)."""

from __future__ import annotations

import pytest

from gpustack_operator.cli import build_parser, main


def test_flags_and_environment() -> None:
    env = {"GPUSTACK_WORKER_GATEWAY_PORT": "9999", "GPUSTACK_WORKER_GATEWAY_CLUSTER": "a=/x,b=/y"}
    args = build_parser(env).parse_args(["worker-gateway"])
    assert args.port == 9999 and args.cluster == ["a=/x", "b=/y"]
    assert args.bind_address == "127.0.0.1"
    defaults = build_parser({}).parse_args(["worker-gateway"])
    assert defaults.port == 8090 and defaults.watch_buffer == 1024
    assert not defaults.allow_cluster_registration


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "no clusters"),
        (["--cluster", "bad name=/x"], "invalid cluster name"),
        (["--cluster", "a=/x", "--tls-cert-file", "/c"], "go together"),
        (["--cluster", "a=/x", "--port", "70000"], "outside 0..65535"),
        (["--cluster", "a=/x", "--token-file", "/nonexistent/tokens"], "token file"),
        (
            ["--cluster", "a=/x", "--tls-cert-file", "/n/c", "--tls-private-key-file", "/n/k"],
            "cannot load the TLS certificate",
        ),
    ],
)
def test_bad_flags_exit_2_with_a_reason(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["worker-gateway", *argv]) == 2
    assert message in capsys.readouterr().err
