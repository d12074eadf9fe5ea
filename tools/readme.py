#!/usr/bin/env python
"""Write README.md from nbs/index.ipynb (nbdev-readme needs Quarto, which is not installable here).

    python tools/readme.py          # rewrite README.md
    python tools/readme.py --check  # exit 1 when README.md is out of step with the notebook"""
import json, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

def render(nb_path=ROOT / "nbs" / "index.ipynb") -> str:
    nb = json.loads(Path(nb_path).read_text())
    parts = []
    for c in nb["cells"]:
        src = "".join(c["source"]).strip()
        if not src or src.startswith("#|"): continue
        parts.append(src if c["cell_type"] == "markdown" else f"```python\n{src}\n```")
    head = "<!-- Generated from nbs/index.ipynb by tools/readme.py: edit the notebook, not this file. -->\n\n"
    return head + "\n\n".join(parts) + "\n"

if __name__ == "__main__":
    txt, readme = render(), ROOT / "README.md"
    if "--check" in sys.argv: sys.exit(0 if readme.exists() and readme.read_text() == txt else 1)
    readme.write_text(txt)
