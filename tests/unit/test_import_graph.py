"""The package's import graph: the product never reaches the simulator, and nothing is circular.

Read from the source (every ``import``, at module level or inside a function, but not under
``if TYPE_CHECKING:``), so a lazy import counts as much as a top-level one
(docs/architecture.md, "Who does what").
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "gpustack_operator"
SIMULATOR_PACKAGE = REPO / "sim" / "gpustack_sim"
SIMULATOR = ("gpustack_sim",)
# The product's bridge to the simulator: `sim` registers its flags and imports it lazily.
SIMULATOR_COMMANDS = ("gpustack_operator.commands.sim",)


def package_dirs() -> list[tuple[Path, str]]:
    """Each source directory with the package name it is imported as: the product's package,
    the directories the wheel places inside it (pyproject.toml's force-include, read here so
    that a mapped directory's imports are seen: controllers/) and the simulator's package."""
    wheel = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["hatch"]["build"]
    mapped = wheel["targets"]["wheel"].get("force-include", {})
    dirs = [(PACKAGE, "gpustack_operator")]
    dirs += [(REPO / source, target.replace("/", ".")) for source, target in mapped.items()]
    return [*dirs, (SIMULATOR_PACKAGE, "gpustack_sim")]


def module_files() -> dict[str, Path]:
    """The product's modules and the simulator's (its own distribution, sim/), by name."""
    modules = {}
    for root, name in package_dirs():
        assert not any(p.is_symlink() for p in root.rglob("*")), f"{root}: a link hides files"
        for path in sorted(root.rglob("*.py")):
            parts = [name, *path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


MODULES = module_files()


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node but those under ``if TYPE_CHECKING:`` (never executed)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in [child, *_runtime_nodes(child)])
            continue
        yield node
        yield from _runtime_nodes(node)


def _known(name: str) -> str | None:
    """The package module *name* is, or is inside of; None outside the package."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> set[str]:
    """The package modules *module* imports (``from a import b`` counts ``a.b`` when b is a
    module, else ``a``)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                found.add(
                    f"{source}.{alias.name}" if f"{source}.{alias.name}" in MODULES else source
                )
    return {m for name in found if (m := _known(name)) is not None and m != module}


GRAPH = {module: imports_of(module) for module in MODULES}


def is_simulator(module: str) -> bool:
    return module.startswith(SIMULATOR) or module in SIMULATOR_COMMANDS


def test_the_graph_is_read() -> None:
    cluster_queues = "gpustack_operator.controllers.clusterqueue"
    assert MODULES[cluster_queues] == REPO / "controllers" / "clusterqueue.py"
    assert "gpustack_operator.runtime.controller" in GRAPH[cluster_queues]
    assert "gpustack_operator.domain.chain.queues" in GRAPH[cluster_queues]
    assert "gpustack_sim.apiserver.store" in GRAPH["gpustack_sim.apiserver.server"]


def test_the_product_package_holds_no_simulator_module() -> None:
    """The simulator is a distribution of its own (sim/), so the wheel needs no exclude list."""
    product = [m for m in MODULES if m.startswith("gpustack_operator")]
    assert not [m for m in product if is_simulator(m) and m not in SIMULATOR_COMMANDS]
    assert not (PACKAGE / "sim").exists() and not (PACKAGE / "simcluster").exists()
    wheel = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["hatch"]["build"]
    assert "exclude" not in wheel["targets"]["wheel"]


def test_the_simulator_keeps_its_api_server_double_apart_from_the_stand_ins() -> None:
    """The generic API-server double imports no stand-in and no whole cluster: a new stand-in
    for another project's controller is one module of gpustack_sim.standins."""
    double = [m for m in GRAPH if m.startswith("gpustack_sim.apiserver")]
    reach = sorted(
        f"{m} -> {t}"
        for m in double
        for t in GRAPH[m]
        if t.startswith(("gpustack_sim.standins", "gpustack_sim.cluster"))
    )
    assert not reach, "the API-server double imports stand-ins:\n" + "\n".join(reach)


def test_no_product_module_reaches_the_simulator() -> None:
    """runtime, domain, controllers, devicemanager, gateway and the product's commands run
    without the simulator installed: nothing they import, however indirectly, is part of it."""
    leaks = []
    for module in sorted(m for m in GRAPH if not is_simulator(m)):
        seen, todo = {module}, [module]
        while todo:
            for target in GRAPH[todo.pop()]:
                if target in seen:
                    continue
                if is_simulator(target):
                    leaks.append(f"{module} -> ... -> {target}")
                seen.add(target)
                todo.append(target)
    assert not leaks, "product modules that import the simulator:\n" + "\n".join(leaks)


def test_no_import_cycle() -> None:
    """No module imports itself through others (Tarjan's strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in GRAPH[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(GRAPH):
        if module not in index:
            visit(module)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_no_cycle_between_subpackages() -> None:
    """The simulator's two packages, and the commands and the console script, depend one way."""

    def group(module: str) -> str:
        parts = module.split(".")
        return ".".join(parts[:2]) if len(parts) > 2 else module

    # The `sim` command loads the simulator lazily, as a plugin it may lack; the simulator
    # builds on the product (commands.queues, commands.plan), never the other way.
    edges = {
        (group(a), group(b))
        for a, targets in GRAPH.items()
        for b in targets
        if not (a in SIMULATOR_COMMANDS and b.startswith(SIMULATOR))
    }
    both_ways = sorted(f"{a} <-> {b}" for a, b in edges if a < b and (b, a) in edges)
    assert not both_ways, "subpackages that import each other:\n" + "\n".join(both_ways)


# Imported by product modules although no runtime dependency: only where the module says how
# it does without (amdsmi is the `amd` extra: ROCm's library, present only where ROCm is).
OPTIONAL_IMPORTS = {"amdsmi": "amd"}


def third_party_imports(module: str) -> set[str]:
    """Top-level names of what *module* imports from outside the package and the stdlib."""
    found = set()
    for node in _runtime_nodes(ast.parse(MODULES[module].read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.partition(".")[0])
    return {
        n
        for n in found
        if n not in ("gpustack_operator", "gpustack_sim") and n not in sys.stdlib_module_names
    }


def test_product_modules_need_only_the_runtime_dependencies() -> None:
    """A wheel installed without extras imports every product module: what they import comes
    from ``[project].dependencies`` (the simulator's CEL binding is gpustack-sim's)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    runtime = {
        _canonical(re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0]) for d in project["dependencies"]
    }
    distributions = importlib.metadata.packages_distributions()
    missing = []
    for module in sorted(m for m in GRAPH if not is_simulator(m)):
        for name in sorted(third_party_imports(module)):
            if name in OPTIONAL_IMPORTS:
                assert OPTIONAL_IMPORTS[name] in project["optional-dependencies"]
                continue
            dists = {_canonical(d) for d in distributions.get(name, [name])}
            if not dists & runtime:
                missing.append(f"{module}: {name} ({', '.join(sorted(dists))})")
    assert not missing, "product imports outside the runtime dependencies:\n" + "\n".join(missing)
    simulator = tomllib.loads((REPO / "sim" / "pyproject.toml").read_text())["project"]
    assert "common-expression-language" not in runtime
    assert any("common-expression-language" in d for d in simulator["dependencies"])
    # The built-in kinds' schemas (gpustack_sim/apiserver/builtinschemas.py reads its files).
    assert "kubernetes-validate" not in runtime
    assert any("kubernetes-validate" in d for d in simulator["dependencies"])
    assert "sim" not in project.get("optional-dependencies", {})


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def reconciler_modules() -> set[str]:
    """The modules of controllers/ that define a controller (a module-level ``NAME``)."""
    found = set()
    for module, path in MODULES.items():
        if not module.startswith("gpustack_operator.controllers."):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            target = node.target if isinstance(node, ast.AnnAssign) else None
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
            if isinstance(target, ast.Name) and target.id == "NAME":
                found.add(module)
    return found


def test_no_reconciler_imports_another() -> None:
    """Reconcilers are independent (one writer per kind): what two of them share lives in a
    module that is not a reconciler, and the wiring (``gpustack_operator.wiring``) connects them
    (docs/architecture.md, "Who does what")."""
    reconcilers = reconciler_modules()
    assert {
        "gpustack_operator.controllers.clusterqueue",
        "gpustack_operator.controllers.cohort",
        "gpustack_operator.controllers.declaredpool",
    } <= reconcilers
    crossing = sorted(f"{m} -> {t}" for m in reconcilers for t in GRAPH[m] if t in reconcilers)
    assert not crossing, "reconcilers that import another:\n" + "\n".join(crossing)


def _queue_uses(module: str) -> list[str]:
    """Each ``<receiver>.queue.add...`` in *module*'s source, as ``line: receiver``."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    return [
        f"{node.lineno}: {ast.unparse(node.value.value)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("add")
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "queue"
    ]


def test_no_reconciler_enqueues_into_another() -> None:
    """A reconciler adds keys only to its own controller's queue (``self.controller``), and
    the wiring to none: a change reaches other controllers through a typed channel they
    watch (``runtime/channel.py``; docs/architecture.md, "Who writes what")."""
    reaching = [
        f"{module}:{use}"
        for module in sorted(reconciler_modules())
        for use in _queue_uses(module)
        if not use.endswith(": self.controller")
    ]
    reaching += [
        f"gpustack_operator.wiring:{use}" for use in _queue_uses("gpustack_operator.wiring")
    ]
    assert not reaching, "work queues reached from outside their controller:\n" + "\n".join(
        reaching
    )


LAYERS: tuple[tuple[str, ...], ...] = (
    ("gpustack_operator", "gpustack_operator.domain"),
    ("gpustack_operator.runtime",),
    (
        "gpustack_operator.apis",
        "gpustack_operator.environment",
        "gpustack_operator.fastyaml",
        "gpustack_operator.kr8sobjects",
        "gpustack_operator.kubeconfig",
        "gpustack_operator.labelrepair",
        "gpustack_operator.render",
    ),
    ("gpustack_operator.worker", "gpustack_operator.devicemanager", "gpustack_operator.gateway"),
    ("gpustack_operator.controllers",),
    ("gpustack_operator.wiring",),
    ("gpustack_operator.commands",),
    ("gpustack_operator.cli", "gpustack_operator.__main__"),
)
"""The product's layers, bottom first (docs/architecture.md, "The house"): the pure domain;
the controller runtime; the adapters and shared helpers; the worker's state, the device
manager and the gateway; the reconcilers; the worker's wiring; the commands; the console
script. A module imports its own layer or those below it, never one above."""


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of the longest package prefix of *module*."""
    best, found = -1, -1
    for index, layer in enumerate(LAYERS):
        for prefix in layer:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, found = len(prefix), index
    return found


def test_no_import_up_the_layers() -> None:
    """Every product module sits in a layer, and none imports a layer above its own."""
    product = sorted(m for m in GRAPH if not is_simulator(m))
    unplaced = [m for m in product if layer_of(m) < 0]
    assert not unplaced, "modules in no layer (add them to LAYERS):\n" + "\n".join(unplaced)
    upward = sorted(
        f"{m} (layer {layer_of(m)}) -> {t} (layer {layer_of(t)})"
        for m in product
        for t in GRAPH[m]
        if not is_simulator(t) and layer_of(t) > layer_of(m)
    )
    assert not upward, "imports up the layers:\n" + "\n".join(upward)


DOMAIN_STAGES: tuple[tuple[str, ...], ...] = (
    ("",),
    ("node",),
    ("chain", "bootstrap"),
    ("plan",),
)
"""The domain's stages along the pipeline, first first, as folders of ``domain/``
(docs/architecture.md, "The house"): the vocabulary every stage shares (the modules at the
domain's root); what one Node is; the chain built from node models (and the bootstrap's
objects); the whole, offline. A stage imports its own stage and those before it,
never a later one."""


def stage_of(module: str) -> int:
    """The index in :data:`DOMAIN_STAGES` of the longest package prefix of domain *module*."""
    best, found = -1, -1
    for index, stage in enumerate(DOMAIN_STAGES):
        for folder in stage:
            prefix = ".".join(filter(None, ("gpustack_operator", "domain", folder)))
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, found = len(prefix), index
    return found


def test_the_domain_is_grouped_by_the_pipeline() -> None:
    """Each later stage of ``domain/`` is a package of its own (the vocabulary stays at the
    domain's root)."""
    domain = PACKAGE / "domain"
    for package in ("node", "chain", "plan"):
        assert (domain / package / "__init__.py").is_file(), f"domain/{package}/ is missing"
    assert "gpustack_operator.domain.node.nodemodel" in MODULES
    assert "gpustack_operator.domain.chain.flavors" in MODULES
    assert "gpustack_operator.domain.plan.desired" in MODULES


def test_no_domain_stage_imports_a_later_one() -> None:
    """The node model is built from the Node alone, the chain from node models, ``plan``
    from both: no domain module imports a stage after its own."""
    domain = sorted(m for m in GRAPH if stage_of(m) >= 0)
    later = sorted(
        f"{m} (stage {stage_of(m)}) -> {t} (stage {stage_of(t)})"
        for m in domain
        for t in GRAPH[m]
        if stage_of(t) > stage_of(m)
    )
    assert not later, "domain imports of a later stage:\n" + "\n".join(later)
