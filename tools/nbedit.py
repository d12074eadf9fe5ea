#!/usr/bin/env python
"""Authoring helper: edit cells of an existing notebook in place, keeping every other cell (ids, outputs) as it is.

    from nbedit import Nb
    nb = Nb("nbs/13_grads.loss.ipynb")
    nb.replace("def per_example_ce", new_source)          # the one cell whose source contains the text
    nb.insert_after("def span_ce", [("code", src), ("markdown", md)])
    nb.save()                                             # then run it: tools/nbrun.py, or pytest tests/test_notebooks.py

Cells are found by a substring of their source, which must match exactly one cell."""
import json, secrets
from pathlib import Path

def _lines(src:str) -> list:
    ls = src.split("\n")
    return [l + "\n" for l in ls[:-1]] + ([ls[-1]] if ls[-1] else [])

class Nb:
    def __init__(self, path):
        self.path = Path(path); self.nb = json.loads(self.path.read_text())
    @property
    def cells(self): return self.nb["cells"]
    def find(self, text:str) -> int:
        hits = [i for i, c in enumerate(self.cells) if text in "".join(c["source"])]
        if len(hits) != 1: raise ValueError(f"{text!r} matches {len(hits)} cells of {self.path.name}")
        return hits[0]
    def _cell(self, kind, src):
        c = {"cell_type": kind, "id": secrets.token_hex(4), "metadata": {}, "source": _lines(src.strip("\n"))}
        if kind == "code": c.update(execution_count=None, outputs=[])
        return c
    def replace(self, text:str, src:str, clear:bool=True):
        c = self.cells[self.find(text)]; c["source"] = _lines(src.strip("\n"))
        if clear and c["cell_type"] == "code": c["outputs"], c["execution_count"] = [], None
    def insert_after(self, text:str|None, cells:list):
        i = len(self.cells) if text is None else self.find(text) + 1
        self.cells[i:i] = [self._cell(k, s) for k, s in cells]
    def insert_before(self, text:str, cells:list):
        i = self.find(text); self.cells[i:i] = [self._cell(k, s) for k, s in cells]
    def delete(self, text:str): del self.cells[self.find(text)]
    def save(self): self.path.write_text(json.dumps(self.nb, indent=1, ensure_ascii=False) + "\n")
