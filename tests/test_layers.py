"""The package's import graph, read from the source with `ast` (imports inside functions included): no cycles, and nothing
below the entry points imports them. `gradian.cli` and `gradian.demo` sit on top; `gradian.testing` holds test fixtures and
must never be imported by runtime code."""
import ast, functools
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "gradian"
TOP = {"gradian.cli", "gradian.demo", "gradian.testing"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, name: str, known: set) -> set:
    "Every gradian module `path` imports, at module level or inside functions (relative imports resolved)."
    pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import): targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else: continue
        for t in targets:
            while t and t not in known: t = t.rpartition(".")[0]
            if t and t != name and t != "gradian": out.add(t)
    return out


@functools.lru_cache(maxsize=None)
def import_graph() -> dict:
    files = {_module_name(p): p for p in PKG.rglob("*.py") if p.name != "_modidx.py"}
    known = set(files)
    return {m: _imports(p, m, known) for m, p in files.items()}


def _cycle(graph: dict):
    "One import cycle as a list of modules, or None."
    state, stack = {}, []
    def visit(m):
        state[m] = 1; stack.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1: return stack[stack.index(d):] + [d]
            if d not in state and (c := visit(d)): return c
        state[m] = 2; stack.pop()
    for m in sorted(graph):
        if m not in state and (c := visit(m)): return c


def test_the_graph_is_read():
    g = import_graph()
    assert "gradian.query.spans" in g["gradian.attribution"] and "gradian.core" in g["gradian.config"]
    assert "gradian.model.core" in g["gradian.model.training"]         # a function-level import is seen


def test_no_import_cycles():
    assert _cycle(import_graph()) is None, " -> ".join(_cycle(import_graph()))


def test_the_cycle_finder_finds_cycles():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("top", sorted(TOP))
def test_nothing_below_imports_the_top(top):
    g = import_graph()
    allowed = {"gradian.cli": set(), "gradian.demo": {"gradian.cli"}, "gradian.testing": set()}[top]
    users = sorted(m for m, deps in g.items() if top in deps and m not in allowed and m != top)
    assert not users, f"{top} is imported by {users}"
