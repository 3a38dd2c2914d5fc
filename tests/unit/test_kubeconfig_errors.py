"""Every kubeconfig failure is one line naming the file and the fix, in every subcommand that
reads one (docs/configuration.md, "Kubeconfig errors")."""

from __future__ import annotations

import os
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from gpustack_operator import cli
from gpustack_operator.kubeconfig import KubeconfigError, connect, connect_kr8s

from ..certs import self_signed


def _config(server: str, contexts: tuple[str, ...] = ("a",), current: str | None = "a") -> str:
    document: dict[str, object] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": n, "context": {"cluster": "c", "user": "u"}} for n in contexts],
    }
    if current is not None:
        document["current-context"] = current
    return yaml.safe_dump(document)


def _refused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[str]:
    """An HTTPS listener on 127.0.0.1 with a self-signed certificate no kubeconfig trusts."""
    cert_file, key_file = self_signed(tmp_path, "untrusted-test-server", stem="server")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            try:
                with context.wrap_socket(conn, server_side=True):
                    pass
            except OSError:
                pass  # the client rejects the certificate mid-handshake: what is tested
            finally:
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        done.set()
        thread.join(timeout=5)
        listener.close()


@dataclass(frozen=True)
class Case:
    """A broken kubeconfig (made in a folder) and what its one-line error must say."""

    make: Callable[[Path, str], Path]
    problem: str
    fix: str
    context: str | None = None
    found_at_start: bool = True
    """The file itself is wrong (the gateway refuses it before serving)."""


def _write(name: str, text: str) -> Callable[[Path, str], Path]:
    def make(folder: Path, _server: str) -> Path:
        path = folder / name
        path.write_text(text)
        return path

    return make


def _unreadable(folder: Path, _server: str) -> Path:
    path = folder / "unreadable.yaml"
    path.write_text(_config("https://127.0.0.1:1"))
    path.chmod(0)
    if os.access(path, os.R_OK):  # root reads anything: a directory cannot be read either
        path.chmod(0o600)
        path.unlink()
        path.mkdir()
    return path


def _no_current(folder: Path, _server: str) -> Path:
    return _write("nocurrent.yaml", _config("https://127.0.0.1:1", ("a", "b"), None))(folder, "")


def _with_server(name: str) -> Callable[[Path, str], Path]:
    def make(folder: Path, server: str) -> Path:
        return _write(name, _config(server))(folder, server)

    return make


def _with_user(name: str, user: dict[str, object]) -> Callable[[Path, str], Path]:
    def make(folder: Path, server: str) -> Path:
        document = yaml.safe_load(_config(server))
        document["users"] = [{"name": "u", "user": user}]
        return _write(name, yaml.safe_dump(document))(folder, server)

    return make


CASES = {
    "missing file": Case(
        lambda folder, _server: folder / "absent.yaml", "no such file", "pass an existing"
    ),
    "unreadable": Case(_unreadable, "", "--kubeconfig"),
    "not YAML": Case(_write("garbage.yaml", "{[\n"), "not YAML (line 2", "fix the file"),
    "empty": Case(_write("empty.yaml", ""), "the file is empty", "write a kubeconfig"),
    "no current context": Case(
        _no_current, "no current-context", "pass --context NAME", found_at_start=False
    ),
    "unknown context": Case(
        _with_server("good.yaml"), "no context 'zz'", "pass one of those with --context", "zz"
    ),
    "unreachable server": Case(
        _with_server("refused.yaml"),
        "cannot reach the API server",
        "check the cluster's server address",
        found_at_start=False,
    ),
    "bad certificate": Case(
        _with_server("badcert.yaml"),
        "certificate that does not verify",
        "certificate-authority-data",
        found_at_start=False,
    ),
    "auth-provider user": Case(
        _with_user("provider.yaml", {"auth-provider": {"name": "oidc"}}),
        "uses auth-provider 'oidc', which is not supported",
        "switch it to an exec credential plugin",
        found_at_start=False,
    ),
    "failing exec plugin": Case(
        _with_user(
            "exec.yaml",
            {
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "command": "false",
                    "interactiveMode": "Never",
                }
            },
        ),
        "the exec credential plugin 'false' failed (RuntimeError: Process exited with "
        "non-zero code 1)",
        "run it by hand",
        found_at_start=False,
    ),
}


@pytest.fixture
def server_for(request: pytest.FixtureRequest) -> Callable[[str], str]:
    def pick(case: str) -> str:
        if case == "bad certificate":
            return str(request.getfixturevalue("tls_server"))
        return f"https://127.0.0.1:{_refused_port()}"

    return pick


def _argv(command: str, path: Path, context: str | None) -> list[str]:
    flags = ["--kubeconfig", str(path), *(["--context", context] if context else [])]
    serving = ["--health-probe-bind-address", "0", "--metrics-bind-address", "0"]
    return {
        "worker": ["--log-format", "console", "worker", *flags, *serving],
        "device-manager": [
            "--log-format",
            "console",
            "device-manager",
            "serve",
            "--node-name",
            "n1",
            *flags,
            *serving,
        ],
        "plan": ["plan", *flags],
        "worker-gateway": ["worker-gateway", "--kubeconfig", str(path), "--port", "0"],
    }[command]


def _check_line(text: str, path: Path, case: Case) -> None:
    lines = [line for line in text.splitlines() if str(path) in line]
    assert len(lines) == 1, text
    line = lines[0]
    assert case.problem in line, line
    assert case.fix in line, line
    assert "Traceback" not in text and "object at 0x" not in text, text


@pytest.mark.parametrize("case_name", list(CASES))
@pytest.mark.parametrize("command", ["worker", "device-manager", "plan"])
def test_every_failure_is_one_line_in_every_command(
    command: str,
    case_name: str,
    tmp_path: Path,
    server_for: Callable[[str], str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    case = CASES[case_name]
    path = case.make(tmp_path, server_for(case_name))
    code = cli.main(_argv(command, path, case.context))
    assert code != 0
    _check_line(capsys.readouterr().err, path, case)


@pytest.mark.parametrize(
    "case_name", [n for n, c in CASES.items() if c.found_at_start and c.context is None]
)
def test_the_gateway_refuses_a_broken_file_before_serving(
    case_name: str,
    tmp_path: Path,
    server_for: Callable[[str], str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    case = CASES[case_name]
    path = case.make(tmp_path, server_for(case_name))
    assert cli.main(_argv("worker-gateway", path, None)) == 2
    _check_line(capsys.readouterr().err, path, case)


@pytest.mark.anyio
@pytest.mark.parametrize("case_name", list(CASES))
async def test_the_shared_connect_raises_the_same_line(
    case_name: str, tmp_path: Path, server_for: Callable[[str], str]
) -> None:
    """The gateway's cluster runners connect through this; their retry log carries the line."""
    case = CASES[case_name]
    path = case.make(tmp_path, server_for(case_name))
    with pytest.raises(KubeconfigError) as caught:
        await connect(path, case.context, timeout=10)
    _check_line(str(caught.value), path, case)


@pytest.mark.anyio
@pytest.mark.parametrize("case_name", list(CASES))
async def test_the_kr8s_connection_raises_the_same_line(
    case_name: str, tmp_path: Path, server_for: Callable[[str], str]
) -> None:
    """``queues`` and the gateway's registration connect through kr8s's objects: kr8s's own
    errors (httpx's refused connection, its TLS failure) become the same line."""
    case = CASES[case_name]
    path = case.make(tmp_path, server_for(case_name))
    with pytest.raises(KubeconfigError) as caught:
        await connect_kr8s(path, case.context)
    _check_line(str(caught.value), path, case)
