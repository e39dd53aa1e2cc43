"""azjax's layering: no import circle, a trainer free of evaluation and model files, games
without azjax, mctx's public API only, and every import inside a function says why it is there
(a `# reason` comment on its line)."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import mctx
from helpers import ROOT

PACKAGE = ROOT / "azjax"


def _module(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: pathlib.Path) -> list[tuple[ast.stmt, bool]]:
    """(import statement, whether it sits inside a function) of a source file."""
    found = []

    def visit(node: ast.AST, local: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append((child, local))
            inner = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            visit(child, local or inner)

    visit(ast.parse(path.read_text()), False)
    return found


def _targets(node: ast.stmt, module: str, modules: set[str], package: bool) -> set[str]:
    """The azjax modules an import statement loads (a package's submodules included)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            parent = module.split(".")
            parent = parent[: len(parent) - node.level + (1 if package else 0)]
            base = ".".join([*parent, base] if base else parent)
        names = [base] + [f"{base}.{alias.name}" for alias in node.names]
    out = set()
    for name in names:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a, a.b and a.b.c
            if ".".join(parts[:i]) in modules:
                out.add(".".join(parts[:i]))
    return out - {module}


def _graph() -> dict[str, set[str]]:
    paths = {_module(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(paths)
    return {
        name: set().union(
            *(_targets(n, name, modules, p.name == "__init__.py") for n, _ in _imports(p))
        )
        for name, p in paths.items()
    }


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of `graph` (its modules in order, the first repeated), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := walk(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := walk(node)):
            return found
    return None


def test_the_cycle_finder_finds_a_circle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_import_circle_among_azjax_modules():
    graph = _graph()
    assert {"azjax.agents", "azjax.model", "azjax.specs", "azjax.cli.evaluate"} <= graph.keys()
    assert "azjax.specs" in graph["azjax.agents"]
    cycle = _cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_the_trainer_imports_no_evaluation_or_model_file_module():
    """The jitted trainer's imports, followed through every module they load, reach none of
    the host loop's evaluation, gating, resuming or model-file modules."""
    graph, seen, todo = _graph(), set(), ["azjax.trainer"]
    while todo:
        for name in graph[todo.pop()] - seen:
            seen.add(name)
            todo.append(name)
    outside = {"agents", "arena", "export", "model", "referees", "card", "resume", "train"}
    assert not seen & {f"azjax.{name}" for name in outside}, sorted(seen)
    assert "azjax.selfplay" in seen


def test_games_import_without_azjax():
    code = "import sys, games; games.make('connect4')\n"
    code += "assert not [m for m in sys.modules if m.startswith('azjax')], 'azjax imported'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_function_local_imports_say_why():
    lines_without = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text().splitlines()
        for node, local in _imports(path):
            if local and "# " not in source[node.end_lineno - 1]:
                lines_without.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not lines_without, "imports inside functions without a `# reason`: " + ", ".join(
        lines_without
    )


def test_azjax_uses_only_mctx_public_api():
    """mctx's private modules (`mctx._src`) may change in any release that azjax's pin admits:
    azjax imports none of them, anywhere (the tree with chance nodes is azjax's own)."""
    private = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for node, _ in _imports(path)
        for name in [getattr(node, "module", None) or ""] + [a.name for a in node.names]
        if name.startswith("mctx._src")
    ]
    assert not private, private
    used = {
        node.attr
        for path in sorted(PACKAGE.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "mctx"
    }
    assert used, "azjax uses mctx"
    assert used <= set(mctx.__all__), sorted(used - set(mctx.__all__))


def test_specs_import_no_jax():
    graph = _graph()
    tree = ast.parse((PACKAGE / "specs.py").read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        (node.module or "").split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
    }
    assert not imported & {"jax", "flax", "numpy", "games", "azjax"}, imported
    assert not graph["azjax.specs"]
