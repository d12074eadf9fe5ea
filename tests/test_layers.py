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


def test_the_report_modules_import_no_torch():
    "Reading or rendering a report (report, report_html, explorer) must not need torch: a fresh interpreter imports them without it."
    import subprocess, sys
    code = "import sys, gradian.report, gradian.report_html, gradian.explorer; print('torch' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=PKG.parent)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False", "a report module imports torch (directly or through a module it imports)"


def _notebook_numbers() -> dict:
    """{module: its notebook's number}, read from each notebook's `#| default_exp` line. A letter after the number
    (`35a_behaviours`) places a notebook between two numbers: the number is kept as a string that sorts so."""
    import json, re
    out = {}
    for nb in (PKG.parent / "nbs").glob("[0-9]*.ipynb"):
        src = "\n".join("".join(c["source"]) for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code")
        if m := re.search(r"^#\|\s*default_exp\s+(\S+)", src, re.M):
            out["gradian." + m.group(1).removesuffix(".__init__")] = _number(nb.name.split("_")[0])
    return out


def _number(prefix: str) -> str:
    "'7' -> '007', '35a' -> '035a': zero-padded, so string order is the reading order."
    digits = prefix.rstrip("abcdefghijklmnopqrstuvwxyz")
    return digits.zfill(3) + prefix[len(digits):]


def forward_imports(num: dict, graph: dict) -> list:
    "Every import of a module from a notebook numbered after its own."
    return sorted(f"{m} (nb {num[m]}) imports {d} (nb {num[d]})" for m, deps in graph.items() if m in num
                  for d in deps if d in num and num[d] > num[m])


def test_notebooks_are_numbered_in_import_order():
    "A module's notebook comes after the notebooks of everything it imports, so the docs read bottom-up without a forward reference."
    num = _notebook_numbers()
    assert num["gradian.core"] == "000" and num["gradian.config"] < num["gradian.cli"] and len(num) >= 30
    late = forward_imports(num, import_graph())
    assert not late, "\n".join(late)


def test_the_order_check_sees_a_forward_import():
    assert forward_imports({"a": 1, "b": 2, "c": 3}, {"a": {"b"}, "b": set(), "c": {"a", "b"}}) == ["a (nb 1) imports b (nb 2)"]
