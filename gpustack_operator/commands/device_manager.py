"""``gpustack-operator device-manager``: the per-node accelerator detector (docs/device-manager.md).

``detect`` runs one detection and prints the device groups and the Node labels the agent would
publish. It needs no cluster and no GPU: on a machine without accelerators it says so and
exits 0 (unless exactly one manufacturer was asked for, see ``--no-fast-failed``).

``serve`` runs the per-node agent (``gpustack_operator.devicemanager.agent``): it publishes
the labels as the NodeFeature ``<node>-gpustack-device-manager`` and keeps them current.

Flags also come from the environment: ``GPUSTACK_DEVICE_MANAGER_<FLAG>`` (docs/configuration.md,
shared by every device-manager subcommand) and ``GPUSTACK_DEVICE_MANAGER_<SUBCOMMAND>_<FLAG>`` (one
subcommand only, wins); a flag on the command line wins over both.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
import yaml

from gpustack_operator.commands.argtypes import parse_duration
from gpustack_operator.commands.cluster_flags import (
    add_connection_flags,
    add_serving_flags,
    check_serving_flags,
    connect,
)
from gpustack_operator.commands.envflags import apply_env_defaults
from gpustack_operator.commands.helptext import env_epilog
from gpustack_operator.devicemanager.agent import MIN_MONITOR_PERIOD, DeviceManagerAgent
from gpustack_operator.devicemanager.detection import (
    DetectionConfig,
    DetectionResult,
    DeviceDetection,
    running_under_wsl,
)
from gpustack_operator.devicemanager.detectors.pci import DEFAULT_PCI_ROOT
from gpustack_operator.devicemanager.detectors.sim import SimDetector
from gpustack_operator.devicemanager.pciids import PCI_IDS_ENV
from gpustack_operator.domain.manufacturers import AGENT_MANUFACTURERS
from gpustack_operator.domain.node.nodefeature import DEFAULT_SYSTEM_NAMESPACE
from gpustack_operator.domain.node.simdevices import SIM_DEVICES_ANNOTATION
from gpustack_operator.environment import load_manufacturers
from gpustack_operator.runtime import metrics as runtime_metrics
from gpustack_operator.runtime.manager import Manager, ManagerOptions, run_async

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

    from gpustack_operator.runtime.client import Client

log = structlog.get_logger(__name__)

COMMAND = "device-manager"


def add_detection_flags(parser: argparse._ActionsContainer) -> None:
    """Flags every device-manager subcommand that detects devices shares
    (docs/device-manager.md)."""
    parser.add_argument(
        "--manufacturer",
        action="append",
        metavar="NAME",
        help=f"detect only this manufacturer (repeatable; default: all of "
        f"{', '.join(AGENT_MANUFACTURERS)})",
    )
    parser.add_argument(
        "--no-pci-check",
        action="store_true",
        help="ask the vendor libraries even when PCI sysfs shows no device of that vendor "
        "(forced on under WSL, which has no PCI sysfs)",
    )
    parser.add_argument(
        "--no-fast-failed",
        action="store_true",
        help="do not fail when exactly one manufacturer is configured and none of its devices "
        "is found",
    )
    parser.add_argument(
        "--pci-root",
        type=Path,
        default=DEFAULT_PCI_ROOT,
        metavar="DIR",
        help=f"PCI devices directory in sysfs (default: {DEFAULT_PCI_ROOT})",
    )
    parser.add_argument(
        "--pci-ids",
        type=Path,
        metavar="FILE",
        help=f"PCI ID database for product names (default: ${PCI_IDS_ENV}, else the first of "
        "/usr/share/misc/pci.ids, /usr/share/hwdata/pci.ids, /usr/share/pci.ids)",
    )


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``device-manager`` with its ``detect`` and ``serve`` subcommands."""
    parser = subparsers.add_parser(
        COMMAND,
        help="detect accelerators on this node and report them as node labels",
        description="Detects the accelerators of this node (NVML, amdsmi, PCI sysfs) and "
        "reports them as acceleratable.feature.gpustack.ai/ labels.",
        epilog=env_epilog([COMMAND], "--manufacturer", "nvidia"),
    )
    commands = parser.add_subparsers(dest="device_manager_command", metavar="SUBCOMMAND")
    commands.required = True
    detect = commands.add_parser(
        "detect",
        help="detect once and print the device groups and labels (no cluster needed)",
        description="Detects once and prints the device groups and the labels the agent "
        "would write. Needs no cluster and no GPU.",
        epilog=env_epilog([COMMAND], "--manufacturer", "nvidia", narrower=[COMMAND, "detect"]),
    )
    add_detection_flags(detect)
    detect.add_argument(
        "-o",
        "--output",
        choices=("yaml", "json", "table"),
        default="yaml",
        help="output format (default: yaml)",
    )
    detect.add_argument(
        "--sim-devices",
        metavar="JSON",
        help="report these simulated devices instead of the hardware (the value of the "
        "sim.gpustack.ai/devices annotation; a test double, not for production)",
    )
    detect.set_defaults(handler=run_detect)
    serve = commands.add_parser(
        "serve",
        help="run the per-node agent: publish the device labels and keep them current",
        description="Runs the per-node agent: detects devices, publishes them as the "
        "NodeFeature <node>-gpustack-device-manager, re-detects every --monitor-period, and "
        "serves /healthz, /readyz and /metrics (per-device metrics included).",
        epilog=env_epilog([COMMAND], "--monitor-period", "10", narrower=[COMMAND, "serve"]),
    )
    add_detection_flags(serve.add_argument_group("detection"))
    add_serve_flags(serve)
    serve.set_defaults(handler=run_serve)
    # GPUSTACK_DEVICE_MANAGER_<FLAG>; the console script then applies the more specific
    # GPUSTACK_DEVICE_MANAGER_<SUBCOMMAND>_<FLAG> on top.
    for sub in (detect, serve):
        apply_env_defaults(sub, [COMMAND], os.environ)


def _monitor_period(raw: str) -> float:
    value = parse_duration(raw)
    if not value > MIN_MONITOR_PERIOD:
        raise argparse.ArgumentTypeError(f"must be more than {MIN_MONITOR_PERIOD:g}s, got {raw}")
    return value


def add_serve_flags(parser: argparse.ArgumentParser) -> None:
    """The flags only ``serve`` takes, in groups: the agent, the cluster, the probes."""
    agent = parser.add_argument_group("agent")
    agent.add_argument(
        "--node-name",
        default=os.environ.get("KUBERNETES_NODE_NAME"),
        metavar="NAME",
        help="the Node this agent reports for (default: $KUBERNETES_NODE_NAME)",
    )
    agent.add_argument(
        "--system-namespace",
        default=os.environ.get("KUBERNETES_POD_NAMESPACE") or DEFAULT_SYSTEM_NAMESPACE,
        metavar="NAMESPACE",
        help="namespace of the NodeFeature (default: $KUBERNETES_POD_NAMESPACE, else "
        f"{DEFAULT_SYSTEM_NAMESPACE})",
    )
    agent.add_argument(
        "--monitor-period",
        type=_monitor_period,
        default=5.0,
        metavar="DURATION",
        help="time between device checks, e.g. 5s or 1m; more than 1s (default: 5s)",
    )
    agent.add_argument(
        "--sim-devices-annotation",
        action="store_true",
        help=f"read devices from the Node's {SIM_DEVICES_ANNOTATION} annotation instead of "
        "the hardware (the simulated cluster; not for production)",
    )
    add_connection_flags(parser.add_argument_group("cluster"))
    add_serving_flags(parser.add_argument_group("probes and metrics"))


def build_detection(args: argparse.Namespace) -> DeviceDetection:
    """The detection the flags describe; ``ValueError`` for unknown names or bad settings."""
    no_pci_check = bool(args.no_pci_check)
    if not no_pci_check and running_under_wsl():
        log.info("running under WSL, which has no PCI sysfs: --no-pci-check is forced on")
        no_pci_check = True
    config = DetectionConfig.from_environment(
        args.manufacturer,
        pci_root=args.pci_root,
        pci_ids=args.pci_ids,
        no_pci_check=no_pci_check,
    )
    sim_devices = getattr(args, "sim_devices", None)
    if sim_devices is None:
        return DeviceDetection(config)
    sim = SimDetector(lambda: sim_devices, load_manufacturers(), with_memory=config.with_memory)
    return DeviceDetection(config, sim=sim)


def fails_fast(result: DetectionResult, config: DetectionConfig, no_fast_failed: bool) -> bool:
    """docs/device-manager.md: one manufacturer configured and none of its devices found."""
    return not result.device_count and len(config.manufacturers) == 1 and not no_fast_failed


def run_serve(args: argparse.Namespace) -> int:
    """``device-manager serve``: check the flags (exit 2), then run the agent."""
    if not args.node_name:
        sys.stderr.write(
            "device-manager serve: the node name is required: set KUBERNETES_NODE_NAME "
            "(the downward API's spec.nodeName) or pass --node-name\n"
        )
        return 2
    try:
        check_serving_flags(args)
        detection = build_detection(args)
    except ValueError as exc:
        sys.stderr.write(f"device-manager serve: {exc}\n")
        return 2
    return run_async(lambda: serve(args, detection.config))


def agent_manager(
    args: argparse.Namespace,
    config: DetectionConfig,
    client: Client,
    *,
    metrics_registry: CollectorRegistry | None = runtime_metrics.REGISTRY,
) -> tuple[Manager, DeviceManagerAgent]:
    """The manager running the agent of ``args.node_name`` on *client*, as ``serve`` runs it,
    and the agent. Nothing in it is per process but *metrics_registry*, so one process can run
    several (the real-cluster tier hosts all its nodes' agents in one: docs/realcluster.md)."""
    options = ManagerOptions(
        component="gpustack-device-manager",
        health_probe_bind_address=args.health_probe_bind_address,
        metrics_bind_address=args.metrics_bind_address,
    )
    manager = Manager(client, options)
    agent = DeviceManagerAgent(
        manager,
        config,
        node_name=args.node_name,
        system_namespace=args.system_namespace,
        monitor_period=args.monitor_period,
        simulated=args.sim_devices_annotation,
        metrics_registry=metrics_registry,
    )
    return manager, agent


async def serve(args: argparse.Namespace, config: DetectionConfig) -> int:
    """Connect, check the first detection, then run the agent until SIGTERM/SIGINT."""
    client = await connect(args)
    if client is None:
        return 1
    try:
        manager, agent = agent_manager(args, config, client)
        if not args.sim_devices_annotation:
            first = await agent.detect()
            if fails_fast(first, config, args.no_fast_failed):
                log.error(
                    "no device of the only configured manufacturer was found; exiting "
                    "(pass --no-fast-failed to keep running)",
                    manufacturer=next(iter(config.manufacturers)),
                )
                return 1
            if not first.device_count:
                log.info("no accelerator found; publishing an empty label set")
        return await manager.run_until_signal()
    finally:
        await client.close()


def run_detect(args: argparse.Namespace) -> int:
    """``device-manager detect``: detect once and print; exit 1 only on a fast failure."""
    try:
        detection = build_detection(args)
        result = detection.detect()
    except ValueError as exc:
        sys.stderr.write(f"device-manager detect: {exc}\n")
        return 2
    sys.stdout.write(render(result, args.output))
    if result.device_count:
        return 0
    checked = ", ".join(detection.config.manufacturers)
    sys.stderr.write(f"no accelerator found (checked: {checked})\n")
    if fails_fast(result, detection.config, args.no_fast_failed):
        sys.stderr.write(
            "exactly one manufacturer was asked for and none of its devices was found; "
            "pass --no-fast-failed to accept that\n"
        )
        return 1
    return 0


def render(result: DetectionResult, output: str) -> str:
    """*result* as ``yaml``, ``json`` or a ``table`` for people."""
    document = result.to_document()
    if output == "json":
        return json.dumps(document, indent=2) + "\n"
    if output == "table":
        return _table(document)
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False)


def _columns(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "".join(
        "   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() + "\n"
        for row in rows
    )


def _table(document: dict[str, Any]) -> str:
    summary = [["MANUFACTURER", "SOURCE", "PCI", "DEVICES", "NOTE"]]
    summary += [
        [m["name"], m["source"], str(m["pciDevices"]), str(m["devices"]), m.get("note", "")]
        for m in document["manufacturers"]
    ]
    text = _columns(summary)
    if document["groups"]:
        groups = [["KEY", "PRODUCT", "MEMORY", "COUNT", "UNHEALTHY", "DRIVER", "RUNTIME", "CC"]]
        groups += [
            [
                g["key"],
                g["name"],
                f"{g['memoryMiB']}Mi" if "memoryMiB" in g else "-",
                str(len(g["accelerators"])),
                str(sum(a["unhealthy"] for a in g["accelerators"])),
                g.get("driverVersion", "-"),
                g.get("runtimeVersion", "-"),
                g.get("computeCapability", "-"),
            ]
            for g in document["groups"]
        ]
        text += "\n" + _columns(groups)
    if document["labels"]:
        text += "\n" + "".join(f"{k}={v}\n" for k, v in document["labels"].items())
    return text
