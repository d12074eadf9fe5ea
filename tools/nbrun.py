#!/usr/bin/env python
"""Execute notebooks in place (outputs are the documentation), then nbdev-clean and nbdev-export.

    python tools/nbrun.py nbs/05_grads.loss.ipynb [more.ipynb ...]"""
import subprocess, sys
from pathlib import Path
import nbformat
from nbclient import NotebookClient

def run(path):
    path = Path(path).resolve()
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=1800, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    nbformat.write(nb, path)

if __name__ == "__main__":
    bin_ = Path(sys.executable).parent
    for p in sys.argv[1:]:
        run(p); subprocess.run([str(bin_/"nbdev-clean"), "--fname", p], check=True)
    subprocess.run([str(bin_/"nbdev-export")], check=True)
