"""azjax's layering: no import circle, a trainer free of evaluation and model files, games
without azjax, mctx's public API only."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import mctx
from helpers import ROOT

PACKAGE = ROOT / "azjax"


def _imports(path: pathlib.Path) -> list[ast.Import | ast.ImportFrom]:
    return [
        node
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Import | ast.ImportFrom)
    ]


def _graph() -> dict[str, set[str]]:
    """The azjax modules each azjax module imports (a.b.c counts as a, a.b and a.b.c)."""
    paths = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for module, path in paths.items():
        targets = set()
        for node in _imports(path):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    package = module.split(".")
                    keep = len(package) - node.level + (path.name == "__init__.py")
                    base = ".".join([*package[:keep], base] if base else package[:keep])
                names = [base] + [f"{base}.{alias.name}" for alias in node.names]
            for name in names:
                parts = name.split(".")
                targets |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & set(paths)
        graph[module] = targets - {module}
    return graph


def _reached(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for name in graph[todo.pop()] - seen:
            seen.add(name)
            todo.append(name)
    return seen


def test_no_import_circle_among_azjax_modules():
    graph = _graph()
    assert {"azjax.agents", "azjax.model", "azjax.specs", "azjax.cli.evaluate"} <= graph.keys()
    circles = sorted(m for m in graph if m in _reached(graph, m))
    assert not circles, f"modules on an import circle: {circles}"


def test_the_trainer_imports_no_evaluation_or_model_file_module():
    """The jitted trainer's imports, followed through every module they load, reach none of
    the host loop's evaluation, gating, resuming or model-file modules."""
    seen = _reached(_graph(), "azjax.trainer")
    outside = {"agents", "arena", "export", "model", "referees", "card", "resume", "train"}
    assert not seen & {f"azjax.{name}" for name in outside}, sorted(seen)
    assert "azjax.selfplay" in seen


def test_games_import_without_azjax():
    code = "import sys, games; games.make('connect4')\n"
    code += "assert not [m for m in sys.modules if m.startswith('azjax')], 'azjax imported'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_azjax_uses_only_mctx_public_api():
    """mctx's private modules (`mctx._src`) may change in any release azjax's pin admits."""
    private, used = [], set()
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in _imports(path):
            names = [getattr(node, "module", None) or ""] + [a.name for a in node.names]
            private += [f"{path.name}:{node.lineno}" for n in names if n.startswith("mctx._src")]
        used |= {
            node.attr
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Attribute) and getattr(node.value, "id", None) == "mctx"
        }
    assert not private, private
    assert used and used <= set(mctx.__all__), sorted(used - set(mctx.__all__))
