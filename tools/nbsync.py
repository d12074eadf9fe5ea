#!/usr/bin/env python
"""Authoring helper: write a notebook from a py:percent script, run it, keep its outputs, clean it.

    python tools/nbsync.py SCRIPT.py nbs/NN_name.ipynb [--no-exec]
    python tools/nbsync.py --to-py nbs/NN_name.ipynb SCRIPT.py   # start editing an existing notebook

The notebook in nbs/ stays the source of truth; the script is a scratch copy for editing in a
text editor. After writing, the notebook is executed in place (outputs are the documentation),
then `nbdev-clean` strips volatile metadata and the package is re-exported."""
import subprocess, sys
from pathlib import Path
import jupytext, nbformat

KERNEL = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}

def to_nb(src, dst, execute=True):
    nb = jupytext.read(src, fmt="py:percent")
    nb.metadata = {"kernelspec": KERNEL}
    for c in nb.cells: c.metadata = {k: v for k, v in c.metadata.items() if k == "tags"}
    dst = Path(dst)
    if execute:   # nbclient (a papermill dependency) runs it with nbs/ as the working directory
        from nbclient import NotebookClient
        NotebookClient(nb, timeout=1200, kernel_name="python3", store_widget_state=False, resources={"metadata": {"path": str(dst.parent.resolve())}}).execute()
    nbformat.write(nb, dst)
    subprocess.run([str(Path(sys.executable).with_name("nbdev-clean")), "--fname", str(dst)], check=True)
    subprocess.run([str(Path(sys.executable).with_name("nbdev-export"))], check=True)

if __name__ == "__main__":
    a = sys.argv[1:]
    if a[0] == "--to-py": jupytext.write(jupytext.read(a[1]), a[2], fmt="py:percent")
    else: to_nb(a[0], a[1], execute="--no-exec" not in a)
