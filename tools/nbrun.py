#!/usr/bin/env python
"""Execute notebooks in place (outputs are the documentation), then nbdev-clean and nbdev-export.

    python tools/nbrun.py [--skip-slow] nbs/13_grads.loss.ipynb [more.ipynb ...]

`--skip-slow` leaves `#| slow` cells unexecuted with the outputs they already have: use it only
when the change cannot alter what those cells print (their recorded outputs stay the documentation)."""
import subprocess, sys
from pathlib import Path
import nbformat
from nbclient import NotebookClient

def _slow(cell) -> bool:
    return cell.cell_type == "code" and any(l.strip().startswith("#|") and "slow" in l.split() for l in cell.source.splitlines()[:3])

def run(path, skip_slow:bool=False):
    path = Path(path).resolve()
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=1800, kernel_name="python3", store_widget_state=False, resources={"metadata": {"path": str(path.parent)}})
    if not skip_slow: client.execute()
    else:
        with client.setup_kernel():
            for i, cell in enumerate(nb.cells):
                if cell.cell_type == "code" and not _slow(cell): client.execute_cell(cell, i)
    nb.metadata.pop("widgets", None)        # widget state (tqdm bars, when ipywidgets is installed): not documentation
    for cell in nb.cells:                   # nor are live widget views, which a static page cannot show
        if cell.cell_type == "code": cell.outputs = [o for o in cell.outputs if "application/vnd.jupyter.widget-view+json" not in o.get("data", {})]
    nbformat.write(nb, path)

if __name__ == "__main__":
    bin_ = Path(sys.executable).parent
    args = sys.argv[1:]; skip = "--skip-slow" in args; args = [a for a in args if a != "--skip-slow"]
    for p in args:
        run(p, skip); subprocess.run([str(bin_/"nbdev-clean"), "--fname", p], check=True)
    subprocess.run([str(bin_/"nbdev-export")], check=True)
