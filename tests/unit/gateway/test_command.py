"""The worker-gateway subcommand's flags and its refusals (no server started)."""

from __future__ import annotations

from pathlib import Path

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
    assert defaults.multikueue_manager is None
    assert defaults.multikueue_unreachable_after == 600.0
    assert defaults.multikueue_sync_interval == 5.0
    assert defaults.multikueue_kueue_namespace == "kueue-system"


def test_multikueue_flags_make_the_modes_settings() -> None:
    from gpustack_operator.commands.worker_gateway import _multikueue_settings

    env = {
        "GPUSTACK_WORKER_GATEWAY_MULTIKUEUE_MANAGER": "/etc/m.kubeconfig:hub",
        "GPUSTACK_WORKER_GATEWAY_MULTIKUEUE_MEMBER_KUBECONFIG": "east=/e:sa,west=/w",
        "GPUSTACK_WORKER_GATEWAY_MULTIKUEUE_UNREACHABLE_AFTER": "120",
    }
    args = build_parser(env).parse_args(["worker-gateway", "--multikueue-sync-interval", "2"])
    settings = _multikueue_settings(args)
    assert settings is not None
    assert (settings.manager.kubeconfig, settings.manager.context) == (
        Path("/etc/m.kubeconfig"),
        "hub",
    )
    assert settings.member_kubeconfigs["east"].context == "sa"
    assert settings.member_kubeconfigs["west"].kubeconfig == Path("/w")
    assert settings.policy.unreachable_after == 120.0
    assert settings.sync_interval == 2.0


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
        (
            ["--cluster", "a=/x", "--multikueue-member-kubeconfig", "a=/k"],
            "--multikueue-member-kubeconfig needs --multikueue-manager",
        ),
        (
            [
                "--cluster",
                "a=/x",
                "--multikueue-manager",
                "/m",
                "--multikueue-member-kubeconfig",
                "a=/k",
                "--multikueue-member-kubeconfig",
                "a=/j",
            ],
            "names 'a' twice",
        ),
        (
            [
                "--cluster",
                "a=/x",
                "--multikueue-manager",
                "/m",
                "--multikueue-member-kubeconfig",
                "bad name=/k",
            ],
            "invalid cluster name",
        ),
    ],
)
def test_bad_flags_exit_2_with_a_reason(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["worker-gateway", *argv]) == 2
    assert message in capsys.readouterr().err
