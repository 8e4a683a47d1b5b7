"""The package's import graph, read with ``ast`` from the source (every ``import``, at module level, inside functions
and under ``TYPE_CHECKING``): no cycles, and no module imports from a layer above its own. Data flows one way:
base helpers -> facts (host, SGLang releases) -> derived plans (memory, profiles) -> the checks' types -> the
knowledge base -> the checks -> what acts on them (launch, diagnose, ...) -> the verbs."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from .conftest import REPO

PKG = REPO / "sglwrap"

# Layer of each top-level module or subpackage (a module may import its own layer or below). A module listed by
# its full name wins over its package.
LAYERS: dict[str, int] = {
    **dict.fromkeys(("sglwrap", "errors", "versions", "fsutil", "distinfo", "term", "log", "envvars", "settings",
                     "diskcache", "yamlcache", "plotting", "sdnotify", "bounds", "interpreter", "hubcache", "record"), 0),
    **dict.fromkeys(("host", "sglang"), 1),
    **dict.fromkeys(("profiles", "memory", "argsplit", "sglang_env"), 2),
    "preflight.model": 3,  # Context, Verdict, Status, FeatureChange: the types checks and the knowledge base share
    "compat": 4,
    "preflight": 5,
    **dict.fromkeys(("diagnose", "inject", "launch", "multinode", "startup_status", "supervise", "systemd_unit",
                     "bench", "rehearse"), 6),
    **dict.fromkeys(("commands", "cli", "entry", "__main__"), 7),
}


def _modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        parts = list(p.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for t in targets:
                while t not in mods and "." in t:
                    t = t.rsplit(".", 1)[0]
                if t in mods and t != name and t.startswith("sglwrap"):
                    graph[name].add(t)
    return graph


def _layer(module: str) -> int:
    rel = module.split(".", 1)[1] if "." in module else "sglwrap"
    parts = rel.split(".")
    for i in range(len(parts), 0, -1):
        key = ".".join(parts[:i])
        if key in LAYERS:
            return LAYERS[key]
    raise AssertionError(f"{module} has no layer in LAYERS: place it in the one-way order")


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(_modules()):
        if v not in index:
            visit(v)
    return out


def test_the_graph_is_read() -> None:
    """The reader sees the imports it must (a reader that saw none would pass everything below)."""
    g = _graph()
    assert "sglwrap.cli" in g["sglwrap.entry"]
    assert "sglwrap.preflight.model" in g["sglwrap.compat.apply"]
    assert "sglwrap.sglang.rules._base" in g["sglwrap.sglang.resolved"]
    assert sum(len(v) for v in g.values()) > 300


def test_no_import_cycles() -> None:
    cycles = _cycles(_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_no_upward_imports() -> None:
    bad = [f"{a} (layer {_layer(a)}) imports {b} (layer {_layer(b)})"
           for a, targets in sorted(_graph().items()) for b in sorted(targets) if _layer(b) > _layer(a)]
    assert not bad, "\n".join(bad)


def test_cycle_finder_finds_a_cycle() -> None:
    g = {"sglwrap.errors": {"sglwrap.versions"}, "sglwrap.versions": {"sglwrap.errors"}}
    assert _cycles(g) == [["sglwrap.errors", "sglwrap.versions"]]


# Maintainers' generators of bundled data live in tools/ (outside the package, not in the wheel): they may import
# sglwrap, never the reverse. One generator still inside the package must not be imported by the code a user runs.
GENERATORS = {"sglwrap.sglang.check_defaults"}
TOOLS = REPO / "tools"


def _imported_names(path: Path) -> set[str]:
    """Every absolute module name ``path`` imports (``import a.b``, ``from a.b import c``), anywhere in the file."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module)
    return out


def test_generators_are_not_imported_at_run_time() -> None:
    bad = [f"{a} imports {b}" for a, targets in sorted(_graph().items()) if a not in GENERATORS
           for b in sorted(targets & GENERATORS)]
    assert not bad, "\n".join(bad)


def test_the_generators_live_in_tools_outside_the_package() -> None:
    names = {p.name for p in TOOLS.glob("*.py")}
    assert {"gen_model_parallel.py", "gen_catalogue.py", "gen_memory_fits.py", "gen_release_pins.py"} <= names
    left = [str(p.relative_to(REPO)) for p in PKG.rglob("*.py")
            if p.name in names or p.stem in ("generate_model_parallel", "fitting")]
    assert not left, left


def test_no_module_of_the_package_imports_tools() -> None:
    bad = [f"{name} imports {t}" for name, path in sorted(_modules().items()) for t in sorted(_imported_names(path))
           if t == "tools" or t.startswith("tools.")]
    assert not bad, "\n".join(bad)


def test_the_tools_reader_sees_a_tools_import(tmp_path: Path) -> None:
    """The reader above would pass everything if it saw no imports: it sees one of each form."""
    f = tmp_path / "m.py"
    f.write_text("import tools.gen_catalogue\ndef f():\n    from tools import gen_memory_fits\n")
    assert _imported_names(f) == {"tools.gen_catalogue", "tools"}
    assert "sglwrap.sglang.generate" in _imported_names(TOOLS / "gen_model_parallel.py")
