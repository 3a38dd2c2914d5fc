"""Every node's device manager in one process: ``python -m tests.realcluster.agenthost FILE``.

A cluster file of the tier has up to seven accelerated nodes, and each ``device-manager
serve`` process spends seconds of CPU importing the operator before it does anything; on the
2-core machine the tier runs on, seven of them started at once slow everything else down.
This host runs the agents of several nodes in one interpreter, each exactly as ``serve`` runs
it (``gpustack_operator.commands.device_manager.agent_manager``, from that node's own
``device-manager serve`` arguments parsed by the console script's parser), each with its own
client and its own ServiceAccount token bound to its Node, so RBAC and
deploy/components/node-bound-agents judge every node's writes as they judge a Pod's.

*FILE* is JSON: ``{"agents": [[<the arguments after "gpustack-operator">], ...]}``. SIGTERM or
SIGINT stops every agent (each manager shuts down gracefully) and the process exits 0; an
agent that stops on its own stops the host with 1.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import anyio
import structlog

from gpustack_operator.cli import build_parser
from gpustack_operator.commands.cluster_flags import connect
from gpustack_operator.commands.device_manager import agent_manager, build_detection
from gpustack_operator.runtime.client import Client
from gpustack_operator.runtime.logs import configure_logging
from gpustack_operator.runtime.manager import Manager, run_async

log = structlog.get_logger(__name__)


async def _host(argvs: list[list[str]]) -> int:
    parser = build_parser(only="device-manager")
    clients: list[Client] = []
    managers: list[Manager] = []
    code = 0
    try:
        for argv in argvs:
            args = parser.parse_args(argv)
            client = await connect(args)
            if client is None:
                return 1
            clients.append(client)
            # No metrics registry: the tier serves no agent's /metrics, and a process has one.
            manager, _ = agent_manager(
                args, build_detection(args).config, client, metrics_registry=None
            )
            managers.append(manager)
        async with anyio.create_task_group() as tg:

            async def run(manager: Manager) -> None:
                nonlocal code
                try:
                    await manager.run()  # returns only when it stopped on its own
                    log.error("an agent stopped on its own")
                except Exception as exc:
                    log.error("an agent stopped", error=str(exc), exc_info=exc)
                code = 1
                tg.cancel_scope.cancel()  # one agent down: the host goes down with it

            for manager in managers:
                tg.start_soon(run, manager)
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for signum in signals:
                    log.info("signal received; stopping the agents", signal=signum)
                    tg.cancel_scope.cancel()
                    break
    finally:
        for client in clients:
            await client.close()
    return code


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    argvs = [list(a) for a in json.loads(Path(arguments[0]).read_text())["agents"]]
    first = build_parser(only="device-manager").parse_args(argvs[0])
    configure_logging(first.log_level, first.log_format)
    return run_async(lambda: _host(argvs))


if __name__ == "__main__":
    sys.exit(main())
