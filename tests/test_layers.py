"""The package's layers, checked from the source: which layer may import which, no import
cycles, and a core that touches no file, environment, network or UI.

Allowed arrows (a layer may import itself and the layers listed):

    core     <- sources, devices
    sources, devices <- planner <- app, cli      (cli launches the app; the app never the cli)
    core     <- probe                            (a leaf: runs inside training processes, and
                                                  no layer imports it)

Every import counts, at module level or inside a function (the lazy imports that keep start-up
fast are still dependencies), except those under ``if TYPE_CHECKING:`` for the layer rules.
"""

from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path

import pytest

import trainmem

ROOT = Path(trainmem.__file__).parent
ALLOWED = {
    "core": {"core"},
    "sources": {"core", "sources"},
    "devices": {"core", "devices"},
    "planner": {"core", "sources", "devices", "planner"},
    "app": {"core", "sources", "devices", "planner", "app"},
    "cli": {"core", "sources", "devices", "planner", "app", "cli"},
    "probe": {"core", "probe"},
}
# The probe is imported by training scripts: none of the dashboard's dependencies. torch,
# transformers, psutil and pynvml are imported lazily, where the probe runs.
PROBE_FORBIDDEN = {
    "textual",
    "rich",
    "huggingface_hub",
    "tomli_w",
    "tomllib",
    "yaml",
    "prometheus_client",
}
# Top-level modules of the package that belong to no layer (the version, `python -m`).
UNLAYERED = {"trainmem", "trainmem.__main__"}
# What the core may not import: files, the environment, processes, the network, UI, drivers.
CORE_FORBIDDEN = {
    "os",
    "io",
    "pathlib",
    "shutil",
    "tempfile",
    "glob",
    "subprocess",
    "socket",
    "urllib",
    "http",
    "importlib",
    "sys",
    "threading",
    "textual",
    "rich",
    "psutil",
    "pynvml",
    "huggingface_hub",
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    name = ".".join(parts)
    return name.removesuffix(".__init__")


@cache
def modules() -> dict[str, Path]:
    return {_module_name(p): p for p in ROOT.rglob("*.py")}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


@cache
def imports(module: str, *, typing_too: bool = False) -> frozenset[str]:
    """Every module ``module`` imports (ours resolved to the submodule, others top-level)."""
    path = modules()[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def add(name: str) -> None:
        found.add(name if name.startswith("trainmem") else name.split(".")[0])

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            if _is_type_checking(node.test) and not typing_too:
                for child in node.orelse:
                    self.visit(child)
                return
            self.generic_visit(node)

        def visit_Import(self, node: ast.Import) -> None:
            for alias in node.names:
                add(alias.name)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            if base == "__future__":
                return
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                add(sub if sub in modules() else base)

    Visitor().visit(ast.parse(path.read_text(encoding="utf-8")))
    found.discard(module)
    return frozenset(found)


def layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ALLOWED else None


def test_every_module_is_in_a_layer():
    stray = [m for m in modules() if layer(m) is None and m not in UNLAYERED]
    assert stray == [], f"modules outside core/sources/devices/planner/app/cli/probe: {stray}"


@pytest.mark.parametrize("module", sorted(m for m in modules() if layer(m)))
def test_imports_follow_the_layers(module: str):
    own = layer(module)
    assert own is not None
    bad = sorted(
        name
        for name in imports(module, typing_too=True)
        if name.startswith("trainmem.")
        and layer(name) not in ALLOWED[own]
        and name not in UNLAYERED
    )
    assert bad == [], f"{module} ({own}) may not import {bad}"


@pytest.mark.parametrize("module", sorted(m for m in modules() if layer(m) == "core"))
def test_core_touches_no_file_environment_network_or_ui(module: str):
    bad = sorted(imports(module, typing_too=True) & CORE_FORBIDDEN)
    assert bad == [], f"{module} imports {bad}"


@pytest.mark.parametrize("module", sorted(m for m in modules() if layer(m) == "probe"))
def test_the_probe_needs_none_of_the_dashboards_dependencies(module: str):
    bad = sorted(imports(module, typing_too=True) & PROBE_FORBIDDEN)
    assert bad == [], f"{module} imports {bad}"


def _cycles(graph: dict[str, frozenset[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for v in graph:
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return found


def test_no_import_cycles():
    graph = {m: frozenset(i for i in imports(m) if i in modules()) for m in modules()}
    assert _cycles(graph) == []


def test_no_import_cycles_even_through_type_only_imports():
    """The screens are typed against app.dashboard's Protocol, not the App class that
    imports them: no circle, even counting imports under ``if TYPE_CHECKING:``."""
    graph = {
        m: frozenset(i for i in imports(m, typing_too=True) if i in modules()) for m in modules()
    }
    assert _cycles(graph) == []


def test_the_checker_sees_a_cycle_and_a_wrong_arrow():
    """The rules above would fail on the mistakes they exist for."""
    assert _cycles({"a": frozenset({"b"}), "b": frozenset({"a"})}) == [["a", "b"]]
    assert "app" not in ALLOWED["planner"] and "cli" not in ALLOWED["app"]
    assert "devices" not in ALLOWED["sources"] and "sources" not in ALLOWED["devices"]
    assert not [name for name, allowed in ALLOWED.items() if "probe" in allowed and name != "probe"]
