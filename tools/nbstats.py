#!/usr/bin/env python
"""The shape of the literate code: per module notebook, how big its exported cells are, how many
definitions each holds, how many definitions are followed by a test, and how much prose it has.

    python tools/nbstats.py            # table over nbs/*.ipynb (experiments and tutorials excluded)
    python tools/nbstats.py --json     # the same numbers as JSON
    python tools/nbstats.py nbs/20_engines.ipynb ...

Rules (kept simple so anyone can recount them by hand):
- an *exported cell* is a code cell whose first directive lines hold `#| export` or `#| exports`;
- its *lines* are the non-blank lines that are not `#|` directives;
- a *definition* is a top-level `def`, `async def` or `class` in an exported cell, or a `@patch`ed function;
- a definition is *followed by a test* when a code cell after its exported cell and before the next
  exported cell calls a `fastcore.test` function (`test_eq`, `test_fail`, `test_close`, ...) or `assert`s;
  the stricter column *named* also requires that cell (or a demo cell in the same window) to mention
  the definition's name;
- *prose words per exported line*: words of all markdown cells / lines of all exported cells;
- *long*: the share of the notebook's non-blank source lines (every cell, code and markdown) over 120 characters."""
import ast, json, re, statistics, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST_CALL = re.compile(r"\b(test_\w+|test)\s*\(|^\s*assert\b", re.M)
EXPORT = re.compile(r"^#\|\s*(export|exports)\b")

def _src(c) -> str: return "".join(c["source"]) if isinstance(c["source"], list) else c["source"]

def _directives(src:str) -> list[str]:
    out = []
    for l in src.splitlines():
        if l.startswith("#|"): out.append(l)
        elif l.strip(): break
    return out

def is_exported(c) -> bool:
    return c["cell_type"] == "code" and any(EXPORT.match(d) for d in _directives(_src(c)))

def code_lines(src:str) -> int:
    return sum(1 for l in src.splitlines() if l.strip() and not l.startswith("#|"))

def definitions(src:str) -> list[str]:
    "Names of the top-level definitions of a cell (empty when it does not parse, e.g. IPython magics)."
    body = "\n".join(l for l in src.splitlines() if not l.startswith(("#|", "%", "!")))
    try: tree = ast.parse(body)
    except SyntaxError: return []
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]

def notebook_stats(path) -> dict:
    cells = json.loads(Path(path).read_text())["cells"]
    exp = [i for i, c in enumerate(cells) if is_exported(c)]
    lines, defs, tested, named = [], 0, 0, 0
    for k, i in enumerate(exp):
        src = _src(cells[i]); lines.append(code_lines(src))
        window = [_src(c) for c in cells[i + 1:(exp[k + 1] if k + 1 < len(exp) else len(cells))] if c["cell_type"] == "code"]
        has_test = any(TEST_CALL.search(w) for w in window)
        text = "\n".join(window)
        for name in definitions(src):
            defs += 1; tested += has_test
            named += has_test and (re.search(rf"\b{re.escape(name)}\b", text) is not None or name.startswith("_"))
    words = sum(len(_src(c).split()) for c in cells if c["cell_type"] == "markdown")
    src_lines = [l for c in cells for l in _src(c).splitlines() if l.strip()]
    long = sum(len(l) > 120 for l in src_lines)
    return dict(notebook=Path(path).name, exported_cells=len(exp), median_lines=statistics.median(lines) if lines else 0,
                max_lines=max(lines, default=0), definitions=defs, defs_per_cell=defs / len(exp) if exp else 0,
                tested_share=tested / defs if defs else 1.0, named_share=named / defs if defs else 1.0,
                prose_words=words, exported_lines=sum(lines), words_per_line=words / sum(lines) if sum(lines) else 0,
                long_share=long / len(src_lines) if src_lines else 0.0, _lines=lines, _long=(long, len(src_lines)))

def total(rows) -> dict:
    lines = [l for r in rows for l in r["_lines"]]
    defs = sum(r["definitions"] for r in rows)
    return dict(notebook="ALL", exported_cells=len(lines), median_lines=statistics.median(lines) if lines else 0,
                max_lines=max(lines, default=0), definitions=defs, defs_per_cell=defs / len(lines) if lines else 0,
                tested_share=sum(r["tested_share"] * r["definitions"] for r in rows) / defs if defs else 1.0,
                named_share=sum(r["named_share"] * r["definitions"] for r in rows) / defs if defs else 1.0,
                prose_words=sum(r["prose_words"] for r in rows), exported_lines=len(lines) and sum(lines),
                words_per_line=sum(r["prose_words"] for r in rows) / sum(lines) if lines else 0,
                long_share=sum(r["_long"][0] for r in rows) / max(1, sum(r["_long"][1] for r in rows)))

def module_notebooks() -> list[Path]:
    return sorted(p for p in (ROOT/"nbs").glob("*.ipynb") if not p.name.startswith("_") and p.name != "index.ipynb")

def format_table(rows) -> str:
    head = f"{'notebook':<34}{'cells':>6}{'median':>7}{'max':>5}{'defs':>6}{'def/cell':>9}{'tested':>8}{'named':>7}{'words/line':>11}{'long':>6}"
    out = [head, "-" * len(head)]
    for r in rows:
        out.append(f"{r['notebook']:<34}{r['exported_cells']:>6}{r['median_lines']:>7g}{r['max_lines']:>5}{r['definitions']:>6}"
                   f"{r['defs_per_cell']:>9.2f}{r['tested_share']:>8.0%}{r['named_share']:>7.0%}{r['words_per_line']:>11.2f}{r['long_share']:>6.1%}")
    return "\n".join(out)

if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    rows = [notebook_stats(p) for p in (map(Path, args) if args else module_notebooks())]
    rows.append(total(rows))
    if "--json" in sys.argv: print(json.dumps([{k: v for k, v in r.items() if not k.startswith("_")} for r in rows], indent=2))
    else: print(format_table(rows))
